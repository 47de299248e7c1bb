// The Coordinator's task queue in-process: tasks handed out and applied through NextTask and
// TaskDone, a silent worker declared dead by the sweep and refused with "declared dead at", its
// restart accepted by Register and given the requeued task, and the calls refused without a
// queue or with a bad sender.
#include <string>
#include <vector>

#include "coordinator_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/coordinator.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<NextTaskResponse> Next(Coordinator& c, const Sender& s) {
  NextTaskRequest req;
  *req.mutable_sender() = s;
  NextTaskResponse resp;
  if (absl::Status st = c.NextTask(req, &resp); !st.ok()) return st;
  return resp;
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

absl::Status Beat(Coordinator& c, const Sender& s) {
  HeartbeatRequest req;
  *req.mutable_sender() = s;
  HeartbeatResponse resp;
  return c.Heartbeat(req, &resp);
}

TEST(CoordinatorTasksTest, WithoutTheQueueTheCallsAreRefusedAndRestartsToo) {
  Coordinator c({"127.0.0.1:2"}, 1, absl::Milliseconds(20));
  ASSERT_TRUE(Register(c, Task("worker", 0, 5)).ok());
  EXPECT_THAT(Next(c, Task("worker", 0, 5)).status().message(),
              HasSubstr("runs no generation yet"));  // a chief still starting
  EXPECT_TRUE(Beat(c, Task("worker", 0, 5)).ok());   // a chief still starting answers
  EXPECT_THAT(Register(c, Task("worker", 0, 6)).message(),
              HasSubstr("does not accept restarted tasks"));
  EXPECT_EQ(c.LedgerCheck(), "this job has no task queue");
  EXPECT_TRUE(c.LedgerJson().is_null());
}

TEST(CoordinatorTasksTest, ADeadWorkerIsRefusedItsRestartRejoinsAndEveryTaskIsAppliedOnce) {
  Coordinator c({"127.0.0.1:2"}, 2, absl::Milliseconds(20));
  const Sender w0 = Task("worker", 0, 11), w1 = Task("worker", 1, 12), w1b = Task("worker", 1, 13);
  ASSERT_TRUE(Register(c, w0).ok());
  ASSERT_TRUE(Register(c, w1).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(
      c.EnableTasks({100, 10, 2, 2}, absl::Seconds(1), absl::Milliseconds(500))));
  ASSERT_TRUE(
      c.EnableTasks({100, 10, 2, 2}, absl::Milliseconds(100), absl::Milliseconds(400)).ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(
      c.EnableTasks({100, 10, 2, 2}, absl::Milliseconds(100), absl::Milliseconds(400))));
  const NextTaskResponse held = *Next(c, w1);
  ASSERT_EQ(held.kind(), NextTaskResponse::TASK);
  // While worker:1 lives, a second process of it is refused.
  EXPECT_THAT(Register(c, w1b).message(), HasSubstr("which is alive"));
  // Worker 0 keeps beating; worker 1 falls silent and is declared dead by the sweep.
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(Beat(c, w0).ok());
    absl::SleepFor(absl::Milliseconds(100));
  }
  absl::Status refused = Done(c, w1, held.task());
  EXPECT_TRUE(absl::IsFailedPrecondition(refused)) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("declared dead at"));
  ProgressRequest report;
  *report.mutable_sender() = w1;
  bool stop = false;
  EXPECT_THAT(c.Report(report, &stop).message(), HasSubstr("declared dead at"));
  // The restart registers, is given the requeued task first, and the two finish the job.
  ASSERT_TRUE(Register(c, w1b).ok());
  const NextTaskResponse again = *Next(c, w1b);
  EXPECT_EQ(again.task().task(), held.task().task());
  EXPECT_EQ(again.task().epoch(), held.task().epoch());
  ASSERT_TRUE(Done(c, w1b, again.task()).ok());
  for (int turn = 0; !c.TasksFinished(); ++turn) {
    const Sender& w = turn % 2 ? w0 : w1b;
    const NextTaskResponse n = *Next(c, w);
    if (n.kind() == NextTaskResponse::TASK) ASSERT_TRUE(Done(c, w, n.task()).ok());
  }
  EXPECT_EQ(Next(c, w0)->kind(), NextTaskResponse::FINISHED);
  EXPECT_EQ(c.LedgerCheck(), "");
  const nlohmann::json j = c.LedgerJson();
  EXPECT_EQ(j["tasks"], 20);
  EXPECT_EQ(j["redone"], 1);
  EXPECT_EQ(j["workers_declared_dead"], 1);
}

TEST(CoordinatorTasksTest, BadSendersAreRefused) {
  Coordinator c({"127.0.0.1:2"}, 1, absl::Milliseconds(20));
  ASSERT_TRUE(Register(c, Task("worker", 0, 5)).ok());
  ASSERT_TRUE(c.EnableTasks({100, 10, 1, 1}, absl::Seconds(1), absl::Seconds(5)).ok());
  NextTaskRequest none;
  NextTaskResponse resp;
  EXPECT_TRUE(absl::IsInvalidArgument(c.NextTask(none, &resp)));
  EXPECT_TRUE(absl::IsPermissionDenied(Next(c, Task("ps", 0, 5)).status()));
  EXPECT_TRUE(absl::IsPermissionDenied(Next(c, Task("worker", 3, 5)).status()));
  EXPECT_TRUE(absl::IsFailedPrecondition(Next(c, Task("worker", 0, 6)).status()));
  TaskAssignment bogus;
  bogus.set_epoch(0);
  bogus.set_task(99);
  bogus.set_end(10);
  EXPECT_TRUE(absl::IsInvalidArgument(Done(c, Task("worker", 0, 5), bogus)));
  EXPECT_EQ(c.LedgerJson()["applied"], 0);
}

}  // namespace
}  // namespace pstrain
