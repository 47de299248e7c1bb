// Embedding tables under sync and ssp consistency, in process: a table's step applies the average
// of every counting worker's gradient (an empty one counts too), lookups wait for a step or a
// clock, stale gradients are dropped and counted, and a paused worker does not hold a step.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps_tables_testing.h"

namespace pstrain {
namespace {

using namespace ps_testing;  // NOLINT
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A sync PS for 2 workers with table "emb" (dim 2, zeros, sgd lr 1) and "bias" (dim 1).
std::unique_ptr<ParameterServer> SyncPs(double wait_s = 60) {
  const ConfigureRequest config = Config("sync", 2, 2, 0, wait_s, {});
  std::unique_ptr<ParameterServer> ps = MakePs(&config);
  EXPECT_TRUE(CreateTables(ps.get(), {TableOf("emb", 2, 0.0f), TableOf("bias", 1, 0.0f)}).ok());
  return ps;
}

TEST(PsTablesSyncTest, AStepAppliesTheAverageOnceEveryWorkerPushedEvenWithNoKeys) {
  std::unique_ptr<ParameterServer> ps = SyncPs();
  LookupResponse looked;
  ASSERT_TRUE(ps->Lookup(LookupReq(Worker(0), {{"emb", KeyBytes({1, 2})}}), &looked).ok());
  AsyncLookup next(ps.get(), LookupReq(Worker(0), {{"emb", KeyBytes({1, 2})}}, 1));

  PushSparseResponse resp;
  ASSERT_TRUE(PushSparse(ps.get(), Worker(0), {Grad("emb", {2, 1}, {2, 4, 6, 8}, 0)}, &resp).ok());
  EXPECT_THAT(resp.versions(), ElementsAre(0));
  EXPECT_FALSE(next.done()) << "the step waits for worker 1";
  EXPECT_EQ(Stats(ps.get()).updates_applied(), 0);
  EXPECT_THAT(Rows(ps.get(), "emb", {1, 2}), ElementsAre(0, 0, 0, 0));

  ASSERT_TRUE(PushSparse(ps.get(), Worker(1), {Grad("emb", {}, {}, 0)}, &resp).ok());
  EXPECT_THAT(resp.versions(), ElementsAre(1));
  ASSERT_TRUE(Eventually([&] { return next.done(); }));
  ASSERT_TRUE(next.status.ok()) << next.status;
  EXPECT_EQ(next.resp.tables(0).version(), 1u);
  // The average over 2 gradients, with lr 1: key 1 got (6, 8), key 2 got (2, 4).
  EXPECT_THAT(next.rows(), ElementsAre(-3, -4, -1, -2));

  const StatsResponse stats = Stats(ps.get());
  EXPECT_EQ(stats.pushes_applied(), 2);   // accumulated, one per table and push
  EXPECT_EQ(stats.updates_applied(), 1);  // one step
  EXPECT_EQ(stats.pulls_waited(), 1);
  EXPECT_THAT(stats.pushes_by_worker(), ElementsAre(1, 1));
  EXPECT_EQ(stats.tables(1).version(), 1u);
  EXPECT_EQ(stats.tables(0).version(), 0u) << "'bias' had no gradient: its step is its own";
}

TEST(PsTablesSyncTest, StaleAndRepeatedGradientsAreDroppedOrRefused) {
  std::unique_ptr<ParameterServer> ps = SyncPs();
  Rows(ps.get(), "emb", {1});
  ASSERT_TRUE(PushSparse(ps.get(), Worker(0), {Grad("emb", {1}, {2, 2}, 0)}).ok());
  absl::Status s = PushSparse(ps.get(), Worker(0), {Grad("emb", {1}, {2, 2}, 0)});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("table 'emb' on ps task 0"),
                                 HasSubstr("worker:0 already pushed a gradient for step 0")));
  ASSERT_TRUE(PushSparse(ps.get(), Worker(1), {Grad("emb", {1}, {4, 4}, 0)}).ok());
  EXPECT_THAT(Rows(ps.get(), "emb", {1}), ElementsAre(-3, -3));

  PushSparseResponse resp;
  ASSERT_TRUE(
      PushSparse(ps.get(), Worker(1), {Grad("emb", {1}, {8, 8}, 0), Grad("bias", {}, {}, 0)}, &resp)
          .ok());
  EXPECT_EQ(resp.stale_dropped(), 1);
  EXPECT_THAT(resp.versions(), ElementsAre(1, 0));
  const StatsResponse stats = Stats(ps.get());
  EXPECT_EQ(stats.stale_dropped(), 1);
  EXPECT_THAT(stats.dropped_by_worker(), ElementsAre(0, 1));
  EXPECT_THAT(Rows(ps.get(), "emb", {1}), ElementsAre(-3, -3)) << "the stale gradient was dropped";
}

TEST(PsTablesSyncTest, APausedWorkerDoesNotHoldTheStepAndCountsAgainWhenItPushes) {
  std::unique_ptr<ParameterServer> ps = SyncPs();
  Rows(ps.get(), "emb", {1});
  AsyncLookup next(ps.get(), LookupReq(Worker(0), {{"emb", KeyBytes({1})}}, 1));
  ASSERT_TRUE(PushSparse(ps.get(), Worker(0), {Grad("emb", {1}, {2, 2}, 0)}).ok());
  EXPECT_FALSE(next.done());
  ASSERT_TRUE(Leave(ps.get(), Worker(1), /*pause=*/true).ok());  // at a barrier
  ASSERT_TRUE(Eventually([&] { return next.done(); }));
  ASSERT_TRUE(next.status.ok()) << next.status;
  EXPECT_THAT(next.rows(), ElementsAre(-2, -2)) << "worker 0's gradient alone";

  // Worker 1 pushes again: it counts again, so the next step needs both.
  ASSERT_TRUE(PushSparse(ps.get(), Worker(1), {Grad("emb", {1}, {2, 2}, 1)}).ok());
  uint64_t version = 0;
  EXPECT_THAT(Rows(ps.get(), "emb", {1}, &version), ElementsAre(-2, -2));
  EXPECT_EQ(version, 1u);
  ASSERT_TRUE(PushSparse(ps.get(), Worker(0), {Grad("emb", {1}, {4, 4}, 1)}).ok());
  EXPECT_THAT(Rows(ps.get(), "emb", {1}, &version), ElementsAre(-5, -5));
  EXPECT_EQ(version, 2u);
}

TEST(PsTablesSyncTest, AWorkerThatLeavesCompletesTheStep) {
  std::unique_ptr<ParameterServer> ps = SyncPs();
  Rows(ps.get(), "emb", {1});
  ASSERT_TRUE(PushSparse(ps.get(), Worker(1), {Grad("emb", {1}, {2, 2}, 0)}).ok());
  ASSERT_TRUE(Leave(ps.get(), Worker(0), /*pause=*/false).ok());
  uint64_t version = 0;
  EXPECT_THAT(Rows(ps.get(), "emb", {1}, &version), ElementsAre(-2, -2));
  EXPECT_EQ(version, 1u);
}

TEST(PsTablesSyncTest, ALookupThatWaitsTooLongSaysWhichWorkersTheStepLacks) {
  std::unique_ptr<ParameterServer> ps = SyncPs(/*wait_s=*/0.2);
  ASSERT_TRUE(PushSparse(ps.get(), Worker(0), {Grad("emb", {}, {}, 0)}).ok());
  LookupResponse resp;
  absl::Status s = ps->Lookup(LookupReq(Worker(0), {{"bias", ""}, {"emb", ""}}, 1), &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("table 'bias' on ps task 0 is at step 0"),
                                 HasSubstr("lacks gradients from worker:0, worker:1")));
  s = ps->Lookup(LookupReq(Worker(0), {{"emb", ""}}, 1), &resp);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("table 'emb' on ps task 0 is at step 0"),
                                 HasSubstr("lacks gradients from worker:1 (it has 1 of 2)")));
}

TEST(PsTablesSyncTest, AWaitingLookupEndsWhenTheServerStops) {
  std::unique_ptr<ParameterServer> ps = SyncPs();
  AsyncLookup next(ps.get(), LookupReq(Worker(0), {{"emb", KeyBytes({1})}}, 1));
  EXPECT_FALSE(next.done());
  ps->Stop();
  ASSERT_TRUE(next.done());
  EXPECT_EQ(next.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(next.resp.tables_size(), 0);
}

TEST(PsTablesSspTest, ALookupWithAClockTooFarAheadWaitsForTheSlowestWorker) {
  const ConfigureRequest config = Config("ssp", 2, 0, /*staleness=*/1, 60, {});
  std::unique_ptr<ParameterServer> ps = MakePs(&config);
  ASSERT_TRUE(CreateTables(ps.get(), {TableOf("emb", 2, 0.0f)}).ok());
  LookupResponse resp;
  ASSERT_TRUE(ps->Lookup(LookupReq(Worker(0), {{"emb", KeyBytes({1})}}, 0, 1), &resp).ok())
      << "one clock ahead is within the staleness";
  AsyncLookup ahead(ps.get(), LookupReq(Worker(0), {{"emb", KeyBytes({1})}}, 0, 2));
  ASSERT_TRUE(PushSparse(ps.get(), Worker(0), {Grad("emb", {1}, {1, 1}, 0)}).ok());
  EXPECT_FALSE(ahead.done()) << "ssp pushes apply at once, but the clock is too far ahead";
  EXPECT_THAT(Rows(ps.get(), "emb", {1}), ElementsAre(-1, -1));
  ASSERT_TRUE(ps->Lookup(LookupReq(Worker(1), {{"emb", KeyBytes({1})}}, 0, 1), &resp).ok());
  ASSERT_TRUE(Eventually([&] { return ahead.done(); }));
  ASSERT_TRUE(ahead.status.ok()) << ahead.status;
  EXPECT_THAT(ahead.rows(), ElementsAre(-1, -1));
  EXPECT_EQ(Stats(ps.get()).max_clock_gap(), 1);
}

}  // namespace
}  // namespace pstrain
