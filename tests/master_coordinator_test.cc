// The chief's Coordinator in-process: who may register and report (incarnations, roles, limits),
// what a barrier means while workers finish, and that arrivals whose caller gave up are
// withdrawn and their barriers freed.
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/limits.h"
#include "common/rpc.h"
#include "coordinator_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/coordinator.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

// One Barrier call as a test sees it: its answer, and a switch that cancels it.
class Arrival {
 public:
  BarrierCall Call(absl::Time deadline = absl::InfiniteFuture()) {
    BarrierCall call;
    call.deadline = deadline;
    call.cancelled = [this] { return cancelled_.load(); };
    call.done = [this](absl::Status s) {
      status_ = s;
      done_.Notify();
    };
    return call;
  }
  void Cancel() { cancelled_ = true; }
  bool answered() const { return done_.HasBeenNotified(); }
  // Waits for the answer (the sweep runs every few milliseconds in these tests).
  absl::Status Wait() {
    EXPECT_TRUE(done_.WaitForNotificationWithTimeout(absl::Seconds(60))) << "no answer";
    return status_;
  }

 private:
  std::atomic<bool> cancelled_{false};
  absl::Notification done_;
  absl::Status status_;
};

class CoordinatorTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kIncarnation = 7;

  CoordinatorTest() : c_(std::vector<std::string>{"h:1", "h:2"}, 2, absl::Milliseconds(5)) {}

  void RegisterAll(int workers = 2) {
    RegisterResponse resp;
    for (int p = 0; p < 2; ++p) ASSERT_TRUE(Register(Task("ps", p, kIncarnation), &resp).ok());
    for (int w = 0; w < workers; ++w) {
      ASSERT_TRUE(Register(Task("worker", w, kIncarnation), &resp).ok());
    }
    c_.SetReady();
  }
  absl::Status Register(const Sender& s, RegisterResponse* resp) {
    RegisterRequest req;
    *req.mutable_sender() = s;
    return c_.Register(req, resp);
  }
  void Arrive(int worker, const std::string& name, Arrival* a,
              absl::Time deadline = absl::InfiniteFuture(), uint64_t inc = kIncarnation) {
    BarrierRequest req;
    *req.mutable_sender() = Task("worker", worker, inc);
    req.set_name(name);
    c_.Barrier(req, a->Call(deadline));
  }
  absl::Status Report(const Sender& s, bool done, const std::string& error = "",
                      int64_t steps = 1) {
    ProgressRequest req;
    *req.mutable_sender() = s;
    req.set_steps(steps);
    req.set_done(done);
    req.set_error(error);
    bool stop = false;
    return c_.Report(req, &stop);
  }

  Coordinator c_;
};

TEST_F(CoordinatorTest, RegisterAnswersWithTheChiefAndEveryPs) {
  RegisterResponse resp;
  ASSERT_TRUE(Register(Task("worker", 0, kIncarnation), &resp).ok());
  EXPECT_EQ(resp.chief_incarnation(), MakeSender("chief", 0).incarnation());
  EXPECT_THAT(resp.ps_addresses(), ::testing::ElementsAre("h:1", "h:2"));
}

TEST_F(CoordinatorTest, RestartedTaskIsRefusedAndARetryIsNot) {
  RegisterResponse resp;
  ASSERT_TRUE(Register(Task("worker", 0, kIncarnation), &resp).ok());
  EXPECT_TRUE(Register(Task("worker", 0, kIncarnation), &resp).ok());  // a retry
  absl::Status s = Register(Task("worker", 0, 99), &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "worker:0 is already registered by another process (incarnation 7); this job does "
            "not accept restarted tasks");
  // The registered process is still the one the chief knows.
  EXPECT_EQ(c_.Workers()[0].incarnation(), kIncarnation);
  EXPECT_EQ(Register(Task("ps", 1, kIncarnation), &resp).code(), absl::StatusCode::kOk);
  EXPECT_EQ(Register(Task("ps", 1, 5), &resp).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(CoordinatorTest, RegisterRefusesBadSenders) {
  RegisterResponse resp;
  RegisterRequest no_sender;
  EXPECT_EQ(c_.Register(no_sender, &resp).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Register(Task("nobody", 0, 1), &resp).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Register(Task("chief", 0, 1), &resp).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Register(Task("worker", 2, 1), &resp).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Register(Task("worker", -1, 1), &resp).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Register(Task("ps", 2, 1), &resp).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Register(Task("worker", 0, 0), &resp).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Register(Task(std::string(kMaxNameBytes + 1, 'w'), 0, 1), &resp).code(),
            absl::StatusCode::kInvalidArgument);
  RegisterRequest long_address;
  *long_address.mutable_sender() = Task("worker", 0, 1);
  long_address.set_address(std::string(kMaxNameBytes + 1, 'a'));
  EXPECT_EQ(c_.Register(long_address, &resp).code(), absl::StatusCode::kInvalidArgument);
  // Nothing above registered anyone.
  EXPECT_EQ(c_.Workers()[0].incarnation(), 0u);
}

TEST_F(CoordinatorTest, StaleReportIsRefusedNotCountedAndCannotEndTheJob) {
  RegisterAll();
  absl::Status s = Report(Task("worker", 0, 99), false, "a stale process failed", 50);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("registered by incarnation 7"));
  EXPECT_EQ(Report(Task("ps", 0, kIncarnation), true).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(
      Report(Task("worker", 0, kIncarnation), false, std::string(kMaxTextBytes + 1, 'e')).code(),
      absl::StatusCode::kInvalidArgument);
  ProgressRequest no_sender;
  bool stop = false;
  EXPECT_EQ(c_.Report(no_sender, &stop).code(), absl::StatusCode::kInvalidArgument);
  const std::vector<WorkerProgress> p = c_.WaitForReport(absl::ZeroDuration());
  EXPECT_EQ(p[0].steps, 0);
  EXPECT_TRUE(p[0].error.empty());
  EXPECT_FALSE(p[0].done);
  // The real worker's report counts.
  EXPECT_TRUE(Report(Task("worker", 0, kIncarnation), false, "", 3).ok());
  EXPECT_EQ(c_.WaitForReport(absl::ZeroDuration())[0].steps, 3);
}

// docs/semantics.md: a sender the chief does not obey gets PERMISSION_DENIED, and a worker task
// outside the cluster (worker:5 of 2) is one, on every method a worker calls.
TEST_F(CoordinatorTest, EveryMethodRefusesAWorkerOutsideTheCluster) {
  RegisterAll();
  c_.SetCreateVariable([](const VariableSpec&) { return Placement(); });
  c_.SetCreateTable([](const TableDef&) { return absl::OkStatus(); });
  for (int task : {5, 2, -1}) {
    SCOPED_TRACE(task);
    const Sender outsider = Task("worker", task, kIncarnation);
    const auto denied = [](const absl::Status& s) {
      EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
      EXPECT_THAT(s.message(), HasSubstr("the cluster has 2 worker task(s)"));
    };
    denied(Report(outsider, false));
    CreateVariableRequest create;
    *create.mutable_sender() = outsider;
    CreateVariableResponse created;
    denied(c_.CreateVariable(create, &created));
    CreateTableRequest table;
    *table.mutable_sender() = outsider;
    denied(c_.CreateTable(table, nullptr));
    NextTaskRequest next;
    *next.mutable_sender() = outsider;
    NextTaskResponse next_resp;
    denied(c_.NextTask(next, &next_resp));
    TaskDoneRequest done;
    *done.mutable_sender() = outsider;
    denied(c_.TaskDone(done));
    HeartbeatRequest beat;
    *beat.mutable_sender() = outsider;
    HeartbeatResponse beat_resp;
    denied(c_.Heartbeat(beat, &beat_resp));
    BarrierRequest barrier;
    *barrier.mutable_sender() = outsider;
    barrier.set_name("b");
    Arrival arrival;
    c_.Barrier(barrier, arrival.Call());
    denied(arrival.Wait());
  }
  EXPECT_EQ(c_.OpenBarriers(), 0);
  EXPECT_EQ(c_.WaitForReport(absl::ZeroDuration())[0].steps, 0);
}

TEST_F(CoordinatorTest, CreateVariableAndBarrierCheckTheSender) {
  RegisterAll();
  c_.SetCreateVariable([](const VariableSpec&) { return Placement(); });
  CreateVariableRequest req;
  CreateVariableResponse resp;
  EXPECT_EQ(c_.CreateVariable(req, &resp).code(), absl::StatusCode::kInvalidArgument);
  *req.mutable_sender() = Task("worker", 1, 3);
  EXPECT_EQ(c_.CreateVariable(req, &resp).code(), absl::StatusCode::kFailedPrecondition);
  *req.mutable_sender() = Task("ps", 0, kIncarnation);
  EXPECT_EQ(c_.CreateVariable(req, &resp).code(), absl::StatusCode::kPermissionDenied);
  *req.mutable_sender() = Task("worker", 1, kIncarnation);
  EXPECT_TRUE(c_.CreateVariable(req, &resp).ok());

  Arrival stale, empty, long_name;
  Arrive(0, "b", &stale, absl::InfiniteFuture(), 3);
  EXPECT_EQ(stale.Wait().code(), absl::StatusCode::kFailedPrecondition);
  Arrive(0, "", &empty);
  EXPECT_EQ(empty.Wait().code(), absl::StatusCode::kInvalidArgument);
  Arrive(0, std::string(kMaxNameBytes + 1, 'b'), &long_name);
  EXPECT_EQ(long_name.Wait().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c_.OpenBarriers(), 0);
}

// The example's pattern when workers take different numbers of steps: the one that finished
// first waits at the barrier, and the other's done report releases it.
TEST_F(CoordinatorTest, DoneWorkerCountsAsArrived) {
  RegisterAll();
  Arrival a0;
  Arrive(0, "end", &a0);
  EXPECT_FALSE(a0.answered());
  EXPECT_EQ(c_.WaitForReport(absl::ZeroDuration())[0].barrier, "end");
  ASSERT_TRUE(Report(Task("worker", 1, kIncarnation), true).ok());
  EXPECT_TRUE(a0.Wait().ok());
  EXPECT_EQ(c_.OpenBarriers(), 0);
  // Later barriers need only the workers still training.
  Arrival a1;
  Arrive(0, "again", &a1);
  EXPECT_TRUE(a1.Wait().ok());
}

TEST_F(CoordinatorTest, StartBarrierWaitsForTheClusterToBeReady) {
  RegisterResponse resp;
  for (int w = 0; w < 2; ++w) ASSERT_TRUE(Register(Task("worker", w, kIncarnation), &resp).ok());
  Arrival a0, a1;
  Arrive(0, "pstrain/start", &a0);
  Arrive(1, "pstrain/start", &a1);
  EXPECT_FALSE(a0.answered());
  c_.SetReady();
  EXPECT_TRUE(a0.Wait().ok());
  EXPECT_TRUE(a1.Wait().ok());
}

TEST_F(CoordinatorTest, CancelledArrivalNoLongerCounts) {
  RegisterAll();
  Arrival gone;
  Arrive(0, "b", &gone);
  gone.Cancel();
  EXPECT_EQ(gone.Wait().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(c_.OpenBarriers(), 0);
  // worker:1 does not pass alone: worker:0's arrival was withdrawn.
  Arrival a1;
  Arrive(1, "b", &a1);
  EXPECT_FALSE(a1.answered());
  Arrival back;
  Arrive(0, "b", &back);
  EXPECT_TRUE(back.Wait().ok());
  EXPECT_TRUE(a1.Wait().ok());
}

TEST_F(CoordinatorTest, ExpiredArrivalIsAnsweredNamingWhatTheOthersDo) {
  RegisterAll();
  ASSERT_TRUE(Report(Task("worker", 1, kIncarnation), false).ok());
  Arrival a0;
  Arrive(0, "sync", &a0, absl::Now() + absl::Milliseconds(20));
  absl::Status s = a0.Wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(s.message(), HasSubstr("barrier \"sync\""));
  EXPECT_THAT(s.message(), HasSubstr("worker:1 (training, last progress"));
  EXPECT_EQ(c_.OpenBarriers(), 0);

  // A worker waiting at another barrier is named as such.
  Arrival other, a1;
  Arrive(1, "elsewhere", &other);
  Arrive(0, "sync", &a1, absl::Now() + absl::Milliseconds(20));
  EXPECT_THAT(a1.Wait().message(), HasSubstr("worker:1 (waits at barrier \"elsewhere\")"));
  EXPECT_EQ(c_.OpenBarriers(), 1);
  c_.RequestStop();  // answers `other` while it exists
  EXPECT_EQ(other.Wait().code(), absl::StatusCode::kCancelled);
}

TEST_F(CoordinatorTest, SecondArrivalOfAWorkerReplacesItsFirst) {
  RegisterAll();
  Arrival first, second, a1;
  Arrive(0, "b", &first);
  Arrive(0, "b", &second);
  EXPECT_EQ(first.Wait().code(), absl::StatusCode::kAborted);
  Arrive(1, "b", &a1);
  EXPECT_TRUE(second.Wait().ok());
  EXPECT_TRUE(a1.Wait().ok());
}

TEST_F(CoordinatorTest, ThreeThousandAbandonedBarriersLeaveNothing) {
  RegisterAll();
  constexpr int kRounds = 6, kPerRound = 500;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<std::unique_ptr<Arrival>> arrivals;
    for (int i = 0; i < kPerRound; ++i) {
      arrivals.push_back(std::make_unique<Arrival>());
      Arrive(0, "abandoned/" + std::to_string(round * kPerRound + i), arrivals.back().get());
      arrivals.back()->Cancel();
    }
    for (auto& a : arrivals) EXPECT_EQ(a->Wait().code(), absl::StatusCode::kCancelled);
  }
  EXPECT_EQ(c_.OpenBarriers(), 0);
}

TEST_F(CoordinatorTest, OpenBarriersAreBounded) {
  RegisterAll();
  std::vector<std::unique_ptr<Arrival>> open;
  for (int i = 0; i < kMaxOpenBarriers; ++i) {
    open.push_back(std::make_unique<Arrival>());
    Arrive(0, "open/" + std::to_string(i), open.back().get());
  }
  EXPECT_EQ(c_.OpenBarriers(), kMaxOpenBarriers);
  Arrival one_more, existing;
  Arrive(0, "one more", &one_more);
  EXPECT_EQ(one_more.Wait().code(), absl::StatusCode::kResourceExhausted);
  Arrive(1, "open/0", &existing);  // an open barrier still takes arrivals
  EXPECT_TRUE(existing.Wait().ok());
  c_.RequestStop();
  for (size_t i = 1; i < open.size(); ++i) {
    EXPECT_EQ(open[i]->Wait().code(), absl::StatusCode::kCancelled);
  }
  EXPECT_EQ(c_.OpenBarriers(), 0);
}

TEST_F(CoordinatorTest, AbortEndsTheWaitForRegistration) {
  std::thread aborter([this] { c_.Abort("SIGTERM"); });
  absl::Status s = c_.WaitForRegistration(absl::Hours(1));
  aborter.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(s.message(), "stopped by SIGTERM");
  EXPECT_EQ(c_.AbortReason(), "SIGTERM");
}

}  // namespace
}  // namespace pstrain
