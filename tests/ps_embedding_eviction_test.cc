// EmbeddingTable (src/ps/embedding_table.h): admission by count, eviction by age, by row cap and
// by byte cap, and memory per row, checked from rows and from the counters of Stats().
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "common/keys.h"
#include "embedding_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/embedding_table.h"

namespace pstrain {
namespace {

using namespace embedding_testing;
using ::testing::HasSubstr;

// ---- Admission ------------------------------------------------------------------------------

TEST(EmbeddingTableAdmission, AKeyGetsARowOnItsKthLookup) {
  for (bool zeros : {false, true}) {
    TableDef def = Def("emb", 4);
    def.set_admit_after(3);
    def.set_unadmitted_zeros(zeros);
    auto t = Make(def);
    const std::vector<float> unadmitted = zeros ? std::vector<float>(4, 0.0f) : Initial(def, 9);
    for (int i = 1; i <= 2; ++i) {
      EXPECT_EQ(Lookup(*t, {9}), unadmitted) << "lookup " << i << " zeros " << zeros;
      Apply(*t, {9}, 1.0f);  // dropped: no row yet
      EXPECT_FALSE(t->Row(9).has_value());
    }
    TableStats s = t->Stats();
    EXPECT_EQ(s.rows(), 0);
    EXPECT_EQ(s.admitted(), 0);
    EXPECT_EQ(s.filtered_lookups(), 2);
    EXPECT_EQ(s.filtered_gradients(), 2);
    EXPECT_EQ(s.gradient_rows_applied(), 0);
    EXPECT_EQ(s.version(), 2u);

    // The third lookup admits: the row starts from the initializer, untouched by the dropped
    // gradients.
    EXPECT_EQ(Lookup(*t, {9}), Initial(def, 9));
    s = t->Stats();
    EXPECT_EQ(s.rows(), 1);
    EXPECT_EQ(s.admitted(), 1);
    EXPECT_EQ(s.filtered_lookups(), 2);
    Apply(*t, {9}, 1.0f);
    std::vector<float> want = Initial(def, 9);
    for (float& x : want) x -= 1.0f;
    EXPECT_EQ(t->Row(9)->row, want);
    EXPECT_EQ(t->Stats().gradient_rows_applied(), 1);
  }
}

TEST(EmbeddingTableAdmission, ZeroAndOneAdmitAtOnce) {
  for (int k : {0, 1}) {
    TableDef def = Def("emb", 2);
    def.set_admit_after(k);
    auto t = Make(def);
    Lookup(*t, {1});
    EXPECT_TRUE(t->Row(1).has_value()) << k;
    EXPECT_EQ(t->Stats().filtered_lookups(), 0) << k;
  }
}

// The admission counts are bounded: when 2^17 keys are pending, every count halves and the
// keys at zero are forgotten. A key seen once is forgotten; a key seen 3 times keeps 1.
TEST(EmbeddingTableAdmission, AFullPendingMapHalvesTheCountsAndForgetsKeysSeenOnce) {
  TableDef def = Def("emb", 1);
  def.set_admit_after(4);
  auto t = Make(def);
  const uint64_t once = 1, thrice = 2;
  for (int i = 0; i < 3; ++i) Lookup(*t, {thrice});
  Lookup(*t, {once});
  std::vector<uint64_t> flood(int64_t{1} << 17);
  for (size_t i = 0; i < flood.size(); ++i) flood[i] = 1000 + i;  // 2 + 2^17 keys pending
  Lookup(*t, flood);
  EXPECT_LT(t->Stats().bytes(), 8 << 20);
  for (int i = 0; i < 2; ++i) Lookup(*t, {thrice});  // count 1 + 2
  EXPECT_FALSE(t->Row(thrice).has_value());
  Lookup(*t, {thrice});  // the 4th since the halving
  EXPECT_TRUE(t->Row(thrice).has_value());
  for (int i = 0; i < 3; ++i) Lookup(*t, {once});  // counts from zero again: 3 of 4
  EXPECT_FALSE(t->Row(once).has_value());
  Lookup(*t, {once});
  EXPECT_TRUE(t->Row(once).has_value());
  EXPECT_EQ(t->Stats().admitted(), 2);
}

// ---- Eviction -------------------------------------------------------------------------------

TEST(EmbeddingTableEviction, RowsNotUpdatedForTStepsAreEvicted) {
  TableDef def = Def("emb", 2);
  def.set_evict_after_steps(3);
  auto t = Make(def);
  Lookup(*t, {1, 2, 3});  // created at version 0
  Apply(*t, {1}, 0.1f);   // version 1: row 1 updated at 1
  Apply(*t, {2}, 0.1f);   // version 2: row 2 updated at 2
  EXPECT_EQ(t->Stats().evicted_by_age(), 0);
  Apply(*t, {2}, 0.1f);  // version 3: row 3, untouched since 0, is 3 steps old
  EXPECT_FALSE(t->Row(3).has_value());
  EXPECT_TRUE(t->Row(1).has_value());
  EXPECT_EQ(t->Stats().evicted_by_age(), 1);
  Apply(*t, {2}, 0.1f);  // version 4: row 1, updated at 1
  EXPECT_FALSE(t->Row(1).has_value());
  EXPECT_TRUE(t->Row(2).has_value());
  TableStats s = t->Stats();
  EXPECT_EQ(s.evicted_by_age(), 2);
  EXPECT_EQ(s.rows(), 1);
  EXPECT_EQ(s.evicted_by_cap(), 0);
  // An evicted key's gradient is dropped and counted; a lookup gives it a fresh row.
  Apply(*t, {1}, 0.1f);
  EXPECT_EQ(t->Stats().filtered_gradients(), 1);
  EXPECT_EQ(Lookup(*t, {1}), Initial(def, 1));
}

TEST(EmbeddingTableEviction, RowCapEvictsTheLeastRecentlyUpdatedFirst) {
  TableDef def = Def("emb", 2);
  def.set_max_rows(4);
  auto t = Make(def);
  Lookup(*t, {1, 2, 3, 4});
  Apply(*t, {3}, 0.1f);
  Apply(*t, {1}, 0.1f);  // order of last update, oldest first: 2, 4, 3, 1
  Lookup(*t, {5});       // evicts 2
  EXPECT_FALSE(t->Row(2).has_value());
  Lookup(*t, {6, 7});  // evicts 4, 3
  for (uint64_t k : {2, 3, 4}) EXPECT_FALSE(t->Row(k).has_value()) << k;
  for (uint64_t k : {1, 5, 6, 7}) EXPECT_TRUE(t->Row(k).has_value()) << k;
  TableStats s = t->Stats();
  EXPECT_EQ(s.rows(), 4);
  EXPECT_EQ(s.evicted_by_cap(), 3);
  EXPECT_EQ(s.evicted_by_age(), 0);
  EXPECT_EQ(s.admitted(), 7);
}

TEST(EmbeddingTableEviction, ABatchLargerThanTheCapReturnsEveryRow) {
  TableDef def = Def("emb", 3);
  def.set_max_rows(2);
  auto t = Make(def);
  const std::vector<uint64_t> keys = {11, 12, 13, 14, 15};
  const std::vector<float> rows = Lookup(*t, keys);
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(Slice(rows, i, 3), Initial(def, keys[i]));
  EXPECT_EQ(t->Stats().rows(), 2);
  EXPECT_TRUE(t->Row(14).has_value());
  EXPECT_TRUE(t->Row(15).has_value());
  // Pushing all five updates the two held and drops the rest.
  Apply(*t, keys, 1.0f);
  EXPECT_EQ(t->Stats().gradient_rows_applied(), 2);
  EXPECT_EQ(t->Stats().filtered_gradients(), 3);
}

TEST(EmbeddingTableEviction, ByteCapBoundsTheMemory) {
  for (const char* opt : {"sgd", "adagrad", "adam"}) {
    for (int admit : {0, 2}) {
      TableDef def = Def("emb", 16, opt, 0.01);
      def.set_max_bytes(int64_t{8} << 20);
      def.set_admit_after(admit);
      auto t = Make(def);
      std::vector<uint64_t> keys(20000);
      int64_t most_rows = 0;
      for (uint64_t batch = 0; batch < 40; ++batch) {
        for (size_t i = 0; i < keys.size(); ++i) keys[i] = batch * 7919 + i;  // overlapping
        Lookup(*t, keys);
        Apply(*t, keys, 0.5f);
        const TableStats s = t->Stats();
        ASSERT_LE(s.bytes(), def.max_bytes()) << opt << " batch " << batch;
        most_rows = std::max(most_rows, s.rows());
      }
      const TableStats s = t->Stats();
      EXPECT_GT(s.evicted_by_cap(), 0) << opt;
      // The cap is used, not wasted: rows' payload takes a good part of it (the rest goes to
      // bookkeeping, the index and at most a quarter to admission counts).
      std::printf("%s admit_after %d: %lld rows under %lld bytes\n", opt, admit,
                  static_cast<long long>(most_rows), static_cast<long long>(def.max_bytes()));
      EXPECT_GT(most_rows * s.payload_bytes_per_row(), def.max_bytes() / 4) << opt << " " << admit;
    }
  }
}

// A stream of 10 million distinct keys through a table with a row cap and admission: rows stay
// under the cap and memory (the admission counts included) stays bounded throughout.
TEST(EmbeddingTableEviction, TenMillionDistinctKeysStayUnderTheCap) {
  TableDef def = Def("emb", 8, "adagrad", 0.01);
  def.set_max_rows(100000);
  def.set_admit_after(2);
  auto t = Make(def);
  constexpr int kBatch = 50000;
  std::vector<uint64_t> keys(kBatch);
  std::vector<float> out(kBatch * 8), grads(kBatch * 8, 0.1f);
  int64_t bytes_after_warmup = 0, most_bytes = 0;
  for (int64_t b = 0; b < 10000000 / kBatch; ++b) {
    // Half of each batch repeats the previous batch's second half, so those keys reach their
    // second lookup and are admitted; all others are new.
    for (int i = 0; i < kBatch; ++i) keys[i] = MixKey(b * kBatch / 2 + i);
    t->Lookup(keys.data(), kBatch, out.data());
    ASSERT_TRUE(t->Apply(keys.data(), kBatch, grads.data()).ok());
    const TableStats s = t->Stats();
    ASSERT_LE(s.rows(), 100000) << "batch " << b;
    if (b == 20) bytes_after_warmup = s.bytes();
    most_bytes = std::max(most_bytes, s.bytes());
  }
  const TableStats s = t->Stats();
  EXPECT_EQ(s.rows(), 100000);
  EXPECT_GT(s.evicted_by_cap(), 1000000);
  EXPECT_GT(s.filtered_lookups(), 1000000);
  EXPECT_GT(s.admitted(), 1000000);
  // Rows (128 B with index and bookkeeping ~ 40 B more) and at most 2^17 pending counts.
  EXPECT_LT(most_bytes, 100000 * 200 + (int64_t{1} << 17) * 40);
  EXPECT_LE(most_bytes, bytes_after_warmup * 5 / 4);
}

// ---- Memory ---------------------------------------------------------------------------------

TEST(EmbeddingTableMemory, AdagradDim16RowsCostAtMostOneAndAHalfTimesTheirPayload) {
  auto t = Make(Def("emb", 16, "adagrad", 0.1));
  constexpr int64_t kRows = 1000000, kBatch = 100000;
  std::vector<uint64_t> keys(kBatch);
  std::vector<float> out(kBatch * 16);
  double worst = 0;
  for (int64_t b = 0; b < kRows / kBatch; ++b) {
    for (int64_t i = 0; i < kBatch; ++i) keys[i] = MixKey(b * kBatch + i);
    t->Lookup(keys.data(), kBatch, out.data());
    const TableStats s = t->Stats();
    worst = std::max(worst, static_cast<double>(s.bytes()) / s.rows());
  }
  const TableStats s = t->Stats();
  ASSERT_EQ(s.rows(), kRows);
  EXPECT_EQ(s.payload_bytes_per_row(), 128);
  const double per_row = static_cast<double>(s.bytes()) / s.rows();
  std::printf("bytes per row at %lld rows: %.1f (payload 128, %.3fx); worst from 100k rows: %.1f\n",
              static_cast<long long>(kRows), per_row, per_row / 128, worst);
  EXPECT_LE(per_row, 1.5 * 128);
  EXPECT_GT(per_row, 128 + 20);  // the payload and the bookkeeping are all counted
}

}  // namespace
}  // namespace pstrain
