// RowStore: chunked slot arena, key index, free list and eviction list (see embedding_rows.h).
#include "ps/embedding_rows.h"

#include <bit>
#include <cassert>
#include <new>

#include "common/limits.h"

namespace pstrain {

RowStore::RowStore(int floats_per_row, bool step_counts, bool ordered, int64_t slots_per_chunk)
    : fpr_(floats_per_row),
      step_counts_(step_counts),
      ordered_(ordered),
      chunk_shift_(std::countr_zero(static_cast<uint64_t>(slots_per_chunk))),
      chunk_mask_(static_cast<uint32_t>(slots_per_chunk - 1)) {
  assert(slots_per_chunk > 0 && std::has_single_bit(static_cast<uint64_t>(slots_per_chunk)));
}

uint32_t RowStore::Add(uint64_t key, uint64_t step) {
  uint32_t slot;
  if (free_head_ != kNil) {
    slot = free_head_;
    free_head_ = Meta(slot).next;
  } else {
    if (used_slots_ >= kMaxRows) return kNil;
    slot = used_slots_++;
    if ((slot >> chunk_shift_) >= chunks_.size()) {
      const size_t n = size_t{chunk_mask_} + 1;
      ChunkData chunk;
      chunk.keys.reset(new uint64_t[n]);
      chunk.meta.reset(new SlotMeta[n]);
      if (step_counts_) chunk.steps.reset(new uint32_t[n]);
      const size_t bytes = (n * fpr_ * sizeof(float) + 63) / 64 * 64;
      chunk.floats.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
      if (chunk.floats == nullptr) throw std::bad_alloc();
      chunks_.push_back(std::move(chunk));
    }
  }
  Chunk(slot).keys[Offset(slot)] = key;
  Meta(slot).last = static_cast<uint32_t>(step);
  Append(slot);
  index_.emplace(key, slot);
  return slot;
}

void RowStore::Remove(uint32_t slot) {
  SlotMeta& m = Meta(slot);
  ++removals_;
  index_.erase(key(slot));
  Unlink(slot);
  m.next = free_head_;
  free_head_ = slot;
}

void RowStore::Touch(uint32_t slot, uint64_t step) {
  if (!ordered_) return;  // nothing reads `last`: spare the memory access
  Meta(slot).last = static_cast<uint32_t>(step);
  if (slot == tail_) return;
  Unlink(slot);
  Append(slot);
}

void RowStore::Unlink(uint32_t slot) {
  if (!ordered_) return;
  SlotMeta& m = Meta(slot);
  if (m.prev != kNil) {
    Meta(m.prev).next = m.next;
  } else {
    head_ = m.next;
  }
  if (m.next != kNil) {
    Meta(m.next).prev = m.prev;
  } else {
    tail_ = m.prev;
  }
}

void RowStore::Append(uint32_t slot) {
  if (!ordered_) return;
  SlotMeta& m = Meta(slot);
  m.prev = tail_;
  m.next = kNil;
  if (tail_ != kNil) {
    Meta(tail_).next = slot;
  } else {
    head_ = slot;
  }
  tail_ = slot;
}

int64_t RowStore::SlotBytes(int floats_per_row, bool step_counts) {
  return int64_t{floats_per_row} * kFloatBytes + int64_t{sizeof(uint64_t) + sizeof(SlotMeta)} +
         (step_counts ? int64_t{sizeof(uint32_t)} : 0);
}

int64_t RowStore::IndexBytes(size_t capacity) {
  using Slot = std::pair<const uint64_t, uint32_t>;
  // A slot and a control byte per bucket, and one group of cloned control bytes.
  return capacity == 0 ? 0 : static_cast<int64_t>(capacity * (sizeof(Slot) + 1) + 16);
}

size_t RowStore::IndexCapacityBound(int64_t size) {
  if (size <= 0) return 0;
  // Capacities are 2^k - 1; below 32 buckets abseil always grows instead of rehashing in place.
  uint64_t capacity = 31;
  while (static_cast<uint64_t>(size) * 32 > capacity * 25) capacity = capacity * 2 + 1;
  return capacity;
}

int64_t RowStore::bytes() const {
  // A chunk's floats are rounded up to whole cache lines.
  const int64_t chunk = (int64_t{chunk_mask_} + 1) * SlotBytes(fpr_, step_counts_) + 64;
  return static_cast<int64_t>(chunks_.size()) * chunk + IndexBytes(index_.capacity()) +
         static_cast<int64_t>(chunks_.capacity() * sizeof(ChunkData)) +
         static_cast<int64_t>(sizeof(*this));
}

int64_t RowStore::BytesBound(int64_t rows, int floats_per_row, bool step_counts,
                             int64_t slots_per_chunk) {
  if (rows <= 0) return static_cast<int64_t>(sizeof(RowStore));
  const int64_t chunks = CeilDiv(rows, slots_per_chunk);
  // The chunk list grows by doubling: at most twice the chunks it holds.
  return chunks * (slots_per_chunk * SlotBytes(floats_per_row, step_counts) + 64) +
         IndexBytes(IndexCapacityBound(rows)) +
         2 * chunks * static_cast<int64_t>(sizeof(ChunkData)) +
         static_cast<int64_t>(sizeof(RowStore));
}

}  // namespace pstrain
