#include "transport/buffer_pool.h"

#include <algorithm>
#include <bit>
#include <new>

namespace pstrain {
namespace {

constexpr int64_t kMinClassBytes = 4096;
constexpr std::align_val_t kAlign{64};
constexpr int64_t kHeaderBytes = 64;  // keeps the data 64-byte aligned after the header

}  // namespace

// The header in front of each buffer's bytes.
struct BufferPool::Block {
  BufferPool* pool;
  int cls;
  int64_t capacity;
  char* bytes() { return reinterpret_cast<char*>(this) + kHeaderBytes; }
};

BufferPool::~BufferPool() {
  absl::MutexLock lock(&mu_);
  for (auto& blocks : idle_) {
    for (Block* b : blocks) ::operator delete(b, kAlign);
  }
}

BufferPool& BufferPool::Shared() {
  static BufferPool* pool = new BufferPool;
  return *pool;
}

// Class c holds 2^(12 + c/4) * (4 + c%4) / 4 bytes: 4 KB, 5 KB, 6 KB, 7 KB, 8 KB, 10 KB, ...
int64_t BufferPool::ClassBytes(int cls) {
  return (kMinClassBytes << (cls / 4)) / 4 * (4 + cls % 4);
}

int BufferPool::ClassOf(int64_t size) {
  if (size <= kMinClassBytes) return 0;
  const int octave = std::bit_width(static_cast<uint64_t>((size - 1) / kMinClassBytes));
  int cls = (octave - 1) * 4;
  while (ClassBytes(cls) < size) ++cls;
  return cls;
}

BufferPool::Buffer BufferPool::Get(int64_t size) {
  size = std::max<int64_t>(size, 0);
  const int cls = ClassOf(size);
  {
    absl::MutexLock lock(&mu_);
    if (static_cast<size_t>(cls) < idle_.size() && !idle_[cls].empty()) {
      Block* b = idle_[cls].back();
      idle_[cls].pop_back();
      counters_.idle_bytes -= b->capacity;
      counters_.reused++;
      return Buffer(b, size);
    }
    counters_.allocated++;
  }
  const int64_t capacity = ClassBytes(cls);
  void* raw = ::operator new(static_cast<size_t>(kHeaderBytes + capacity), kAlign);
  static_assert(sizeof(Block) <= kHeaderBytes);
  Block* b = new (raw) Block{this, cls, capacity};
  return Buffer(b, size);
}

void BufferPool::Put(Block* b) {
  {
    absl::MutexLock lock(&mu_);
    if (counters_.idle_bytes + b->capacity <= options_.max_idle_bytes) {
      if (idle_.size() <= static_cast<size_t>(b->cls)) idle_.resize(b->cls + 1);
      idle_[b->cls].push_back(b);
      counters_.idle_bytes += b->capacity;
      return;
    }
    counters_.freed++;
  }
  ::operator delete(b, kAlign);
}

BufferPool::Counters BufferPool::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

BufferPool::Buffer& BufferPool::Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    Reset();
    block_ = other.block_;
    size_ = other.size_;
    other.block_ = nullptr;
  }
  return *this;
}

void* BufferPool::Buffer::data() const { return block_ == nullptr ? nullptr : block_->bytes(); }

void BufferPool::Buffer::Reset() {
  if (block_ != nullptr) block_->pool->Put(block_);
  block_ = nullptr;
  size_ = 0;
}

void* BufferPool::Buffer::Release() {
  Block* b = block_;
  block_ = nullptr;
  size_ = 0;
  return b;
}

void BufferPool::Buffer::Recycle(void* token) {
  if (token != nullptr) {
    Block* b = static_cast<Block*>(token);
    b->pool->Put(b);
  }
}

}  // namespace pstrain
