#include "client/table_client.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/fan_out.h"
#include "common/keys.h"

namespace pstrain {
namespace {

static_assert(std::endian::native == std::endian::little,
              "keys and rows travel as little-endian arrays, copied as they lie in memory");

// Key -> slot index for one batch, reset in O(1). absl::flat_hash_map would do, but its clear()
// frees any array past 127 slots, so every batch would allocate anew; this one keeps its array
// and forgets keys by bumping an epoch. Open addressing with linear probing on MixKey(key).
class KeyIndex {
 public:
  // Forgets every key and makes room for `n` keys.
  void Reset(size_t n) {
    const size_t cap = std::bit_ceil(std::max<size_t>(16, 2 * n));
    if (cap > slots_.size()) slots_.assign(cap, Slot{});
    mask_ = cap - 1;
    if (++epoch_ == 0) {  // the stamps wrapped: forget them for real
      std::fill(slots_.begin(), slots_.end(), Slot{});
      epoch_ = 1;
    }
  }
  // The value of `key`, after storing `value` for it if it was absent; `inserted` says which.
  uint32_t Insert(uint64_t key, uint32_t value, bool* inserted) {
    for (size_t i = MixKey(key) & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.epoch != epoch_) {
        s = {key, value, epoch_};
        *inserted = true;
        return value;
      }
      if (s.key == key) {
        *inserted = false;
        return s.value;
      }
    }
  }

 private:
  struct Slot {
    uint64_t key = 0;
    uint32_t value = 0;
    uint32_t epoch = 0;  // the slot holds a key of this batch iff epoch == epoch_
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  uint32_t epoch_ = 0;
};

// Splits order[begin, end) into runs of consecutive positions and calls copy(offset, first,
// count) for each: order[begin + offset + i] == first + i for i < count. Keys already grouped
// by PS (one PS, or sorted input) are then copied in one piece rather than row by row.
template <typename Copy>
void ForEachRun(const std::vector<uint32_t>& order, int64_t begin, int64_t end, Copy copy) {
  for (int64_t j = begin; j < end;) {
    int64_t k = j + 1;
    while (k < end && order[k] == order[k - 1] + 1) ++k;
    copy(j - begin, static_cast<size_t>(order[j]), static_cast<size_t>(k - j));
    j = k;
  }
}

// A table's keys on one PS go into requests in slices of at most this many keys.
int64_t KeysPerSlice(const TableRequestLimits& limits, int64_t bytes_per_key) {
  return std::max<int64_t>(1, std::min(limits.max_keys, limits.max_payload_bytes / bytes_per_key));
}

}  // namespace

class TableClient::Impl {
 public:
  Impl(const std::vector<std::string>& ps_addresses, std::vector<TableRef> tables, Sender sender,
       absl::Duration timeout, TableRequestLimits limits)
      : tables_(std::move(tables)),
        sender_(std::move(sender)),
        limits_(limits),
        peers_(ps_addresses, timeout),
        num_ps_(peers_.size()),
        versions_(static_cast<size_t>(num_ps_) * tables_.size(), 0),
        read_(versions_.size(), 0),
        groups_(tables_.size()),
        unique_keys_(tables_.size()),
        unique_grads_(tables_.size()),
        push_keys_(tables_.size()),
        push_grads_(tables_.size()) {}

  absl::Status Lookup(const std::vector<std::vector<uint64_t>>& keys,
                      std::vector<std::vector<float>>* rows, uint64_t min_version, int64_t clock);
  absl::Status Push(const std::vector<std::vector<uint64_t>>& keys,
                    const std::vector<std::vector<float>>& grads, bool every_ps, int* stale_dropped,
                    const PushTag* tag);
  uint64_t min_version_read() const { return min_read_; }
  const std::vector<TableRef>& tables() const { return tables_; }
  void set_canceller(CallCanceller* canceller) { peers_.set_canceller(canceller); }

 private:
  // The keys of one table in one call, grouped by PS: order[begin[p] .. begin[p+1]) are the
  // positions (in the caller's key array) of the keys on PS p, in their original order.
  struct Group {
    std::vector<uint32_t> order;
    std::vector<int64_t> begin;
    std::vector<int32_t> ps_of;  // scratch: PS of each key
  };
  // One slice of a table's keys on one PS, carried as entry `entry` of request `request`.
  struct Part {
    int request, entry, table, ps;
    int64_t begin, end;  // into groups_[table].order
  };

  absl::Status CheckTableCount(const char* what, size_t n) const;
  // OK if `resp` holds the rows of part `p`: one row of the table's dim per key.
  absl::Status CheckRows(const Part& p, const LookupResponse& resp) const;
  void GroupByPs(size_t t, const uint64_t* keys, size_t n);
  // Push: sums the rows of repeated keys of table t into unique_keys_[t] / unique_grads_[t]
  // and points push_keys_[t] / push_grads_[t] at them. Returns the number of distinct keys.
  size_t SumRepeats(size_t t, const std::vector<uint64_t>& keys, const std::vector<float>& grads);
  // Plans requests over the current groups: a table's keys on a PS travel in as few requests
  // as the limits allow. With `every_table`, every PS gets a request naming every table.
  void Plan(bool every_table);
  // Writes the keys of part `p` (from `keys`, the array the group indexes) to `out`.
  void CopyKeys(const Part& p, const uint64_t* keys, std::string* out) const;
  int Slot(int ps, int table) const { return ps * static_cast<int>(tables_.size()) + table; }

  const std::vector<TableRef> tables_;
  const Sender sender_;
  const TableRequestLimits limits_;
  PsPeers peers_;
  const int num_ps_;

  std::vector<uint64_t> versions_;  // by Slot(ps, table): read by the latest lookup there
  std::vector<uint64_t> read_;      // scratch of one lookup, by Slot(ps, table)
  uint64_t min_read_ = 0;
  // Buffers reused by every call, so that a steady state allocates little beyond gRPC's own.
  KeyIndex index_;
  std::vector<Group> groups_;                       // by table
  std::vector<std::vector<uint64_t>> unique_keys_;  // push: distinct keys, by table
  std::vector<std::vector<float>> unique_grads_;    // push: their summed rows
  std::vector<const uint64_t*> push_keys_;          // push: the keys sent, by table ...
  std::vector<const float*> push_grads_;            // ... and their rows
  std::vector<Part> parts_;
  std::vector<int> targets_;  // PS of each request
  std::vector<LookupRequest> lookup_reqs_;
  std::vector<LookupResponse> lookup_resps_;
  std::vector<PushSparseRequest> push_reqs_;
  std::vector<PushSparseResponse> push_resps_;
};

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

size_t TableClient::Impl::SumRepeats(size_t t, const std::vector<uint64_t>& keys,
                                     const std::vector<float>& grads) {
  const size_t dim = tables_[t].dim;
  std::vector<uint64_t>& uk = unique_keys_[t];
  std::vector<float>& ug = unique_grads_[t];
  uk.clear();
  ug.clear();
  index_.Reset(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    bool inserted = false;
    const uint32_t u = index_.Insert(keys[i], static_cast<uint32_t>(uk.size()), &inserted);
    const float* g = grads.data() + i * dim;
    if (inserted) {
      uk.push_back(keys[i]);
      ug.insert(ug.end(), g, g + dim);
    } else {
      float* sum = ug.data() + static_cast<size_t>(u) * dim;
      for (size_t d = 0; d < dim; ++d) sum[d] += g[d];
    }
  }
  push_keys_[t] = uk.data();
  push_grads_[t] = ug.data();
  return uk.size();
}

absl::Status TableClient::Impl::Push(const std::vector<std::vector<uint64_t>>& keys,
                                     const std::vector<std::vector<float>>& grads, bool every_ps,
                                     int* stale_dropped, const PushTag* tag) {
  if (absl::Status s = CheckTableCount("push", keys.size()); !s.ok()) return s;
  if (grads.size() != keys.size()) {
    return absl::InvalidArgumentError(absl::StrCat("push of keys for ", keys.size(),
                                                   " tables with gradients for ", grads.size()));
  }
  for (size_t t = 0; t < tables_.size(); ++t) {
    const std::vector<uint64_t>& k = keys[t];
    const size_t dim = tables_[t].dim;
    if (grads[t].size() != k.size() * dim) {
      return absl::InvalidArgumentError(absl::StrCat(
          "table \"", tables_[t].name, "\": push of ", k.size(), " keys with ", grads[t].size(),
          " gradient floats, expected ", k.size() * dim, " (dim ", dim, ")"));
    }
    if (k.size() > std::numeric_limits<uint32_t>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat("table \"", tables_[t].name, "\": push of ", k.size(), " keys in one call"));
    }
    // The PS refuses a repeated key: sum the rows of each key into its first occurrence. Keys
    // that are distinct already are sent from the caller's arrays.
    push_keys_[t] = k.data();
    push_grads_[t] = grads[t].data();
    size_t distinct = k.size();
    index_.Reset(k.size());
    for (size_t i = 0; i < k.size(); ++i) {
      bool inserted = false;
      index_.Insert(k[i], static_cast<uint32_t>(i), &inserted);
      if (!inserted) {
        distinct = SumRepeats(t, k, grads[t]);
        break;
      }
    }
    GroupByPs(t, push_keys_[t], distinct);
  }
  Plan(/*every_table=*/every_ps);
  if (tag != nullptr) {
    for (size_t i = 1; i < parts_.size(); ++i) {
      const Part& p = parts_[i];
      if (p.table == parts_[i - 1].table && p.ps == parts_[i - 1].ps) {
        return absl::InvalidArgumentError(
            absl::StrCat("table \"", tables_[p.table].name, "\": the keys of one tagged push to ",
                         TaskName("ps", p.ps), " need more than one request; use smaller batches"));
      }
    }
  }
  const size_t n = targets_.size();
  if (push_reqs_.size() < n) {
    push_reqs_.resize(n);
    push_resps_.resize(n);
  }
  for (size_t r = 0; r < n; ++r) {
    *push_reqs_[r].mutable_sender() = sender_;
    push_reqs_[r].mutable_gradients()->Clear();
    if (tag != nullptr) {
      *push_reqs_[r].mutable_tag() = *tag;
    } else {
      push_reqs_[r].clear_tag();
    }
  }
  for (const Part& p : parts_) {
    SparseGradient* g = push_reqs_[p.request].add_gradients();
    const TableRef& table = tables_[p.table];
    g->set_table(table.name);
    g->set_read_version(versions_[Slot(p.ps, p.table)]);
    CopyKeys(p, push_keys_[p.table], g->mutable_keys());
    const size_t row_bytes = static_cast<size_t>(table.dim) * sizeof(float);
    std::string* rows = g->mutable_rows();
    rows->resize((p.end - p.begin) * row_bytes);
    char* dst = rows->data();
    const float* src = push_grads_[p.table];
    const std::vector<uint32_t>& order = groups_[p.table].order;
    ForEachRun(order, p.begin, p.end, [&](int64_t at, size_t first, size_t count) {
      std::memcpy(dst + at * row_bytes, src + first * table.dim, count * row_bytes);
    });
  }
  absl::Status s = peers_.FanOut("PushSparse", targets_, push_reqs_, push_resps_,
                                 /*retry=*/tag != nullptr,
                                 [](auto* async, auto* ctx, auto* req, auto* resp, auto done) {
                                   async->PushSparse(ctx, req, resp, std::move(done));
                                 });
  if (s.ok() && stale_dropped != nullptr) {
    *stale_dropped = 0;
    for (size_t r = 0; r < n; ++r) *stale_dropped += push_resps_[r].stale_dropped();
  }
  return s;
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
