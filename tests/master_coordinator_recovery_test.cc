// The Coordinator's recovery API in-process: generations rewinding the ledger to a checkpoint's
// and refusing work of another generation, restarted PS and (sync) workers asking for a
// rollback only with recovery on, async workers replaced in place, Heartbeat's generation and
// register_again, and the failures carried in the ledger's JSON.
#include <string>

#include "coordinator_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/coordinator.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;
using ::testing::Optional;

constexpr LedgerShape kShape{100, 10, 1, 1};  // 10 tasks, one worker

absl::StatusOr<TaskAssignment> Next(Coordinator& c, const Sender& s) {
  NextTaskRequest req;
  *req.mutable_sender() = s;
  NextTaskResponse resp;
  if (absl::Status st = c.NextTask(req, &resp); !st.ok()) return st;
  if (resp.kind() != NextTaskResponse::TASK) return absl::NotFoundError("no task");
  return resp.task();
}

absl::Status Done(Coordinator& c, const Sender& s, const TaskAssignment& t) {
  TaskDoneRequest req;
  *req.mutable_sender() = s;
  req.set_epoch(t.epoch());
  req.set_task(t.task());
  req.set_examples(t.end() - t.begin());
  req.set_steps(1);
  return c.TaskDone(req);
}

absl::StatusOr<HeartbeatResponse> Beat(Coordinator& c, const Sender& s) {
  HeartbeatRequest req;
  *req.mutable_sender() = s;
  HeartbeatResponse resp;
  if (absl::Status st = c.Heartbeat(req, &resp); !st.ok()) return st;
  return resp;
}

// A chief of `ps` PS and one worker (incarnation 7) with the task queue on.
void Start(Coordinator& c, int ps, const std::string& mode = "async") {
  c.SetMode(mode);
  for (int t = 0; t < ps; ++t) ASSERT_TRUE(Register(c, Task("ps", t, 50 + t)).ok());
  ASSERT_TRUE(Register(c, Task("worker", 0, 7)).ok());
  ASSERT_TRUE(c.EnableTasks(kShape, absl::Seconds(1), absl::Seconds(30)).ok());
  c.SetReady();
}

TEST(CoordinatorRecoveryTest, BeginGenerationRewindsToTheCheckpointsLedger) {
  Coordinator c({"127.0.0.1:2"}, 1, absl::Milliseconds(20));
  Start(c, 1);
  EXPECT_EQ(c.generation(), 0u);
  ASSERT_THAT(c.BeginGeneration(nullptr), absl::StatusOr<uint64_t>(1));
  const Sender w = Task("worker", 0, 7, 1);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(Done(c, w, *Next(c, w)).ok());
  const nlohmann::json cut = c.LedgerJson();  // a checkpoint's: tasks 0 and 1 applied
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Done(c, w, *Next(c, w)).ok());
  ASSERT_EQ(Next(c, w)->task(), 5);  // in flight
  EXPECT_EQ(c.LedgerJson()["applied"], 5);

  // A ledger of another shape is refused and changes nothing.
  nlohmann::json other = cut;
  other["rows"] = 90;
  EXPECT_THAT(c.BeginGeneration(other).status().message(), HasSubstr("\"rows\" is 90"));
  EXPECT_EQ(c.generation(), 1u);
  EXPECT_EQ(c.LedgerJson()["applied"], 5);

  ASSERT_THAT(c.BeginGeneration(cut), absl::StatusOr<uint64_t>(2));
  EXPECT_EQ(c.failures().rollbacks, 1);
  const nlohmann::json j = c.LedgerJson();
  EXPECT_EQ(j["applied"], 2);
  EXPECT_EQ(j["failures"]["rollbacks"], 1);
  for (int id = 2; id < 6; ++id) EXPECT_EQ(j["ledger"][0][id]["state"], "pending") << id;
  // The worker stays registered; the tasks applied after the cut are handed out again.
  const Sender w2 = Task("worker", 0, 7, 2);
  for (int id = 2; id < 10; ++id) {
    absl::StatusOr<TaskAssignment> t = Next(c, w2);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->task(), id);
    ASSERT_TRUE(Done(c, w2, *t).ok());
  }
  EXPECT_TRUE(c.TasksFinished());
  EXPECT_EQ(c.LedgerCheck(), "");
}

// A restarted chief: the runs of the chief before it (generations up to 4 on the PS) end as
// runs of another generation, before it starts its own and after.
TEST(CoordinatorRecoveryTest, ARestartedChiefRefusesTheOldRunsAsAnotherGeneration) {
  Coordinator c({"127.0.0.1:2"}, 1, absl::Milliseconds(20));
  c.SetMode("async");
  ASSERT_TRUE(Register(c, Task("ps", 0, 50)).ok());
  ASSERT_TRUE(Register(c, Task("worker", 0, 7)).ok());
  const Sender old_run = Task("worker", 0, 7, 1);
  // Starting: no task queue yet. The worker's run must end quietly, not fail the job.
  for (const absl::Status& st : {Next(c, old_run).status(), Done(c, old_run, TaskAssignment())}) {
    EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
    EXPECT_THAT(st.message(), HasSubstr("of generation 1"));
    EXPECT_THAT(st.message(), HasSubstr("runs no generation yet"));
  }
  ASSERT_TRUE(c.EnableTasks(kShape, absl::Seconds(1), absl::Seconds(30)).ok());
  ASSERT_THAT(c.BeginGeneration(nullptr, 4), absl::StatusOr<uint64_t>(5));
  c.SetReady();
  EXPECT_THAT(Next(c, old_run).status().message(), HasSubstr("the chief runs generation 5"));
  EXPECT_TRUE(Next(c, Task("worker", 0, 7, 5)).ok());
}

// Without the task queue a ready job says so.
TEST(CoordinatorRecoveryTest, TaskCallsWithoutTheTaskQueueAreRefused) {
  Coordinator c({"127.0.0.1:2"}, 1, absl::Milliseconds(20));
  ASSERT_TRUE(Register(c, Task("ps", 0, 50)).ok());
  ASSERT_TRUE(Register(c, Task("worker", 0, 7)).ok());
  c.SetReady();
  const absl::Status st = Next(c, Task("worker", 0, 7)).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  EXPECT_THAT(st.message(), HasSubstr("this job has no task queue"));
}

TEST(CoordinatorRecoveryTest, WorkOfAnotherGenerationIsRefusedAndHeartbeatsAreAnswered) {
  Coordinator c({"127.0.0.1:2"}, 1, absl::Milliseconds(20));
  Start(c, 1);
  // Before generations run, a sender without one is served.
  absl::StatusOr<TaskAssignment> t = Next(c, Task("worker", 0, 7));
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(c.BeginGeneration(nullptr).ok());
  ASSERT_TRUE(c.BeginGeneration(nullptr).ok());
  // A rollback's generation is heartbeat once the job announced the workers (its parameters
  // restored): a program's read before then would not find them.
  absl::StatusOr<HeartbeatResponse> early = Beat(c, Task("worker", 0, 7, 2));
  ASSERT_TRUE(early.ok()) << early.status();
  EXPECT_EQ(early->generation(), 0u);
  c.AnnounceWorkers({Task("worker", 0, 7)});
  struct Case {
    uint64_t generation;
    const char* says;
  };
  for (const Case& k : {Case{1, "generation 1 was rolled back; the chief runs generation 2"},
                        Case{0, "no generation given; the chief runs generation 2"},
                        Case{3, "generation 3 is not this chief's"}}) {
    const Sender w = Task("worker", 0, 7, k.generation);
    absl::Status next = Next(c, w).status();
    EXPECT_TRUE(absl::IsFailedPrecondition(next)) << next;
    EXPECT_THAT(next.message(), HasSubstr(k.says));
    absl::Status done = Done(c, w, *t);
    EXPECT_TRUE(absl::IsFailedPrecondition(done)) << done;
    EXPECT_THAT(done.message(), HasSubstr(k.says));
    absl::StatusOr<HeartbeatResponse> beat = Beat(c, w);
    ASSERT_TRUE(beat.ok()) << beat.status();
    EXPECT_EQ(beat->generation(), 2u);
    EXPECT_FALSE(beat->register_again());
  }
  EXPECT_EQ(c.LedgerJson()["applied"], 0);  // nothing refused was applied
  EXPECT_TRUE(Next(c, Task("worker", 0, 7, 2)).ok());
}

TEST(CoordinatorRecoveryTest, ARestartedPsAsksForARollbackOnlyWithRecoveryOn) {
  Coordinator c({"127.0.0.1:2", "127.0.0.1:3"}, 1, absl::Milliseconds(20));
  Start(c, 2);
  ASSERT_TRUE(c.BeginGeneration(nullptr).ok());
  EXPECT_THAT(Register(c, Task("ps", 1, 99)).message(),
              HasSubstr("does not accept restarted tasks"));
  EXPECT_EQ(c.RollbackReason(), std::nullopt);
  EXPECT_EQ(c.PsTasks()[1].incarnation(), 51u);
  c.EnableRecovery();
  ASSERT_TRUE(Register(c, Task("ps", 1, 99)).ok());  // same address, new process
  EXPECT_THAT(c.RollbackReason(), Optional(std::string("ps:1 restarted (incarnation 99)")));
  EXPECT_EQ(c.PsTasks()[1].incarnation(), 99u);
  // Re-registering with the same incarnation is a harmless retry, whoever sends it.
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(Register(c, Task("ps", 1, 99)).ok());
    ASSERT_TRUE(Register(c, Task("ps", 0, 50)).ok());
    ASSERT_TRUE(Register(c, Task("worker", 0, 7)).ok());
  }
  EXPECT_THAT(c.RollbackReason(), Optional(std::string("ps:1 restarted (incarnation 99)")));
  ASSERT_THAT(c.BeginGeneration(nullptr), absl::StatusOr<uint64_t>(2));
  EXPECT_EQ(c.RollbackReason(), std::nullopt);
  EXPECT_EQ(c.failures().rollbacks, 1);
  EXPECT_EQ(c.failures().workers_replaced, 0);
}

// Once the result is made, a PS (or worker) that comes back restarted rolls nothing back: it is
// counted as a restart after the end.
TEST(CoordinatorRecoveryTest, ARestartAfterTheJobEndedRollsNothingBack) {
  Coordinator c({"127.0.0.1:2", "127.0.0.1:3"}, 1, absl::Milliseconds(20));
  Start(c, 2);
  c.EnableRecovery();
  ASSERT_TRUE(c.BeginGeneration(nullptr).ok());
  c.EndJob();
  ASSERT_TRUE(Register(c, Task("ps", 1, 99)).ok());
  ASSERT_TRUE(Register(c, Task("worker", 0, 8)).ok());
  EXPECT_EQ(c.RollbackReason(), std::nullopt);
  EXPECT_EQ(c.restarts_after_end(), 2);
  EXPECT_EQ(c.failures().rollbacks, 0);
  EXPECT_EQ(c.failures().workers_replaced, 0);
}

TEST(CoordinatorRecoveryTest, ASyncWorkersRestartAsksForARollbackAnAsyncOneIsReplaced) {
  for (const std::string mode : {"sync", "ssp", "async"}) {
    SCOPED_TRACE(mode);
    Coordinator c({"127.0.0.1:2"}, 1, absl::Milliseconds(20));
    Start(c, 1, mode);
    c.EnableRecovery();
    ASSERT_TRUE(c.BeginGeneration(nullptr).ok());
    const Sender old = Task("worker", 0, 7, 1), restarted = Task("worker", 0, 8, 1);
    const TaskAssignment held = *Next(c, old);
    // At once: the restarted process proves the old one dead.
    ASSERT_TRUE(Register(c, restarted).ok());
    EXPECT_THAT(Next(c, old).status().message(), HasSubstr("declared dead at"));
    EXPECT_EQ(c.Workers()[0].incarnation(), 8u);
    if (mode == "async") {
      EXPECT_EQ(c.RollbackReason(), std::nullopt);
      EXPECT_EQ(c.failures().workers_replaced, 1);
      EXPECT_EQ(c.LedgerJson()["failures"]["workers_replaced"], 1);
      EXPECT_EQ(Next(c, restarted)->task(), held.task());  // its task, requeued
    } else {
      EXPECT_THAT(c.RollbackReason(), Optional(std::string("worker:0 restarted (incarnation 8)")));
      EXPECT_EQ(c.failures().workers_replaced, 0);
    }
  }
}

TEST(CoordinatorRecoveryTest, AnUnknownWorkerIsToldToRegisterAgainADeadOneIsRefused) {
  // A restarted chief, still starting (no task queue yet): the workers' heartbeats are answered.
  Coordinator starting({"127.0.0.1:2"}, 1, absl::Milliseconds(20));
  absl::StatusOr<HeartbeatResponse> beat = Beat(starting, Task("worker", 0, 7));
  ASSERT_TRUE(beat.ok()) << beat.status();
  EXPECT_TRUE(beat->register_again());
  ASSERT_TRUE(Register(starting, Task("worker", 0, 7)).ok());
  EXPECT_FALSE(Beat(starting, Task("worker", 0, 7))->register_again());

  Coordinator c({"127.0.0.1:2"}, 1, absl::Milliseconds(20));
  c.SetMode("async");
  ASSERT_TRUE(c.EnableTasks(kShape, absl::Milliseconds(50), absl::Milliseconds(200)).ok());
  ASSERT_TRUE(c.BeginGeneration(nullptr).ok());
  beat = Beat(c, Task("worker", 0, 7));  // not registered with this chief
  ASSERT_TRUE(beat.ok()) << beat.status();
  EXPECT_TRUE(beat->register_again());
  EXPECT_EQ(beat->generation(), 1u);
  ASSERT_TRUE(Register(c, Task("worker", 0, 7)).ok());
  EXPECT_FALSE(Beat(c, Task("worker", 0, 7))->register_again());
  absl::SleepFor(absl::Milliseconds(600));  // silent: declared dead by the sweep
  EXPECT_THAT(Beat(c, Task("worker", 0, 7)).status().message(), HasSubstr("declared dead at"));
  EXPECT_TRUE(Beat(c, Task("worker", 0, 8))->register_again());  // its restarted process
}

TEST(CoordinatorRecoveryTest, FailuresAreCarriedOnFromARestoredLedgerAndCountedOnce) {
  Coordinator first({"127.0.0.1:2"}, 1, absl::Milliseconds(20));
  Start(first, 1);
  ASSERT_TRUE(first.BeginGeneration(nullptr).ok());
  ASSERT_TRUE(first.BeginGeneration(nullptr).ok());  // a rollback
  first.CountChiefRestart();
  const nlohmann::json saved = first.LedgerJson();
  EXPECT_EQ(saved["failures"]["rollbacks"], 1);
  EXPECT_EQ(saved["failures"]["chief_restarts"], 1);

  Coordinator second({"127.0.0.1:2"}, 1, absl::Milliseconds(20));  // its chief restarted
  Start(second, 1);
  second.CountChiefRestart();  // before or after BeginGeneration: the same
  second.CountChiefRestart();  // once
  ASSERT_THAT(second.BeginGeneration(saved), absl::StatusOr<uint64_t>(1));
  EXPECT_EQ(second.failures().rollbacks, 1);
  EXPECT_EQ(second.failures().chief_restarts, 2);
  ASSERT_TRUE(second.BeginGeneration(saved).ok());  // a rollback to the same checkpoint
  const Coordinator::Failures f = second.failures();
  EXPECT_EQ(f.rollbacks, 2);
  EXPECT_EQ(f.chief_restarts, 2);
  EXPECT_EQ(second.LedgerJson()["failures"]["rollbacks"], 2);
  EXPECT_EQ(second.LedgerJson()["failures"]["chief_restarts"], 2);
  Coordinator none({"127.0.0.1:2"}, 1, absl::Milliseconds(20));
  EXPECT_TRUE(absl::IsFailedPrecondition(none.BeginGeneration(nullptr).status()));
}

}  // namespace
}  // namespace pstrain
