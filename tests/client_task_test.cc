// Task (client/client.h): the rows a client program's task trains on, by batch.
#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;

TEST(TaskTest, RowsAreTheRangeShuffledTheSameWayForTheSameSeed) {
  const Task t{.epoch = 1, .index = 3, .begin = 300, .end = 400, .seed = 42, .batch_size = 32};
  const std::vector<int64_t> rows = t.Rows();
  std::vector<int64_t> sorted = rows;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> range(100);
  std::iota(range.begin(), range.end(), 300);
  EXPECT_EQ(sorted, range);
  EXPECT_NE(rows, range);  // shuffled
  EXPECT_EQ(t.Rows(), rows);
  Task other = t;
  other.seed = 43;
  EXPECT_NE(other.Rows(), rows);
  // The documented draw: Fisher-Yates from the end, with mt19937_64(seed) modulo i.
  std::vector<int64_t> want = range;
  std::mt19937_64 rng(42);
  for (size_t i = want.size(); i > 1; --i) std::swap(want[i - 1], want[rng() % i]);
  EXPECT_EQ(rows, want);
}

TEST(TaskTest, BatchesCutTheRowsInOrderTheLastOneShorter) {
  const Task t{.begin = 0, .end = 10, .seed = 7, .batch_size = 4};
  EXPECT_EQ(t.num_batches(), 3);
  const std::vector<int64_t> rows = t.Rows();
  std::vector<int64_t> joined;
  for (int64_t k = 0; k < t.num_batches(); ++k) {
    const std::vector<int64_t> b = t.Batch(k);
    EXPECT_EQ(b.size(), k < 2 ? 4u : 2u);
    joined.insert(joined.end(), b.begin(), b.end());
  }
  EXPECT_EQ(joined, rows);
  EXPECT_TRUE(t.Batch(3).empty());
  EXPECT_TRUE(t.Batch(-1).empty());
  EXPECT_EQ((Task{.begin = 5, .end = 5, .batch_size = 4}).num_batches(), 0);
  EXPECT_EQ((Task{.begin = 0, .end = 5, .batch_size = 0}).num_batches(), 0);
  EXPECT_THAT((Task{.begin = 2, .end = 3, .batch_size = 8}).Batch(0), ElementsAre(2));
}

}  // namespace
}  // namespace pstrain
