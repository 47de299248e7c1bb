// The storage of one embedding table (internal to src/ps; EmbeddingTable in embedding_table.cc is
// its only user, embedding_layout.cc sizes it for a table's caps). Not thread-safe: the caller
// holds its lock, shared for const calls (which may run concurrently) and exclusive for the others.
//
// A row lives in a slot: `floats_per_row` floats in an arena (the row, then its optimizer
// slots), plus 20 bytes of bookkeeping (the key, the low 32 bits of the step of its last update,
// the links of the eviction list) and, for Adam, a uint32 step count. The arena is a list of chunks
// of a fixed number of slots, so it grows without moving rows or copying the arena, and wastes at
// most one chunk. Freed slots go to a free list and are reused before the arena grows; nothing
// shrinks. The index is absl::flat_hash_map<uint64_t, uint32_t> from key to slot.
//
// The eviction list holds every row in the order of its last update (oldest first), when the
// store is `ordered`; an unordered store (a table that never evicts) skips the list updates,
// which would otherwise cost two random memory accesses per updated row.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace pstrain {

class RowStore {
 public:
  static constexpr uint32_t kNil = ~uint32_t{0};
  // The most rows a store can hold (slot numbers are uint32, kNil excluded).
  static constexpr int64_t kMaxRows = int64_t{kNil} - 1;

  // `slots_per_chunk` > 0 (a power of two); `step_counts`: keep a uint32 per row (Adam).
  RowStore(int floats_per_row, bool step_counts, bool ordered, int64_t slots_per_chunk);
  RowStore(const RowStore&) = delete;
  RowStore& operator=(const RowStore&) = delete;

  // The slot of `key`, or kNil.
  uint32_t Find(uint64_t key) const {
    auto it = index_.find(key);
    return it == index_.end() ? kNil : it->second;
  }
  // Hints for batches: fetch the index buckets of `key`; fetch the first `float_bytes` of the
  // floats of `slot` (at most 512 bytes) and, with `meta`, its bookkeeping.
  void Prefetch(uint64_t key) const { index_.prefetch(key); }
  void PrefetchSlot(uint32_t slot, int64_t float_bytes, bool meta) const {
    const char* p = reinterpret_cast<const char*>(floats(slot));
    const int64_t end = float_bytes < 512 ? float_bytes : 512;
    for (int64_t b = 0; b < end; b += 64) __builtin_prefetch(p + b, 1);
    __builtin_prefetch(p + end - 1, 1);
    if (meta) __builtin_prefetch(&Meta(slot), 1);
  }
  // Rows removed so far: a slot found before is still the key's while this is unchanged.
  uint64_t removals() const { return removals_; }

  // A new row for `key` (which must have none), last updated at `step`, newest in the eviction
  // order; its floats and step count are left to the caller. kNil if kMaxRows rows exist.
  uint32_t Add(uint64_t key, uint64_t step);
  // Removes the row in `slot` (index, eviction list) and frees the slot.
  void Remove(uint32_t slot);
  // Marks `slot` as updated at `step` (>= every step given before): newest in the order.
  void Touch(uint32_t slot, uint64_t step);
  // The least recently updated row, kNil if none (or if the store is not ordered).
  uint32_t oldest() const { return head_; }

  float* floats(uint32_t slot) { return Chunk(slot).floats.get() + Offset(slot) * fpr_; }
  const float* floats(uint32_t slot) const {
    return Chunk(slot).floats.get() + Offset(slot) * fpr_;
  }
  uint32_t& step_count(uint32_t slot) { return Chunk(slot).steps[Offset(slot)]; }
  uint32_t step_count(uint32_t slot) const { return Chunk(slot).steps[Offset(slot)]; }
  uint64_t key(uint32_t slot) const { return Chunk(slot).keys[Offset(slot)]; }
  // Steps from the last Add or Touch of `slot` (only Add in an unordered store) to `now`,
  // modulo 2^32: exact while the row is younger than 2^32 steps.
  uint32_t age(uint32_t slot, uint64_t now) const {
    return static_cast<uint32_t>(now) - Meta(slot).last;
  }

  // Calls visit(key, slot) for every row: oldest update first in an ordered store, else in the
  // index's order.
  template <typename Visit>
  void ForEachRow(Visit visit) const {
    if (ordered_) {
      for (uint32_t s = head_; s != kNil; s = Meta(s).next) visit(key(s), s);
    } else {
      for (const auto& [k, s] : index_) visit(k, s);
    }
  }

  int64_t rows() const { return static_cast<int64_t>(index_.size()); }
  // Memory held: the chunks allocated, the index's capacity (a slot and a control byte per
  // bucket) and the chunk list.
  int64_t bytes() const;

  // Bytes one slot takes in the arena and its bookkeeping.
  static int64_t SlotBytes(int floats_per_row, bool step_counts);
  // An upper bound of bytes() for a store that never holds more than `rows` rows, whatever the
  // sequence of additions and removals (the index may grow under erase churn until
  // rows <= 25/32 of its capacity, where abseil rehashes in place).
  static int64_t BytesBound(int64_t rows, int floats_per_row, bool step_counts,
                            int64_t slots_per_chunk);
  // Bytes of an index (of the same layout as this one's) with `capacity` buckets.
  static int64_t IndexBytes(size_t capacity);
  // The largest capacity an abseil map of that layout reaches if it never holds more than
  // `size` keys, whatever the sequence of insertions and erasures.
  static size_t IndexCapacityBound(int64_t size);

 private:
  struct SlotMeta {
    uint32_t last;        // low 32 bits of the step of the last update (creation counts)
    uint32_t prev, next;  // eviction list; `next` also links the free list
  };
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  struct ChunkData {
    std::unique_ptr<uint64_t[]> keys;
    std::unique_ptr<SlotMeta[]> meta;
    std::unique_ptr<uint32_t[]> steps;      // null unless step_counts
    std::unique_ptr<float[], Free> floats;  // 64-byte aligned: a row of 16 floats is one line
  };

  ChunkData& Chunk(uint32_t slot) { return chunks_[slot >> chunk_shift_]; }
  const ChunkData& Chunk(uint32_t slot) const { return chunks_[slot >> chunk_shift_]; }
  int64_t Offset(uint32_t slot) const { return slot & chunk_mask_; }
  SlotMeta& Meta(uint32_t slot) { return Chunk(slot).meta[Offset(slot)]; }
  const SlotMeta& Meta(uint32_t slot) const { return Chunk(slot).meta[Offset(slot)]; }
  void Unlink(uint32_t slot);
  void Append(uint32_t slot);

  const int fpr_;
  const bool step_counts_;
  const bool ordered_;
  const int chunk_shift_;
  const uint32_t chunk_mask_;

  absl::flat_hash_map<uint64_t, uint32_t> index_;
  std::vector<ChunkData> chunks_;
  uint32_t used_slots_ = 0;             // slots ever handed out (the arena's high-water mark)
  uint32_t free_head_ = kNil;           // free list through SlotMeta::next
  uint32_t head_ = kNil, tail_ = kNil;  // eviction list: oldest, newest
  uint64_t removals_ = 0;
};

}  // namespace pstrain
