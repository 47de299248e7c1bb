// Tagged pushes of a batch already applied, through the PS's gRPC service on 127.0.0.1: dropped as
// duplicates per shard and table in async and ssp mode, and in sync mode counted towards their
// step, which averages the gradients it added and commits their watermarks when it applies; the
// watermarks as AppliedTasks lists them and the counters against hand-computed values.
#include <optional>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps_grpc_testing.h"

namespace pstrain::ps_testing {
namespace {

using ::testing::ElementsAre;

// Async and ssp apply each push at once: a duplicate is dropped on each shard and table that
// applied its batch, whatever the others did; an untagged push is never a duplicate.
class PsDuplicatesTest : public PsRecoveryTest,
                         public ::testing::WithParamInterface<std::string> {};

TEST_P(PsDuplicatesTest, AppliedBatchesAreDroppedOncePerShardAndTable) {
  const ConfigureRequest config = Config(GetParam(), 1, 0, 2, 30, {});
  Start(&config);
  const Sender w0 = Worker(0);
  PushResponse resp;
  ASSERT_TRUE(Push(w0, 1, 0, Tag(0, 0, 0)).ok());
  ASSERT_TRUE(Push(w0, 1, 0, Tag(0, 0, 0), {"w"}, &resp).ok());  // the same batch again
  EXPECT_THAT(resp.versions(), ElementsAre(1));
  EXPECT_EQ(Read(), (State{1, -1}));
  ASSERT_TRUE(Push(w0, 2, 0, Tag(0, 0, 2)).ok());  // a batch skipped is no error
  ASSERT_TRUE(Push(w0, 5, 0, Tag(0, 0, 1)).ok());  // below next_batch 3: a duplicate
  ASSERT_TRUE(Push(w0, 0.5f, 0, Tag(0, 1, 0)).ok());
  ASSERT_TRUE(Push(w0, 0.25f, 0, std::nullopt).ok());  // untagged: applied
  ASSERT_TRUE(Push(w0, 0.25f, 0, std::nullopt).ok());
  EXPECT_EQ(Read(), (State{5, -4}));  // 1 + 2 + 0.5 + 0.25 + 0.25
  // One push to "w" (which has batch 0 of task (1, 0)) and "v" (which has not): applied to "v".
  ASSERT_TRUE(Push(w0, 8, 0, Tag(1, 0, 0), {"w"}).ok());
  ASSERT_TRUE(Push(w0, 16, 0, Tag(1, 0, 0), {"w", "v"}, &resp).ok());
  EXPECT_THAT(resp.versions(), ElementsAre(6, 1));
  EXPECT_EQ(Read(), (State{6, -12}));
  EXPECT_EQ(Read("v"), (State{1, -16}));
  // The table keeps its own watermarks.
  ASSERT_TRUE(PushEmb(w0, 1, 0, Tag(0, 0, 0)).ok());
  ASSERT_TRUE(PushEmb(w0, 3, 0, Tag(0, 0, 0)).ok());
  ASSERT_TRUE(PushEmb(w0, 2, 0, Tag(0, 0, 1)).ok());
  uint64_t version = 0;
  EXPECT_EQ(Row7(&version), -3);
  EXPECT_EQ(version, 2u);

  EXPECT_EQ(ShardMarks(0), (Marks{{1, 0, 1}}));                        // "v"
  EXPECT_EQ(ShardMarks(1), (Marks{{0, 0, 3}, {0, 1, 1}, {1, 0, 1}}));  // "w"
  EXPECT_EQ(TableMarks(), (Marks{{0, 0, 2}}));
  const StatsResponse stats = GetStats();
  EXPECT_EQ(stats.duplicates_dropped(), 4);      // three dense pushes and one sparse push
  EXPECT_EQ(stats.pushes_applied(), 6 + 1 + 2);  // "w", "v" and "emb"
  EXPECT_EQ(stats.updates_applied(), 6 + 1 + 2);
}

INSTANTIATE_TEST_SUITE_P(AsyncAndSsp, PsDuplicatesTest, ::testing::Values("async", "ssp"));

// Sync, 2 of 2 workers: a duplicate counts towards its step, which averages the gradients it
// added (none: the step advances without an update); watermarks commit when the step applies,
// and a stale gradient's at once.
TEST_F(PsRecoveryTest, SyncStepsCountDuplicatesAndAverageWhatTheyAdded) {
  const ConfigureRequest config = Config("sync", 2, 2, 0, 30, {});
  Start(&config);
  const Sender w0 = Worker(0), w1 = Worker(1);
  ASSERT_TRUE(Push(w0, 1, 0, Tag(0, 0, 0)).ok());
  ASSERT_TRUE(Push(w1, 3, 0, Tag(0, 1, 0)).ok());
  EXPECT_EQ(Read(), (State{1, -2}));                 // (1 + 3) / 2
  ASSERT_TRUE(Push(w0, 100, 1, Tag(0, 0, 0)).ok());  // a duplicate, for step 1
  EXPECT_EQ(Read(), (State{1, -2}));
  ASSERT_TRUE(Push(w1, 4, 1, Tag(0, 1, 1)).ok());
  EXPECT_EQ(Read(), (State{2, -6}));  // 4 / 1
  EXPECT_EQ(ShardMarks(1), (Marks{{0, 0, 1}, {0, 1, 2}}));
  ASSERT_TRUE(Push(w1, 8, 2, Tag(0, 1, 2)).ok());
  EXPECT_EQ(ShardMarks(1), (Marks{{0, 0, 1}, {0, 1, 2}})) << "committed before its step applied";
  ASSERT_TRUE(Push(w0, 100, 2, Tag(0, 0, 0)).ok());
  EXPECT_EQ(Read(), (State{3, -14}));
  EXPECT_EQ(ShardMarks(1), (Marks{{0, 0, 1}, {0, 1, 3}}));
  ASSERT_TRUE(Push(w0, 100, 3, Tag(0, 0, 0)).ok());  // a step of duplicates only
  ASSERT_TRUE(Push(w1, 100, 3, Tag(0, 1, 1)).ok());
  EXPECT_EQ(Read(), (State{4, -14}));
  PushResponse resp;
  ASSERT_TRUE(Push(w0, 100, 0, Tag(0, 0, 5), {"w"}, &resp).ok());  // stale: dropped, committed
  EXPECT_EQ(resp.stale_dropped(), 1);
  EXPECT_EQ(Read(), (State{4, -14}));
  EXPECT_EQ(ShardMarks(1), (Marks{{0, 0, 6}, {0, 1, 3}}));
  const StatsResponse stats = GetStats();
  EXPECT_EQ(stats.duplicates_dropped(), 4);
  EXPECT_EQ(stats.stale_dropped(), 1);
  EXPECT_EQ(stats.updates_applied(), 3);
  EXPECT_EQ(stats.pushes_applied(), 4);
}

TEST_F(PsRecoveryTest, SyncTableStepsCountDuplicatesAndAverageWhatTheyAdded) {
  const ConfigureRequest config = Config("sync", 2, 2, 0, 30, {});
  Start(&config);
  const Sender w0 = Worker(0), w1 = Worker(1);
  ASSERT_TRUE(PushEmb(w0, 2, 0, Tag(0, 0, 0)).ok());
  ASSERT_TRUE(PushEmb(w1, 4, 0, Tag(0, 1, 0)).ok());
  EXPECT_EQ(Row7(), -3);
  ASSERT_TRUE(PushEmb(w0, 100, 1, Tag(0, 0, 0)).ok());
  EXPECT_EQ(TableMarks(), (Marks{{0, 0, 1}, {0, 1, 1}}));
  ASSERT_TRUE(PushEmb(w1, 6, 1, Tag(0, 1, 1)).ok());
  uint64_t version = 0;
  EXPECT_EQ(Row7(&version), -9);
  EXPECT_EQ(version, 2u);
  ASSERT_TRUE(PushEmb(w0, 100, 2, Tag(0, 0, 0)).ok());
  ASSERT_TRUE(PushEmb(w1, 100, 2, Tag(0, 1, 0)).ok());
  EXPECT_EQ(Row7(&version), -9);
  EXPECT_EQ(version, 3u);
  EXPECT_EQ(TableMarks(), (Marks{{0, 0, 1}, {0, 1, 2}}));
  EXPECT_EQ(GetStats().duplicates_dropped(), 3);
}

}  // namespace
}  // namespace pstrain::ps_testing
