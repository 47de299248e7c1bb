// TableClient's push: sums repeated keys, groups the keys by PS and sends PushSparse.
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/table_client_impl.h"

namespace pstrain {

using table_client_internal::ForEachRun;

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
  // A tagged push reaches every table part too, with no keys where the batch has none: a table
  // part's task watermark must advance with every batch of its task.
  Plan(/*every_table=*/every_ps || tag != nullptr);
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

}  // namespace pstrain
