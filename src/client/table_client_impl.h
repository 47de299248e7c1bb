// TableClient's implementation (internal to src/client): the Impl class, whose lookup side is in
// table_client.cc and whose push side is in table_client_push.cc, and the helpers both use.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "client/fan_out.h"
#include "client/table_client.h"
#include "common/keys.h"

namespace pstrain {
namespace table_client_internal {

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

}  // namespace table_client_internal

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
  table_client_internal::KeyIndex index_;
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

}  // namespace pstrain
