// The chief's StatusTracker in-process: the task table follows registration, reports, barriers
// and failures; the loss curve stays within kMaxLossPoints, evenly thinned, with the latest
// point shown; the end of the job is published and nothing changes after it.
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "common/rpc.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/coordinator.h"
#include "master/job_status.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;

constexpr absl::Duration kRefresh = absl::Milliseconds(20);

Sender Task(const std::string& job, int task) {
  Sender s;
  s.set_job(job);
  s.set_task(task);
  s.set_incarnation(100 + task);
  return s;
}

class StatusTrackerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.listen_address = "127.0.0.1:5000";
    options_.ps_addresses = {"127.0.0.1:5001"};
    options_.worker_addresses = {"127.0.0.1:5002", "127.0.0.1:5003"};
    options_.job.epochs = 2;
    options_.monitor = &monitor_;
    placer_ = *VariablePlacer::Create(options_.ps_addresses, "auto", "greedy", absl::Seconds(1));
    tracker_ = std::make_unique<StatusTracker>(&monitor_, options_, &coordinator_, placer_.get(),
                                               kRefresh);
  }

  void Register(const std::string& job, int task) {
    RegisterRequest req;
    *req.mutable_sender() = Task(job, task);
    RegisterResponse resp;
    ASSERT_TRUE(coordinator_.Register(req, &resp).ok());
  }

  void Report(int task, int64_t steps, bool done, const std::string& error = "") {
    ProgressRequest req;
    *req.mutable_sender() = Task("worker", task);
    req.set_steps(steps);
    req.set_done(done);
    req.set_error(error);
    bool stop = false;
    ASSERT_TRUE(coordinator_.Report(req, &stop).ok());
  }

  // The tasks' states once a refresh has seen `want` (or what they are after a second).
  std::vector<std::string> StatesWhen(const std::vector<std::string>& want) {
    std::vector<std::string> states;
    for (absl::Time end = absl::Now() + absl::Seconds(1); absl::Now() < end;) {
      states.clear();
      for (const JobStatus::Task& t : monitor_.Snapshot().tasks) states.push_back(t.state);
      if (states == want) break;
      absl::SleepFor(kRefresh);
    }
    return states;
  }

  MasterOptions options_;
  JobMonitor monitor_;
  Coordinator coordinator_{{"127.0.0.1:5001"}, 2};
  std::unique_ptr<VariablePlacer> placer_;
  std::unique_ptr<StatusTracker> tracker_;
};

TEST_F(StatusTrackerTest, StartsWithEveryTaskWaiting) {
  const JobStatus s = monitor_.Snapshot();
  EXPECT_EQ(s.state, "starting");
  EXPECT_EQ(s.mode, "async");
  EXPECT_EQ(s.model, "mlp");
  EXPECT_EQ(s.epochs, 2);
  ASSERT_EQ(s.tasks.size(), 4u);
  EXPECT_EQ(s.tasks[0].job, "chief");
  EXPECT_EQ(s.tasks[0].address, "127.0.0.1:5000");
  EXPECT_EQ(s.tasks[0].state, "running");
  EXPECT_EQ(s.tasks[1].job, "ps");
  EXPECT_EQ(s.tasks[1].address, "127.0.0.1:5001");
  EXPECT_EQ(s.tasks[3].job, "worker");
  EXPECT_EQ(s.tasks[3].index, 1);
  EXPECT_EQ(s.tasks[3].address, "127.0.0.1:5003");
  for (size_t i = 1; i < s.tasks.size(); ++i) {
    EXPECT_EQ(s.tasks[i].state, "waiting");
    EXPECT_EQ(s.tasks[i].seconds_since_seen, -1);
  }
  EXPECT_THAT(s.ps_bytes, ElementsAre(0));
}

TEST_F(StatusTrackerTest, FollowsRegistrationReportsAndBarriers) {
  Register("ps", 0);
  Register("worker", 0);
  EXPECT_THAT(StatesWhen({"running", "running", "running", "waiting"}),
              ElementsAre("running", "running", "running", "waiting"));
  Register("worker", 1);
  Report(0, 42, /*done=*/false);
  absl::Notification released;
  BarrierRequest req;
  *req.mutable_sender() = Task("worker", 1);
  req.set_name("end");
  BarrierCall call;
  call.done = [&](absl::Status) { released.Notify(); };
  coordinator_.Barrier(req, std::move(call));
  EXPECT_THAT(StatesWhen({"running", "running", "running", "running"}),
              ElementsAre("running", "running", "running", "running"));
  absl::SleepFor(3 * kRefresh);
  JobStatus s = monitor_.Snapshot();
  EXPECT_EQ(s.workers_alive, 2);
  EXPECT_EQ(s.tasks[2].steps, 42);
  EXPECT_GE(s.tasks[2].seconds_since_seen, 0);
  EXPECT_LT(s.tasks[2].seconds_since_seen, 5);
  EXPECT_EQ(s.tasks[3].detail, "at barrier \"end\"");

  Report(0, 50, /*done=*/true);  // releases the barrier
  EXPECT_TRUE(released.WaitForNotificationWithTimeout(absl::Seconds(5)));
  Report(1, 7, /*done=*/false, "out of data");
  EXPECT_THAT(StatesWhen({"running", "running", "done", "failed"}),
              ElementsAre("running", "running", "done", "failed"));
  s = monitor_.Snapshot();
  EXPECT_EQ(s.tasks[3].detail, "out of data");
  EXPECT_EQ(s.workers_alive, 1);
}

TEST_F(StatusTrackerTest, LossCurveIsThinnedEvenlyAndShowsTheLatestPoint) {
  tracker_->SetState("running");
  ProgressView v;
  v.total = 5000;
  for (int64_t step = 1; step <= 5000; ++step) {
    v.step = step;
    v.loss = 1.0 / step;
    v.elapsed = absl::Milliseconds(step);
    tracker_->Progress(v);
    ASSERT_LE(monitor_.Snapshot().loss_curve.size(), size_t{kMaxLossPoints} + 1) << step;
  }
  const JobStatus s = monitor_.Snapshot();
  EXPECT_EQ(s.state, "running");
  EXPECT_EQ(s.global_step, 5000);
  EXPECT_EQ(s.total_steps, 5000);
  EXPECT_EQ(s.eta_seconds, 0);
  const std::vector<JobStatus::LossPoint>& c = s.loss_curve;
  ASSERT_GE(c.size(), size_t{kMaxLossPoints} / 2);
  EXPECT_EQ(c.front().step, 1);
  EXPECT_EQ(c.back().step, 5000);
  EXPECT_DOUBLE_EQ(c.back().loss, 1.0 / 5000);
  // Every kept point is a stride apart: the curve is even, not dense at its end.
  const int64_t stride = c[1].step - c[0].step;
  for (size_t i = 1; i + 1 < c.size(); ++i) EXPECT_EQ(c[i].step - c[i - 1].step, stride) << i;
  // The same step again adds nothing.
  tracker_->Progress(v);
  EXPECT_EQ(monitor_.Snapshot().loss_curve.size(), c.size());
}

TEST_F(StatusTrackerTest, FinishPublishesTheEndAndFreezesTheStatus) {
  Register("ps", 0);
  Register("worker", 0);
  Register("worker", 1);
  tracker_->SetState("evaluating");
  tracker_->Finish(absl::DeadlineExceededError("worker:1 sent no progress for 2m"));
  JobStatus s = monitor_.Snapshot();
  EXPECT_EQ(s.state, "failed");
  EXPECT_EQ(s.error, "worker:1 sent no progress for 2m");
  EXPECT_EQ(s.tasks[0].state, "failed");
  EXPECT_EQ(s.tasks[1].state, "running");
  tracker_->SetState("running");
  ProgressView v;
  v.step = 10;
  tracker_->Progress(v);
  absl::SleepFor(3 * kRefresh);
  s = monitor_.Snapshot();
  EXPECT_EQ(s.state, "failed");
  EXPECT_EQ(s.global_step, 0);
}

TEST(StatusTrackerNull, WithoutAMonitorDoesNothing) {
  MasterOptions options;
  options.ps_addresses = {"127.0.0.1:5001"};
  Coordinator coordinator({"127.0.0.1:5001"}, 1);
  std::unique_ptr<VariablePlacer> placer =
      *VariablePlacer::Create(options.ps_addresses, "auto", "greedy", absl::Seconds(1));
  StatusTracker tracker(nullptr, options, &coordinator, placer.get());
  tracker.SetState("running");
  tracker.Progress(ProgressView());
  tracker.Finish(absl::OkStatus());
}

}  // namespace
}  // namespace pstrain
