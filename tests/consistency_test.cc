// Sync (k-of-n with backup workers) and bounded staleness on the parameter server: what waits,
// what is dropped, what is refused, and sync training equal to one worker with a larger batch.
#include <atomic>
#include <thread>

#include "client/ps_client.h"
#include "common/rpc.h"
#include "common/tensor_codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/model.h"
#include "ps/ps.h"
#include "ps_testing.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

using ps_testing::Config;
using ps_testing::Sgd;
using ps_testing::Worker;

std::unique_ptr<ParameterServer> MakePs(const std::string& mode, int workers, int replicas,
                                        int staleness, double wait_s = 10,
                                        std::vector<Sender> known = {}) {
  std::unique_ptr<ParameterServer> ps = *ParameterServer::Create({});
  ConfigureRequest req = Config(mode, workers, replicas, staleness, wait_s, known);
  *req.mutable_sender() = MakeSender("chief", 0);
  ConfigureResponse resp;
  EXPECT_TRUE(ps->Configure(req, &resp).ok());
  return ps;
}

void Create(ParameterServer* ps, const std::string& name, const Tensor& init,
            const OptimizerConfig& opt) {
  CreateVariablesRequest req;
  *req.mutable_sender() = MakeSender("chief", 0);
  VariableDef* def = req.add_variables();
  def->set_name(name);
  EncodeTensor(init, def->mutable_initial_value());
  *def->mutable_optimizer() = opt;
  CreateVariablesResponse resp;
  ASSERT_TRUE(ps->CreateVariables(req, &resp).ok());
}

absl::Status Push(ParameterServer* ps, const Sender& from, const std::string& name, float value,
                  uint64_t read_version, PushResponse* resp = nullptr) {
  PushRequest req;
  *req.mutable_sender() = from;
  Gradient* g = req.add_gradients();
  g->set_name(name);
  g->set_read_version(read_version);
  EncodeTensor(Tensor({4}, value), g->mutable_gradient());
  PushResponse local;
  return ps->Push(req, resp ? resp : &local);
}

// A pull in flight: done() tells whether it was answered.
struct AsyncPull {
  PullRequest req;
  PullResponse resp;
  absl::Status status;
  std::atomic<bool> finished{false};
  AsyncPull(ParameterServer* ps, const Sender& from, uint64_t min_version, int64_t clock) {
    *req.mutable_sender() = from;
    req.add_names("w");
    req.set_min_version(min_version);
    req.set_clock(clock);
    ps->PullAsync(req, &resp, [this](absl::Status s) {
      status = s;
      finished = true;
    });
  }
  bool done() const { return finished.load(); }
  float value() const {
    return reinterpret_cast<const float*>(resp.values(0).value().data().data())[0];
  }
};

bool Eventually(const std::function<bool()>& cond) {
  for (int i = 0; i < 500 && !cond(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return cond();
}

StatsResponse Stats(ParameterServer* ps) {
  StatsRequest req;
  *req.mutable_sender() = MakeSender("chief", 0);
  StatsResponse resp;
  EXPECT_TRUE(ps->Stats(req, &resp).ok());
  return resp;
}

TEST(SyncTest, PullForNextStepWaitsUntilKGradientsAreAveragedAndApplied) {
  auto ps = MakePs("sync", 3, 2, 0);
  Create(ps.get(), "w", Tensor({4}, 0.0f), Sgd(1.0));
  ASSERT_TRUE(Push(ps.get(), Worker(0), "w", 1.0f, 0).ok());
  AsyncPull next(ps.get(), Worker(0), 1, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(next.done()) << "one gradient of two must not complete the step";
  PushResponse resp;
  ASSERT_TRUE(Push(ps.get(), Worker(1), "w", 3.0f, 0, &resp).ok());
  EXPECT_EQ(resp.versions(0), 1u);
  ASSERT_TRUE(Eventually([&] { return next.done(); }));
  ASSERT_TRUE(next.status.ok()) << next.status;
  EXPECT_EQ(next.resp.values(0).version(), 1u);
  EXPECT_FLOAT_EQ(next.value(), -2.0f);  // w -= lr * (1 + 3) / 2

  // The backup worker's gradient for step 0 arrives late: dropped and counted, nothing applied.
  ASSERT_TRUE(Push(ps.get(), Worker(2), "w", 100.0f, 0, &resp).ok());
  EXPECT_EQ(resp.stale_dropped(), 1);
  AsyncPull after(ps.get(), Worker(2), 0, 0);
  ASSERT_TRUE(Eventually([&] { return after.done(); }));
  EXPECT_FLOAT_EQ(after.value(), -2.0f);
  const StatsResponse stats = Stats(ps.get());
  EXPECT_EQ(stats.stale_dropped(), 1);
  EXPECT_EQ(stats.updates_applied(), 1);
  EXPECT_EQ(stats.dropped_by_worker(2), 1);
  EXPECT_EQ(stats.pulls_waited(), 1);
}

TEST(SyncTest, SecondGradientFromOneWorkerForOneStepIsRefused) {
  auto ps = MakePs("sync", 2, 2, 0);
  Create(ps.get(), "w", Tensor({4}, 0.0f), Sgd(1.0));
  ASSERT_TRUE(Push(ps.get(), Worker(0), "w", 1.0f, 0).ok());
  absl::Status s = Push(ps.get(), Worker(0), "w", 1.0f, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("worker:0 already pushed a gradient for step 0"));
  ASSERT_TRUE(Push(ps.get(), Worker(1), "w", 3.0f, 0).ok());
  AsyncPull p(ps.get(), Worker(0), 1, 0);
  ASSERT_TRUE(Eventually([&] { return p.done(); }));
  EXPECT_FLOAT_EQ(p.value(), -2.0f);  // the refused gradient took no part
}

TEST(SyncTest, WaitEndsAfterTheTimeoutSayingWhatItWaitedFor) {
  auto ps = MakePs("sync", 2, 2, 0, /*wait_s=*/0.3);
  Create(ps.get(), "w", Tensor({4}, 0.0f), Sgd(1.0));
  AsyncPull p(ps.get(), Worker(0), 1, 0);
  ASSERT_TRUE(Eventually([&] { return p.done(); }));
  EXPECT_EQ(p.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(p.status.message(), HasSubstr("step 1: variable 'w' is at step 0"));
}

TEST(SyncTest, StopEndsWaitingPulls) {
  auto ps = MakePs("sync", 2, 2, 0);
  Create(ps.get(), "w", Tensor({4}, 0.0f), Sgd(1.0));
  AsyncPull p(ps.get(), Worker(0), 1, 0);
  ps->Stop();
  ASSERT_TRUE(Eventually([&] { return p.done(); }));
  EXPECT_EQ(p.status.code(), absl::StatusCode::kUnavailable);
}

TEST(SspTest, WorkerAheadByMoreThanStalenessWaitsForTheSlowest) {
  auto ps = MakePs("ssp", 2, 0, 1);
  Create(ps.get(), "w", Tensor({4}, 0.0f), Sgd(1.0));
  AsyncPull a0(ps.get(), Worker(0), 0, 0), b0(ps.get(), Worker(1), 0, 0);
  ASSERT_TRUE(Eventually([&] { return a0.done() && b0.done(); }));
  AsyncPull a1(ps.get(), Worker(0), 0, 1);  // 1 ahead: allowed with staleness 1
  ASSERT_TRUE(Eventually([&] { return a1.done(); }));
  AsyncPull a2(ps.get(), Worker(0), 0, 2);  // 2 ahead: waits
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(a2.done());
  AsyncPull b1(ps.get(), Worker(1), 0, 1);  // the slowest moves to 1: both may go
  ASSERT_TRUE(Eventually([&] { return a2.done() && b1.done(); }));
  EXPECT_TRUE(a2.status.ok());
  const StatsResponse stats = Stats(ps.get());
  EXPECT_EQ(stats.max_clock_gap(), 1);
  EXPECT_EQ(stats.pulls_waited(), 1);
}

TEST(SspTest, AWorkerThatLeftHoldsNobodyBack) {
  auto ps = MakePs("ssp", 2, 0, 0);
  Create(ps.get(), "w", Tensor({4}, 0.0f), Sgd(1.0));
  AsyncPull a(ps.get(), Worker(0), 0, 5);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(a.done());
  LeaveRequest leave;
  *leave.mutable_sender() = Worker(1);
  LeaveResponse resp;
  ASSERT_TRUE(ps->Leave(leave, &resp).ok());
  ASSERT_TRUE(Eventually([&] { return a.done(); }));
  EXPECT_TRUE(a.status.ok());
}

TEST(AdmissionTest, PushFromAWorkerTheChiefDoesNotKnowIsRefused) {
  auto ps = MakePs("async", 2, 0, 0, 10, {Worker(0, 7), Worker(1, 8)});
  Create(ps.get(), "w", Tensor({4}, 0.0f), Sgd(1.0));
  absl::Status s = Push(ps.get(), Worker(0, 9), "w", 1.0f, 0);  // a restarted worker:0
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(s.message(),
              HasSubstr("push from worker:0 (incarnation 9), which the chief does not know"));
  s = Push(ps.get(), Worker(5, 7), "w", 1.0f, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  ASSERT_TRUE(Push(ps.get(), Worker(1, 8), "w", 1.0f, 0).ok());
  AsyncPull p(ps.get(), Worker(1, 8), 0, 0);
  ASSERT_TRUE(Eventually([&] { return p.done(); }));
  EXPECT_EQ(p.resp.values(0).version(), 1u);  // only the known worker's push
}

// The chief replaces a worker declared dead by its restart (async): the old incarnation's pushes
// are refused from then on, the new one's applied; only the chief may, and only in async mode.
TEST(AdmissionTest, AReplacedWorkerIsRefusedAndItsReplacementAccepted) {
  auto ps = MakePs("async", 2, 0, 0, 10, {Worker(0, 7), Worker(1, 8)});
  Create(ps.get(), "w", Tensor({4}, 0.0f), Sgd(1.0));
  ReplaceWorkerRequest req;
  *req.mutable_sender() = Worker(1, 8);
  *req.mutable_worker() = Worker(0, 9);
  EXPECT_EQ(ps->ReplaceWorker(req).code(), absl::StatusCode::kPermissionDenied);
  *req.mutable_sender() = MakeSender("chief", 0);
  *req.mutable_worker() = Worker(2, 9);
  EXPECT_EQ(ps->ReplaceWorker(req).code(), absl::StatusCode::kInvalidArgument);
  *req.mutable_worker() = Worker(0, 9);
  ASSERT_TRUE(ps->ReplaceWorker(req).ok());
  EXPECT_EQ(Push(ps.get(), Worker(0, 7), "w", 1.0f, 0).code(), absl::StatusCode::kPermissionDenied);
  ASSERT_TRUE(Push(ps.get(), Worker(0, 9), "w", 1.0f, 0).ok());
  auto sync = MakePs("sync", 2, 2, 0, 10, {Worker(0, 7), Worker(1, 8)});
  EXPECT_EQ(sync->ReplaceWorker(req).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(AdmissionTest, NonFiniteGradientIsRefusedAndCounted) {
  auto ps = MakePs("async", 1, 0, 0);
  Create(ps.get(), "w", Tensor({4}, 0.0f), Sgd(1.0));
  absl::Status s = Push(ps.get(), Worker(0), "w", std::nanf(""), 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("non-finite"));
  s = Push(ps.get(), Worker(0), "w", INFINITY, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Stats(ps.get()).nonfinite_rejected(), 2);
  EXPECT_EQ(Stats(ps.get()).updates_applied(), 0);
}

TEST(ConfigureTest, BadConfigurationsSayWhy) {
  struct Case {
    std::string mode;
    int workers, replicas, staleness;
    const char* message;
  };
  for (const Case& c :
       std::vector<Case>{{"eventual", 2, 0, 0, "unknown mode 'eventual' (known: async, sync, ssp)"},
                         {"sync", 2, 3, 0, "replicas_to_aggregate 3 must be in [1, 2]"},
                         {"sync", 2, 0, 0, "replicas_to_aggregate 0 must be in [1, 2]"},
                         {"ssp", 2, 0, -1, "staleness -1 must be non-negative"},
                         {"async", 0, 0, 0, "num_workers 0 must be in [1, 4096]"}}) {
    std::unique_ptr<ParameterServer> ps = *ParameterServer::Create({});
    ConfigureRequest req;
    *req.mutable_sender() = MakeSender("chief", 0);
    req.mutable_consistency()->set_mode(c.mode);
    req.mutable_consistency()->set_num_workers(c.workers);
    req.mutable_consistency()->set_replicas_to_aggregate(c.replicas);
    req.mutable_consistency()->set_staleness(c.staleness);
    ConfigureResponse resp;
    absl::Status s = ps->Configure(req, &resp);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(s.message(), HasSubstr(c.message));
  }
  auto ps = MakePs("async", 1, 0, 0);
  Create(ps.get(), "w", Tensor({4}, 0.0f), Sgd(1.0));
  ConfigureRequest again;
  *again.mutable_sender() = MakeSender("chief", 0);
  again.mutable_consistency()->set_mode("sync");
  again.mutable_consistency()->set_num_workers(1);
  again.mutable_consistency()->set_replicas_to_aggregate(1);
  ConfigureResponse resp;
  EXPECT_EQ(ps->Configure(again, &resp).code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace pstrain
