// Workers on the chief's task queue in a whole job of real servers on 127.0.0.1 (2 PS, 2
// workers; tests/worker_cluster.h): every push carries the tag of its task's batch, each batch
// is pushed once, the ledger and every shard's watermarks apply every task once in async, sync
// and ssp modes; a StartTraining of a new generation, or a new chief, stops the run in progress
// and starts the next; a run refused for its generation ends quietly.
#include <algorithm>
#include <numeric>
#include <thread>

#include "common/keys.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/trainer.h"
#include "worker_cluster.h"

namespace pstrain {
namespace {

using worker_cluster::Cluster;
using worker_cluster::JobShape;
using worker_cluster::PushSeen;

class WorkerTaskQueueTest : public testing::ProcessTest {};

// The built-in trainer cuts a task as a client program's Task does (client_task_test.cc tests
// its order): every field of the chief's assignment is kept, and the order of the rows is drawn
// from the assignment's seed only, so a redo by any worker, or by a program, cuts the same
// batches.
TEST(WorkerTaskOrderTest, IsTheClientsTaskOfTheChiefsAssignment) {
  TaskAssignment a;
  a.set_epoch(1);
  a.set_task(3);
  a.set_begin(100);
  a.set_end(140);
  a.set_seed(TaskSeed(42, 1, 3));
  const Task t = TaskOf(a, 16);
  EXPECT_EQ(t.epoch, 1);
  EXPECT_EQ(t.index, 3);
  EXPECT_EQ(t.begin, 100);
  EXPECT_EQ(t.end, 140);
  EXPECT_EQ(t.seed, TaskSeed(42, 1, 3));
  EXPECT_EQ(t.batch_size, 16);
  EXPECT_EQ(t.num_batches(), 3);
  const std::vector<int64_t> rows = t.Rows();
  EXPECT_EQ(rows, TaskOf(a, 16).Rows());
  std::vector<int64_t> sorted = rows, in_order(40);
  std::sort(sorted.begin(), sorted.end());
  std::iota(in_order.begin(), in_order.end(), 100);
  EXPECT_EQ(sorted, in_order);
  EXPECT_NE(rows, in_order);  // shuffled
  a.set_seed(TaskSeed(43, 1, 3));
  EXPECT_NE(TaskOf(a, 16).Rows(), rows);  // another job's seed
}

// Runs the job in `shape.mode` to the end and checks the ledger and the tags on each PS.
void RunToTheEnd(const std::string& dir, const JobShape& shape) {
  Cluster c(dir, shape);
  ASSERT_NO_FATAL_FAILURE(c.SetUpJob());
  ASSERT_NO_FATAL_FAILURE(c.StartAll(1));
  ASSERT_EQ(c.WaitForDone(absl::Seconds(60)), "");
  EXPECT_TRUE(c.coordinator().TasksFinished());
  EXPECT_EQ(c.coordinator().LedgerCheck(), "");
  for (int p = 0; p < Cluster::kPs; ++p) {
    EXPECT_EQ(c.TagCounts(p), c.EveryBatch(1)) << "ps:" << p;
    for (const PushSeen& s : c.log(p).pushes()) EXPECT_EQ(s.generation, 1u);
    EXPECT_EQ(c.DuplicatesDropped(p), 0) << "ps:" << p;
  }
  c.ExpectEveryBatchAppliedOnce();
}

TEST_F(WorkerTaskQueueTest, AsyncPushesEveryBatchOfEveryTaskOnceWithItsTag) {
  RunToTheEnd(dir_, {.mode = "async"});
}

// Each batch is one step. 7 tasks of 3 batches: one worker takes 4, the other is told WAIT for
// the last task and leaves the step barrier, so the last steps complete with one gradient each
// (else they would wait for it until the PS's wait timeout).
TEST_F(WorkerTaskQueueTest, SyncModeRunsTheQueueToTheEnd) {
  RunToTheEnd(dir_, {.mode = "sync", .rows = 210, .task_rows = 30, .epochs = 1});
}

TEST_F(WorkerTaskQueueTest, SspModeRunsTheQueueToTheEnd) {
  RunToTheEnd(dir_, {.mode = "ssp", .staleness = 1});
}

// A second StartTraining of a new generation stops the first run (no push of it after the
// second run's first) and the second run finishes the job; the same generation again is a retry.
TEST_F(WorkerTaskQueueTest, ANewGenerationStopsTheRunInProgressAndStartsTheNext) {
  Cluster c(dir_, {.mode = "async", .step_delay_ms = 30});
  ASSERT_NO_FATAL_FAILURE(c.SetUpJob());
  ASSERT_NO_FATAL_FAILURE(c.StartAll(1));
  for (int i = 0; i < 200 && c.log(0).pushes().size() < 6; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GE(c.log(0).pushes().size(), 6u);
  ASSERT_TRUE(c.Start(0, 1).ok());  // a retry: nothing changes
  ASSERT_NO_FATAL_FAILURE(c.StartAll(2));
  ASSERT_EQ(c.WaitForDone(absl::Seconds(60)), "");
  EXPECT_EQ(c.coordinator().LedgerCheck(), "");
  for (int p = 0; p < Cluster::kPs; ++p) {
    const std::vector<PushSeen> pushes = c.log(p).pushes();
    const auto second = std::find_if(pushes.begin(), pushes.end(),
                                     [](const PushSeen& s) { return s.generation == 2; });
    ASSERT_NE(second, pushes.end()) << "ps:" << p << " saw no push of generation 2";
    EXPECT_TRUE(
        std::all_of(second, pushes.end(), [](const PushSeen& s) { return s.generation == 2; }))
        << "ps:" << p << ": a push of generation 1 after the second run started";
    // Every batch arrived, those of the task the first run held twice at most (redone from its
    // start): the second copies were dropped as duplicates.
    const auto counts = c.TagCounts(p);
    EXPECT_EQ(counts.size(), c.EveryBatch(1).size()) << "ps:" << p;
    int64_t again = 0;
    for (const auto& [batch, n] : counts) {
      EXPECT_LE(n, 2) << "ps:" << p;
      again += n - 1;
    }
    EXPECT_EQ(c.DuplicatesDropped(p), again) << "ps:" << p;
  }
  c.ExpectEveryBatchAppliedOnce();
}

// A Register answer naming a new chief (ExpectChief) stops the run the old chief started; the
// old chief is refused from then on and the new one's StartTraining finishes the job.
TEST_F(WorkerTaskQueueTest, ANewChiefStopsTheOldChiefsRun) {
  Cluster c(dir_, {.mode = "async", .step_delay_ms = 20});
  ASSERT_NO_FATAL_FAILURE(c.SetUpJob());
  ASSERT_NO_FATAL_FAILURE(c.StartAll(1));
  for (int i = 0; i < 200 && c.log(0).pushes().size() < 6; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const uint64_t old_chief = MakeSender("chief", 0).incarnation(), new_chief = old_chief + 2;
  for (int w = 0; w < Cluster::kWorkers; ++w) c.worker(w).ExpectChief(new_chief);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const size_t stopped_at = c.log(0).pushes().size();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(c.log(0).pushes().size(), stopped_at) << "the old chief's run went on";
  EXPECT_EQ(c.Start(0, 1, old_chief).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  for (int w = 0; w < Cluster::kWorkers; ++w) {
    const grpc::Status s = c.Start(w, 1, new_chief);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  ASSERT_EQ(c.WaitForDone(absl::Seconds(60)), "");
  EXPECT_EQ(c.coordinator().LedgerCheck(), "");
  c.ExpectEveryBatchAppliedOnce();
}

// A rollback: the PS are Reset (for a second they hold nothing, as restarted PS: the workers'
// calls answered NotFound are retried) and configured for generation 2 while the workers run
// generation 1. The PS refuse their calls; each run ends quietly (no error reaches the chief)
// and the workers wait for the chief, whose StartTraining of generation 2 finishes the job.
TEST_F(WorkerTaskQueueTest, ARunRefusedForItsGenerationEndsQuietly) {
  Cluster c(dir_, {.mode = "async", .step_delay_ms = 20});
  ASSERT_NO_FATAL_FAILURE(c.SetUpJob(/*generation=*/1));
  ASSERT_NO_FATAL_FAILURE(c.StartAll(1));
  for (int i = 0; i < 200 && c.log(0).pushes().size() < 6; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_NO_FATAL_FAILURE(c.ResetPs(2, absl::Seconds(1)));
  const size_t before = c.log(0).pushes().size();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  for (const std::vector<WorkerProgress> progress =
           c.coordinator().WaitForReport(absl::ZeroDuration());
       const WorkerProgress& w : progress) {
    EXPECT_EQ(w.error, "");
    EXPECT_FALSE(w.done);
  }
  ASSERT_NO_FATAL_FAILURE(c.StartAll(2));
  ASSERT_EQ(c.WaitForDone(absl::Seconds(60)), "");
  EXPECT_EQ(c.coordinator().LedgerCheck(), "");
  for (int p = 0; p < Cluster::kPs; ++p) {
    const std::vector<PushSeen> pushes = c.log(p).pushes();
    for (size_t i = p == 0 ? before : pushes.size(); i < pushes.size(); ++i) {
      EXPECT_EQ(pushes[i].generation, 2u) << "a push of generation 1 applied after the reset";
    }
  }
}

}  // namespace
}  // namespace pstrain
