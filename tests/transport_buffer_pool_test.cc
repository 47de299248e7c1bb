// BufferPool: size classes, reuse once warm (counted, so a warm loop provably allocates
// nothing), the idle bound, and concurrent use.

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "transport/buffer_pool.h"

namespace pstrain {
namespace {

TEST(BufferPoolTest, BuffersAreAlignedAndAsLargeAsAsked) {
  BufferPool pool;
  for (int64_t size : {0, 1, 4095, 4096, 4097, 5121, 1 << 20, (1 << 20) + 3, 16 << 20}) {
    BufferPool::Buffer b = pool.Get(size);
    ASSERT_FALSE(b.empty());
    EXPECT_EQ(b.size(), size);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u) << size;
    std::memset(b.data(), 0xab, size);  // the whole size is writable (ASan would catch less)
  }
}

TEST(BufferPoolTest, AWarmLoopAllocatesNothing) {
  BufferPool pool;
  const std::vector<int64_t> sizes = {4 << 10, 64 << 10, 1 << 20, 3 << 20, 16 << 20};
  auto round = [&] {
    std::vector<BufferPool::Buffer> held;
    for (int64_t s : sizes) held.push_back(pool.Get(s));
    for (int64_t s : sizes) held.push_back(pool.Get(s - 1));  // the same classes
  };
  round();
  const BufferPool::Counters warm = pool.counters();
  EXPECT_EQ(warm.allocated, 10);
  EXPECT_EQ(warm.reused, 0);
  for (int i = 0; i < 100; ++i) round();
  const BufferPool::Counters after = pool.counters();
  EXPECT_EQ(after.allocated, warm.allocated);
  EXPECT_EQ(after.reused, 1000);
  EXPECT_EQ(after.freed, 0);
  EXPECT_EQ(after.idle_bytes, warm.idle_bytes);
}

TEST(BufferPoolTest, ClassesWasteAtMostAQuarter) {
  // A 5 MB request must not take a 8 MB buffer: with 4 classes per doubling it gets 5 MB.
  BufferPool pool;
  { BufferPool::Buffer b = pool.Get(5 << 20); }
  EXPECT_EQ(pool.counters().idle_bytes, 5 << 20);
  { BufferPool::Buffer b = pool.Get((5 << 20) + 1); }
  EXPECT_EQ(pool.counters().idle_bytes, (5 << 20) + (6 << 20));
  EXPECT_EQ(pool.counters().allocated, 2);
}

TEST(BufferPoolTest, KeepsAtMostMaxIdleBytes) {
  BufferPool pool({.max_idle_bytes = 3 << 20});
  {
    std::vector<BufferPool::Buffer> held;
    for (int i = 0; i < 5; ++i) held.push_back(pool.Get(1 << 20));
  }
  const BufferPool::Counters c = pool.counters();
  EXPECT_EQ(c.allocated, 5);
  EXPECT_EQ(c.idle_bytes, 3 << 20);
  EXPECT_EQ(c.freed, 2);
}

TEST(BufferPoolTest, ReleasedBuffersComeBackThroughRecycle) {
  BufferPool pool;
  BufferPool::Buffer b = pool.Get(1000);
  void* data = b.data();
  void* token = b.Release();
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(pool.counters().idle_bytes, 0);
  BufferPool::Buffer::Recycle(token);
  EXPECT_EQ(pool.counters().idle_bytes, 4096);
  EXPECT_EQ(pool.Get(10).data(), data);  // the same buffer, reused
}

TEST(BufferPoolTest, ConcurrentUseKeepsBuffersApartAndCountsRight) {
  BufferPool pool;
  constexpr int kThreads = 4;
  constexpr int kRounds = 2000;
  std::vector<int> corrupt(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        const int64_t size = 4096 << (i % 4);
        BufferPool::Buffer b = pool.Get(size);
        // Two threads holding one buffer at once would overwrite each other's pattern.
        auto* p = static_cast<unsigned char*>(b.data());
        std::memset(p, t + 1, size);
        std::this_thread::yield();
        for (int64_t j = 0; j < size; j += 512) corrupt[t] += p[j] != t + 1;
        if (i % 3 == 0) BufferPool::Buffer::Recycle(b.Release());
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(corrupt[t], 0) << t;
  const BufferPool::Counters c = pool.counters();
  EXPECT_EQ(c.allocated + c.reused, kThreads * kRounds);
  EXPECT_LE(c.allocated, kThreads * 4);  // at most one buffer per thread and class
}

}  // namespace
}  // namespace pstrain
