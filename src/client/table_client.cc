#include "client/table_client.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/table_client_impl.h"

namespace pstrain {
namespace {

using table_client_internal::ForEachRun;

// A table's keys on one PS go into requests in slices of at most this many keys.
int64_t KeysPerSlice(const TableRequestLimits& limits, int64_t bytes_per_key) {
  return std::max<int64_t>(1, std::min(limits.max_keys, limits.max_payload_bytes / bytes_per_key));
}

}  // namespace

absl::Status TableClient::Impl::CheckTableCount(const char* what, size_t n) const {
  if (n == tables_.size()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " of keys for ", n, " tables, but the client has ", tables_.size()));
}

absl::Status TableClient::Impl::CheckRows(const Part& p, const LookupResponse& resp) const {
  const TableRef& table = tables_[p.table];
  const size_t keys = p.end - p.begin;
  const size_t bytes = p.entry < resp.tables_size() ? resp.tables(p.entry).rows().size() : 0;
  if (p.entry < resp.tables_size() && bytes == keys * table.dim * sizeof(float)) {
    return absl::OkStatus();
  }
  const std::string where =
      absl::StrCat("Lookup at ", TaskName("ps", p.ps), ": table \"", table.name, "\"");
  if (keys > 0 && bytes % (keys * sizeof(float)) == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, " has rows of ", bytes / (keys * sizeof(float)),
                     " floats, but this client was made for dim ", table.dim));
  }
  return absl::InternalError(absl::StrCat(where, ": the answer has ", bytes, " bytes of rows for ",
                                          keys, " keys of dim ", table.dim));
}

void TableClient::Impl::GroupByPs(size_t t, const uint64_t* keys, size_t n) {
  Group& g = groups_[t];
  g.ps_of.resize(n);
  g.begin.assign(num_ps_ + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    g.ps_of[i] = PsOfKey(keys[i], num_ps_);
    ++g.begin[g.ps_of[i] + 1];
  }
  for (int p = 0; p < num_ps_; ++p) g.begin[p + 1] += g.begin[p];
  g.order.resize(n);
  // Counting sort; `begin` is shifted by one place while filling and restored after.
  for (size_t i = 0; i < n; ++i) g.order[g.begin[g.ps_of[i]]++] = static_cast<uint32_t>(i);
  for (int p = num_ps_; p > 0; --p) g.begin[p] = g.begin[p - 1];
  g.begin[0] = 0;
}

void TableClient::Impl::Plan(bool every_table) {
  parts_.clear();
  targets_.clear();
  // Room left in a request for its names and framing.
  constexpr int64_t kEntryOverhead = 64;
  for (int ps = 0; ps < num_ps_; ++ps) {
    int request = -1, entries = 0;
    int64_t bytes = 0;
    for (size_t t = 0; t < tables_.size(); ++t) {
      const Group& g = groups_[t];
      const int64_t first = g.begin[ps], count = g.begin[ps + 1] - first;
      if (count == 0 && !every_table) continue;
      const int64_t per_key = 8 + int64_t{4} * tables_[t].dim;
      const int64_t slice = KeysPerSlice(limits_, per_key);
      int64_t done = 0;
      do {
        const int64_t take = std::min(count - done, slice);
        const int64_t need =
            take * per_key + kEntryOverhead + static_cast<int64_t>(tables_[t].name.size());
        // A table appears at most once per request, so its second slice starts a new one.
        if (request < 0 || done > 0 || bytes + need > limits_.max_payload_bytes) {
          request = static_cast<int>(targets_.size());
          targets_.push_back(ps);
          entries = 0;
          bytes = 0;
        }
        parts_.push_back(
            {request, entries++, static_cast<int>(t), ps, first + done, first + done + take});
        bytes += need;
        done += take;
      } while (done < count);
    }
  }
}

void TableClient::Impl::CopyKeys(const Part& p, const uint64_t* keys, std::string* out) const {
  const std::vector<uint32_t>& order = groups_[p.table].order;
  out->resize((p.end - p.begin) * sizeof(uint64_t));
  char* dst = out->data();
  ForEachRun(order, p.begin, p.end, [&](int64_t at, size_t first, size_t count) {
    std::memcpy(dst + at * sizeof(uint64_t), keys + first, count * sizeof(uint64_t));
  });
}

absl::Status TableClient::Impl::Lookup(const std::vector<std::vector<uint64_t>>& keys,
                                       std::vector<std::vector<float>>* rows, uint64_t min_version,
                                       int64_t clock) {
  if (absl::Status s = CheckTableCount("lookup", keys.size()); !s.ok()) return s;
  for (size_t t = 0; t < tables_.size(); ++t) {
    const std::vector<uint64_t>& k = keys[t];
    if (k.size() > std::numeric_limits<uint32_t>::max()) {
      return absl::InvalidArgumentError(absl::StrCat("table \"", tables_[t].name, "\": lookup of ",
                                                     k.size(), " keys in one call"));
    }
    index_.Reset(k.size());
    for (size_t i = 0; i < k.size(); ++i) {
      bool inserted = false;
      const uint32_t first = index_.Insert(k[i], static_cast<uint32_t>(i), &inserted);
      if (!inserted) {
        return absl::InvalidArgumentError(
            absl::StrCat("table \"", tables_[t].name, "\": key ", k[i],
                         " appears twice in one lookup (positions ", first, " and ", i,
                         "); a lookup takes distinct keys"));
      }
    }
    GroupByPs(t, k.data(), k.size());
  }
  Plan(/*every_table=*/min_version > 0);
  const size_t n = targets_.size();
  if (lookup_reqs_.size() < n) {
    lookup_reqs_.resize(n);
    lookup_resps_.resize(n);
  }
  for (size_t r = 0; r < n; ++r) {
    LookupRequest& req = lookup_reqs_[r];
    *req.mutable_sender() = sender_;
    req.mutable_tables()->Clear();  // keeps the cleared entries (and their strings) for reuse
    req.set_min_version(min_version);
    req.set_clock(clock);
  }
  for (const Part& p : parts_) {
    TableKeys* tk = lookup_reqs_[p.request].add_tables();
    tk->set_table(tables_[p.table].name);
    CopyKeys(p, keys[p.table].data(), tk->mutable_keys());
  }
  absl::Status s = peers_.FanOut("Lookup", targets_, lookup_reqs_, lookup_resps_, /*retry=*/true,
                                 [](auto* async, auto* ctx, auto* req, auto* resp, auto done) {
                                   async->Lookup(ctx, req, resp, std::move(done));
                                 });
  if (!s.ok()) return s;
  rows->resize(tables_.size());
  for (size_t t = 0; t < tables_.size(); ++t) {
    (*rows)[t].resize(keys[t].size() * static_cast<size_t>(tables_[t].dim));
  }
  for (const Part& p : parts_) read_[Slot(p.ps, p.table)] = std::numeric_limits<uint64_t>::max();
  for (const Part& p : parts_) {
    const LookupResponse& resp = lookup_resps_[p.request];
    const TableRef& table = tables_[p.table];
    const size_t row_bytes = static_cast<size_t>(table.dim) * sizeof(float);
    if (absl::Status st = CheckRows(p, resp); !st.ok()) return st;
    const char* src = resp.tables(p.entry).rows().data();
    float* out = (*rows)[p.table].data();
    const std::vector<uint32_t>& order = groups_[p.table].order;
    ForEachRun(order, p.begin, p.end, [&](int64_t at, size_t first, size_t count) {
      std::memcpy(out + first * table.dim, src + at * row_bytes, count * row_bytes);
    });
    uint64_t& v = read_[Slot(p.ps, p.table)];
    v = std::min(v, resp.tables(p.entry).version());
  }
  min_read_ = parts_.empty() ? 0 : std::numeric_limits<uint64_t>::max();
  for (const Part& p : parts_) {
    versions_[Slot(p.ps, p.table)] = read_[Slot(p.ps, p.table)];
    min_read_ = std::min(min_read_, read_[Slot(p.ps, p.table)]);
  }
  return absl::OkStatus();
}

TableClient::TableClient(const std::vector<std::string>& ps_addresses, std::vector<TableRef> tables,
                         Sender sender, absl::Duration timeout, TableRequestLimits limits)
    : impl_(std::make_unique<Impl>(ps_addresses, std::move(tables), std::move(sender), timeout,
                                   limits)) {}

TableClient::~TableClient() = default;

absl::Status TableClient::Lookup(const std::vector<std::vector<uint64_t>>& keys,
                                 std::vector<std::vector<float>>* rows, uint64_t min_version,
                                 int64_t clock) {
  return impl_->Lookup(keys, rows, min_version, clock);
}

absl::Status TableClient::Push(const std::vector<std::vector<uint64_t>>& keys,
                               const std::vector<std::vector<float>>& grads, bool every_ps,
                               int* stale_dropped, const PushTag* tag) {
  return impl_->Push(keys, grads, every_ps, stale_dropped, tag);
}

uint64_t TableClient::min_version_read() const { return impl_->min_version_read(); }
const std::vector<TableRef>& TableClient::tables() const { return impl_->tables(); }
void TableClient::set_canceller(CallCanceller* canceller) { impl_->set_canceller(canceller); }

}  // namespace pstrain
