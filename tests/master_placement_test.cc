// Variable partitioning and placement on PS tasks: shard counts computed by hand, the invariants
// of every split (contiguous cover, sizes within one row, larger first), the byte bounds checked
// against brute force, greedy balance on realistic sets, and the parse errors.

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/master.h"
#include "master/placement.h"

namespace pstrain {

void PrintTo(const RowRange& r, std::ostream* os) { *os << "[" << r.begin << ", " << r.end << ")"; }

namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Kind = PartitionerSpec::Kind;

PartitionerSpec Spec(Kind kind, int num_shards = 1, int64_t shard_bytes = 0, int max_shards = 0) {
  PartitionerSpec s;
  s.kind = kind;
  s.num_shards = num_shards;
  s.shard_bytes = shard_bytes;
  s.max_shards = max_shards;
  return s;
}

std::vector<RowRange> MustPartition(const std::vector<int64_t>& shape, const PartitionerSpec& s) {
  absl::StatusOr<std::vector<RowRange>> r = PartitionRows(shape, s);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : std::vector<RowRange>{};
}

// The ranges cover [0, rows) contiguously, sizes within one row, larger shards first.
void ExpectEvenCover(const std::vector<RowRange>& r, int64_t rows) {
  ASSERT_FALSE(r.empty());
  EXPECT_EQ(r.front().begin, 0);
  EXPECT_EQ(r.back().end, rows);
  for (size_t i = 0; i < r.size(); ++i) {
    EXPECT_GE(r[i].rows(), 1) << "shard " << i;
    if (i > 0) {
      EXPECT_EQ(r[i].begin, r[i - 1].end) << "shard " << i;
      EXPECT_LE(r[i].rows(), r[i - 1].rows()) << "shard " << i;  // larger first
    }
  }
  EXPECT_LE(r.front().rows() - r.back().rows(), 1);
}

int64_t Sum(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), 0LL); }

std::vector<int64_t> Loads(const std::vector<int64_t>& bytes, const std::vector<int>& ps, int n) {
  std::vector<int64_t> loads(n, 0);
  for (size_t i = 0; i < bytes.size(); ++i) loads[ps[i]] += bytes[i];
  return loads;
}

TEST(PartitionRowsTest, TenMillionFloatsFixedFourShards) {
  // 1-D: 10'000'000 rows split exactly.
  std::vector<RowRange> r = MustPartition({10'000'000}, Spec(Kind::kFixed, 4));
  EXPECT_THAT(r, ElementsAre(RowRange{0, 2'500'000}, RowRange{2'500'000, 5'000'000},
                             RowRange{5'000'000, 7'500'000}, RowRange{7'500'000, 10'000'000}));
  // [100003, 100]: 100003 = 4 * 25000 + 3, so three shards of 25001 rows, then one of 25000.
  r = MustPartition({100'003, 100}, Spec(Kind::kFixed, 4));
  ExpectEvenCover(r, 100'003);
  EXPECT_THAT(r, ElementsAre(RowRange{0, 25'001}, RowRange{25'001, 50'002},
                             RowRange{50'002, 75'003}, RowRange{75'003, 100'003}));
  // [2500003, 4]: 2500003 = 4 * 625000 + 3.
  r = MustPartition({2'500'003, 4}, Spec(Kind::kFixed, 4));
  ExpectEvenCover(r, 2'500'003);
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0].rows(), 625'001);
  EXPECT_EQ(r[3].rows(), 625'000);
}

TEST(PartitionRowsTest, NoneIsOneShard) {
  EXPECT_THAT(MustPartition({100'003, 100}, Spec(Kind::kNone)), ElementsAre(RowRange{0, 100'003}));
}

TEST(PartitionRowsTest, MinShardBytesByHand) {
  // Rows of 400 bytes; 65536 bytes need ceil(65536 / 400) = 164 rows; 100003 / 164 = 609 shards,
  // the smallest floor(100003 / 609) = 164 rows = 65600 bytes. 610 shards would leave 163 rows.
  std::vector<RowRange> r = MustPartition({100'003, 100}, Spec(Kind::kMinShardBytes, 1, 65536));
  ASSERT_EQ(r.size(), 609u);
  ExpectEvenCover(r, 100'003);
  EXPECT_EQ(r.back().rows() * 400, 65'600);
  // Capped by max_shards (the chief passes the number of PS tasks).
  EXPECT_EQ(MustPartition({100'003, 100}, Spec(Kind::kMinShardBytes, 1, 65536, 4)).size(), 4u);
  // 10M floats, 1-D, at least 16 MiB per shard: 40'000'000 / 16'777'216 -> 2 shards.
  EXPECT_EQ(MustPartition({10'000'000}, Spec(Kind::kMinShardBytes, 1, 16 << 20)).size(), 2u);
  // Smaller than one shard's minimum: still one shard.
  EXPECT_EQ(MustPartition({10, 10}, Spec(Kind::kMinShardBytes, 1, 1 << 20)).size(), 1u);
  // Exactly divisible: 8 rows of 4 floats (16 bytes), at least 32 bytes -> 4 shards of 2 rows.
  EXPECT_THAT(MustPartition({8, 4}, Spec(Kind::kMinShardBytes, 1, 32)),
              ElementsAre(RowRange{0, 2}, RowRange{2, 4}, RowRange{4, 6}, RowRange{6, 8}));
}

TEST(PartitionRowsTest, MaxShardBytesByHand) {
  // Rows of 400 bytes; 1 MiB holds floor(1048576 / 400) = 2621 rows; ceil(100003 / 2621) = 39
  // shards of at most 2565 rows = 1'026'000 bytes. 38 shards would need 2632 rows = 1'052'800.
  std::vector<RowRange> r = MustPartition({100'003, 100}, Spec(Kind::kMaxShardBytes, 1, 1 << 20));
  ASSERT_EQ(r.size(), 39u);
  ExpectEvenCover(r, 100'003);
  EXPECT_EQ(r.front().rows() * 400, 1'026'000);
  // 10M floats, at most 4 MiB: 1'048'576 rows per shard, ceil(10'000'000 / 1'048'576) = 10.
  r = MustPartition({10'000'000}, Spec(Kind::kMaxShardBytes, 1, 4 << 20));
  ASSERT_EQ(r.size(), 10u);
  for (const RowRange& s : r) EXPECT_EQ(s.rows(), 1'000'000);
  // Fits in one shard.
  EXPECT_EQ(MustPartition({10, 10}, Spec(Kind::kMaxShardBytes, 1, 400)).size(), 1u);
  // Capped by max_shards even if shards then exceed the bound.
  EXPECT_EQ(MustPartition({100'003, 100}, Spec(Kind::kMaxShardBytes, 1, 1 << 20, 8)).size(), 8u);
}

TEST(PartitionRowsTest, OneRowBiggerThanMaxBytesGivesOneRowPerShard) {
  // Rows of 4000 bytes, at most 1000 bytes: one row per shard.
  EXPECT_THAT(
      MustPartition({5, 1000}, Spec(Kind::kMaxShardBytes, 1, 1000)),
      ElementsAre(RowRange{0, 1}, RowRange{1, 2}, RowRange{2, 3}, RowRange{3, 4}, RowRange{4, 5}));
  EXPECT_THAT(MustPartition({5, 1000}, Spec(Kind::kMaxShardBytes, 1, 1000, 3)),
              ElementsAre(RowRange{0, 2}, RowRange{2, 4}, RowRange{4, 5}));
}

TEST(PartitionRowsTest, EdgeCases) {
  for (const PartitionerSpec& s : {Spec(Kind::kFixed, 8), Spec(Kind::kMinShardBytes, 1, 1),
                                   Spec(Kind::kMaxShardBytes, 1, 1)}) {
    EXPECT_THAT(MustPartition({}, s), ElementsAre(RowRange{0, 1}));         // scalar
    EXPECT_THAT(MustPartition({1}, s), ElementsAre(RowRange{0, 1}));        // one element
    EXPECT_THAT(MustPartition({1, 1000}, s), ElementsAre(RowRange{0, 1}));  // one row
    EXPECT_THAT(MustPartition({0, 4}, s), ElementsAre(RowRange{0, 0}));     // empty
  }
  // Fewer rows than shards: one row each.
  EXPECT_THAT(MustPartition({3, 7}, Spec(Kind::kFixed, 8)),
              ElementsAre(RowRange{0, 1}, RowRange{1, 2}, RowRange{2, 3}));
  // Zero-sized rows cannot meet a byte bound: never split.
  EXPECT_EQ(MustPartition({6, 0}, Spec(Kind::kMaxShardBytes, 1, 4)).size(), 1u);
  EXPECT_EQ(MustPartition({6, 0}, Spec(Kind::kMinShardBytes, 1, 4)).size(), 1u);
}

TEST(PartitionRowsTest, ByteBoundsMatchBruteForce) {
  // For every small shape and bound: the chosen count is what a search over all counts gives.
  for (int64_t rows = 2; rows <= 40; ++rows) {
    for (int64_t cols : {1, 3, 7}) {
      const int64_t row_bytes = 4 * cols;
      for (int64_t bound = 1; bound <= 4 * row_bytes + 5; bound += 3) {
        int64_t want_min = 1,
                want_max = rows;  // most with smallest >= bound; fewest with largest <= bound
        for (int64_t n = 1; n <= rows; ++n) {
          if ((rows / n) * row_bytes >= bound) want_min = n;
        }
        for (int64_t n = rows; n >= 1; --n) {
          if ((rows + n - 1) / n * row_bytes <= bound) want_max = n;
        }
        std::vector<RowRange> rmin =
            MustPartition({rows, cols}, Spec(Kind::kMinShardBytes, 1, bound));
        std::vector<RowRange> rmax =
            MustPartition({rows, cols}, Spec(Kind::kMaxShardBytes, 1, bound));
        ExpectEvenCover(rmin, rows);
        ExpectEvenCover(rmax, rows);
        EXPECT_EQ(static_cast<int64_t>(rmin.size()), want_min)
            << rows << "x" << cols << " " << bound;
        EXPECT_EQ(static_cast<int64_t>(rmax.size()), want_max)
            << rows << "x" << cols << " " << bound;
      }
    }
  }
}

TEST(PartitionRowsTest, BadSpecsAndShapes) {
  auto err = [](const std::vector<int64_t>& shape, const PartitionerSpec& s) {
    absl::StatusOr<std::vector<RowRange>> r = PartitionRows(shape, s);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(r.status().message());
  };
  EXPECT_THAT(err({10}, Spec(Kind::kFixed, 0)), HasSubstr("num_shards >= 1, got 0"));
  EXPECT_THAT(err({10}, Spec(Kind::kMinShardBytes, 1, 0)), HasSubstr("min_bytes"));
  EXPECT_THAT(err({10}, Spec(Kind::kMaxShardBytes, 1, -5)), HasSubstr("shard_bytes > 0, got -5"));
  EXPECT_THAT(err({10}, Spec(Kind::kFixed, 2, 0, -1)), HasSubstr("max_shards"));
  EXPECT_THAT(err({4, -1}, Spec(Kind::kFixed, 2)), HasSubstr("negative dimension -1"));
  EXPECT_THAT(err({2, int64_t{1} << 40, int64_t{1} << 40}, Spec(Kind::kFixed, 2)),
              HasSubstr("overflows"));
  // A bad spec is rejected even for a scalar.
  EXPECT_THAT(err({}, Spec(Kind::kFixed, 0)), HasSubstr("num_shards"));
}

TEST(ParsePartitionerTest, AcceptsCommandLineForms) {
  absl::StatusOr<PartitionerSpec> s = ParsePartitioner("none");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->kind, Kind::kNone);
  s = ParsePartitioner("fixed:4");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->kind, Kind::kFixed);
  EXPECT_EQ(s->num_shards, 4);
  s = ParsePartitioner("min_bytes:65536");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->kind, Kind::kMinShardBytes);
  EXPECT_EQ(s->shard_bytes, 65536);
  EXPECT_EQ(s->max_shards, 0);
  s = ParsePartitioner("max_bytes:1048576");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->kind, Kind::kMaxShardBytes);
  EXPECT_EQ(s->shard_bytes, 1048576);
}

TEST(ParsePartitionerTest, ErrorsNameTheBadText) {
  for (const std::string bad :
       {"", "fixed", "fixed:", "fixed:0", "fixed:-2", "fixed:x", "min_bytes:1.5", "max_bytes:0",
        "none:3", "fixd:4", "fixed:99999999999"}) {
    absl::StatusOr<PartitionerSpec> s = ParsePartitioner(bad);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.status().message(), HasSubstr("\"" + bad + "\"")) << bad;
  }
  EXPECT_THAT(ParsePartitioner("fixd:4").status().message(),
              HasSubstr("expected auto, none, fixed:N"));
  EXPECT_THAT(ParsePartitioner("fixed:x").status().message(), HasSubstr("not a positive integer"));
}

TEST(ParsePlacementTest, ParsesAndRejects) {
  EXPECT_EQ(*ParsePlacement("round_robin"), PlacementStrategy::kRoundRobin);
  EXPECT_EQ(*ParsePlacement("greedy"), PlacementStrategy::kGreedyBytes);
  absl::StatusOr<PlacementStrategy> s = ParsePlacement("random");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("\"random\""));
  EXPECT_THAT(s.status().message(), HasSubstr("round_robin or greedy"));
}

TEST(PlaceItemsTest, RoundRobin) {
  EXPECT_THAT(PlaceItems({5, 1, 9, 9, 2, 0, 7}, 3, PlacementStrategy::kRoundRobin),
              ElementsAre(0, 1, 2, 0, 1, 2, 0));
  EXPECT_THAT(PlaceItems({5, 1}, 1, PlacementStrategy::kRoundRobin), ElementsAre(0, 0));
  EXPECT_TRUE(PlaceItems({}, 2, PlacementStrategy::kRoundRobin).empty());
}

TEST(PlaceItemsTest, GreedyIsDeterministicWithLowestIndexTies) {
  EXPECT_THAT(PlaceItems({5, 5, 5, 5}, 2, PlacementStrategy::kGreedyBytes),
              ElementsAre(0, 1, 0, 1));
  // 10 -> ps0; 8 -> ps1; the first 2 -> ps1 (8 < 10); the second 2 -> ps0 (10 = 10, lowest
  // index); 1 -> ps1 (10 < 12).
  EXPECT_THAT(PlaceItems({2, 10, 1, 8, 2}, 2, PlacementStrategy::kGreedyBytes),
              ElementsAre(1, 0, 1, 1, 0));
  EXPECT_THAT(PlaceItems({3, 10}, 1, PlacementStrategy::kGreedyBytes), ElementsAre(0, 0));
  EXPECT_TRUE(PlaceItems({}, 3, PlacementStrategy::kGreedyBytes).empty());
}

TEST(PlaceItemsTest, GreedyStartsFromInitialLoads) {
  // PS 0 already holds 100 bytes: 60 -> ps1, 50 -> ps2, 40 -> ps2 (50 < 60), 10 -> ps1.
  EXPECT_THAT(PlaceItems({40, 60, 10, 50}, 3, PlacementStrategy::kGreedyBytes, {100}),
              ElementsAre(2, 1, 1, 2));
  // Round-robin ignores the loads.
  EXPECT_THAT(PlaceItems({1, 1, 1}, 2, PlacementStrategy::kRoundRobin, {100, 0}),
              ElementsAre(0, 1, 0));
}

TEST(PlaceItemsTest, GreedyBalancesShardsOfBigVariablePlusRandomOnes) {
  constexpr int kNumPs = 4;
  std::vector<int64_t> bytes;
  for (const RowRange& r : MustPartition({100'003, 100}, Spec(Kind::kFixed, kNumPs))) {
    bytes.push_back(r.rows() * 100 * 4);  // 4 shards of ~10 MB
  }
  std::mt19937 rng(20240607);  // raw mt19937 output is the same on every standard library
  for (int i = 0; i < 40; ++i) {
    const int64_t rows = 1 + rng() % 1000, cols = 1 + rng() % 1000;
    bytes.push_back(rows * cols * 4);
    if (i % 4 == 0) bytes.push_back(cols * 4);  // a bias now and then
  }
  const std::vector<int> ps = PlaceItems(bytes, kNumPs, PlacementStrategy::kGreedyBytes);
  ASSERT_EQ(ps.size(), bytes.size());
  const std::vector<int64_t> loads = Loads(bytes, ps, kNumPs);
  const double balanced = static_cast<double>(Sum(bytes)) / kNumPs;
  const int64_t max_load = *std::max_element(loads.begin(), loads.end());
  EXPECT_LE(max_load, 1.10 * balanced)
      << "loads " << loads[0] << " " << loads[1] << " " << loads[2] << " " << loads[3];
  EXPECT_EQ(PlaceItems(bytes, kNumPs, PlacementStrategy::kGreedyBytes), ps);  // deterministic
  // Round-robin on the same set is worse, which is why greedy exists.
  const std::vector<int64_t> rr =
      Loads(bytes, PlaceItems(bytes, kNumPs, PlacementStrategy::kRoundRobin), kNumPs);
  EXPECT_GE(*std::max_element(rr.begin(), rr.end()), max_load);
}

TEST(PlaceItemsTest, GreedyOnMlpMeetsTheGreedyBound) {
  // 784x256, 256, 256x128, 128, 128x10, 10 over 2 PS: the first kernel alone outweighs the rest,
  // so 10% of balanced is impossible; greedy puts it alone and everything else on the other PS.
  const std::vector<int64_t> bytes = {784 * 256 * 4, 256 * 4,      256 * 128 * 4,
                                      128 * 4,       128 * 10 * 4, 10 * 4};
  const std::vector<int> ps = PlaceItems(bytes, 2, PlacementStrategy::kGreedyBytes);
  EXPECT_THAT(ps, ElementsAre(0, 1, 1, 1, 1, 1));
  const std::vector<int64_t> loads = Loads(bytes, ps, 2);
  const int64_t largest = *std::max_element(bytes.begin(), bytes.end());
  EXPECT_LE(std::max(loads[0], loads[1]), Sum(bytes) / 2 + largest);
  EXPECT_EQ(std::max(loads[0], loads[1]), largest);  // optimal here
}

TEST(PartitionRowsTest, AutoSplitsOnlyLargeVariablesAndKeepsShardsSmall) {
  PartitionerSpec spec = Spec(Kind::kAuto, 1, 0, /*max_shards=*/2);
  // Up to 256 KiB: one shard.
  EXPECT_EQ(MustPartition({256, 256}, spec).size(), 1u);
  EXPECT_EQ(MustPartition({64 * 1024}, spec).size(), 1u);
  // 784 KiB over 2 PS: two shards, each over 256 KiB.
  std::vector<RowRange> r = MustPartition({784, 256}, spec);
  ExpectEvenCover(r, 784);
  EXPECT_EQ(r.size(), 2u);
  // Rows of 1 KiB: 513 rows make shards of 257 and 256 rows, both at least 256 KiB.
  EXPECT_EQ(MustPartition({513, 256}, spec).size(), 2u);
  // 300 KiB cannot make two shards of 256 KiB.
  EXPECT_EQ(MustPartition({300, 256}, spec).size(), 1u);
  // 1 GiB over 2 PS: enough shards that each is at most 64 MiB, whatever the PS count.
  r = MustPartition({1 << 20, 256}, spec);
  ExpectEvenCover(r, 1 << 20);
  EXPECT_EQ(r.size(), 16u);
  for (const RowRange& x : r) EXPECT_LE(x.rows() * 1024, kAutoMaxShardBytes);
  // The parser knows it.
  absl::StatusOr<PartitionerSpec> parsed = ParsePartitioner("auto");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->kind, Kind::kAuto);
}

TEST(PartitionRowsTest, RefusesMoreShardsThanARequestNames) {
  absl::StatusOr<std::vector<RowRange>> r =
      PartitionRows({int64_t{1} << 40}, Spec(Kind::kFixed, 1 << 30));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("at most 65536"));
}

// The defaults of a job (JobConfig: partitioner auto, placement greedy) put the MNIST MLP over
// 2 PS within twice of balanced; round-robin without partitioning put 99.8% on ps:0.
TEST(PlaceItemsTest, DefaultsBalanceTheMlpOverTwoPs) {
  const JobConfig defaults;
  absl::StatusOr<PartitionerSpec> part = ParsePartitioner(defaults.partitioner);
  absl::StatusOr<PlacementStrategy> strategy = ParsePlacement(defaults.placement);
  ASSERT_TRUE(part.ok() && strategy.ok());
  part->max_shards = 2;
  const std::vector<std::vector<int64_t>> shapes = {{784, 256}, {256},     {256, 128},
                                                    {128},      {128, 10}, {10}};
  std::vector<int64_t> bytes;
  for (const auto& shape : shapes) {
    int64_t row = 4;
    for (size_t i = 1; i < shape.size(); ++i) row *= shape[i];
    for (const RowRange& r : MustPartition(shape, *part)) bytes.push_back(r.rows() * row);
  }
  const std::vector<int64_t> loads = Loads(bytes, PlaceItems(bytes, 2, *strategy), 2);
  const int64_t share = Sum(bytes) / 2;
  EXPECT_LE(std::max(loads[0], loads[1]), 2 * share);
  EXPECT_GE(std::min(loads[0], loads[1]), share / 2) << loads[0] << " " << loads[1];
}

TEST(PlacementTableTest, ListsItemsAndPerPsTotals) {
  const std::vector<std::string> names = {"dense0/kernel/part_0", "dense0/kernel/part_1",
                                          "dense0/bias", "step"};
  const std::vector<std::vector<int64_t>> shapes = {{392, 256}, {392, 256}, {256}, {}};
  const std::string table = PlacementTable(names, shapes, {0, 1, 1, 0}, 2);
  for (const std::string& name : names) EXPECT_THAT(table, HasSubstr(name));
  EXPECT_THAT(table, HasSubstr("[392,256]"));
  EXPECT_THAT(table, HasSubstr("401408"));
  EXPECT_THAT(table, HasSubstr("ps 0: 2 items, 401412 bytes"));  // kernel + 4-byte scalar
  EXPECT_THAT(table, HasSubstr("ps 1: 2 items, 402432 bytes"));  // kernel + 1024-byte bias
  EXPECT_THAT(table, HasSubstr("total: 4 items, 803844 bytes"));
  EXPECT_THAT(table, HasSubstr("(392.0 KiB, 49.9%)"));
  // A PS with nothing on it still gets a line.
  EXPECT_THAT(PlacementTable(names, shapes, {0, 0, 0, 0}, 3), HasSubstr("ps 2: 0 items, 0 bytes"));
  // The item lines, aligned: bytes to the right, the rest to the left.
  EXPECT_THAT(table, HasSubstr("name                  shape       bytes  ps\n"
                               "dense0/kernel/part_0  [392,256]  401408  0\n"
                               "dense0/kernel/part_1  [392,256]  401408  1\n"
                               "dense0/bias           [256]        1024  1\n"
                               "step                  []              4  0\n"));
}

TEST(TextColumnsTest, AlignsEachColumnToItsWidestCellAndLeavesTheLastUnpadded) {
  EXPECT_EQ(TextColumns({{"a", "bb", "c"}, {"ddd", "e", "ffff"}, {"g"}}),
            "a    bb  c\n"
            "ddd  e   ffff\n"
            "g\n");
  EXPECT_EQ(TextColumns({{"n", "10"}, {"long", "5"}}, /*right_aligned=*/{1}),
            "n     10\n"
            "long   5\n");
  EXPECT_EQ(TextColumns({}), "");
}

}  // namespace
}  // namespace pstrain
