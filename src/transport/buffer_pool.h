// Pooled byte buffers for the data plane, so that a warm hot path (a pull answered from pooled
// copies, a push read into a pooled buffer, 16-bit gradients widened to float32) allocates
// nothing per request: fresh buffers cost page faults and zeroing on every call, which a profile
// of a 1 MB push + pull put at a quarter of its CPU.
//
// Sizes are rounded up to a size class (4 per doubling, so at most 25% is wasted, from 4 KB up);
// a returned buffer waits, idle, for the next request of its class. The pool keeps at most
// `max_idle_bytes` idle and frees what would pass that, so a burst of large tensors does not pin
// its memory forever. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace pstrain {

class BufferPool {
 public:
  struct Options {
    int64_t max_idle_bytes = int64_t{1} << 30;
  };
  // What the pool did since it was made; `allocated` only grows while the pool warms up.
  struct Counters {
    int64_t allocated = 0;   // buffers taken from the system
    int64_t reused = 0;      // requests served from idle buffers
    int64_t freed = 0;       // buffers given back to the system (over max_idle_bytes)
    int64_t idle_bytes = 0;  // capacity of the buffers idle now
  };

  class Buffer;

  BufferPool() : BufferPool(Options{}) {}
  explicit BufferPool(Options options) : options_(options) {}
  // Frees the idle buffers. Buffers still out must not be returned after this: a pool that
  // lends to gRPC (whose slices may be dropped at any time) is Shared(), which lives forever.
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // The process's pool, never destroyed.
  static BufferPool& Shared();

  // A buffer of at least `size` bytes (64-byte aligned; its contents are unspecified). Throws
  // std::bad_alloc when memory runs out, as operator new does.
  Buffer Get(int64_t size);
  Counters counters() const;

 private:
  struct Block;
  static int ClassOf(int64_t size);
  static int64_t ClassBytes(int cls);
  void Put(Block* block);

  const Options options_;
  mutable absl::Mutex mu_;
  std::vector<std::vector<Block*>> idle_ ABSL_GUARDED_BY(mu_);  // by size class
  Counters counters_ ABSL_GUARDED_BY(mu_);
};

// A pooled buffer; going out of scope returns it to its pool. Move-only.
class BufferPool::Buffer {
 public:
  Buffer() = default;
  Buffer(Buffer&& other) noexcept : block_(other.block_), size_(other.size_) {
    other.block_ = nullptr;
  }
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { Reset(); }

  void* data() const;
  int64_t size() const { return size_; }  // as requested
  bool empty() const { return block_ == nullptr; }
  void Reset();

  // Hands the buffer to C code that frees by callback (a gRPC slice's destroy function):
  // returns a token for Recycle, which returns the buffer to its pool from any thread.
  void* Release();
  static void Recycle(void* token);

 private:
  friend class BufferPool;
  explicit Buffer(Block* block, int64_t size) : block_(block), size_(size) {}
  Block* block_ = nullptr;
  int64_t size_ = 0;
};

}  // namespace pstrain
