// Workers that wait at a barrier (Leave with pause) or leave while others still step: in sync and
// ssp jobs they stop holding the others back, and a paused worker's next push rejoins it.

#include <chrono>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps_testing.h"

namespace pstrain {
namespace {

using namespace ps_testing;  // NOLINT
using ::testing::HasSubstr;

// Long enough that no wait in these tests ends by timing out.
constexpr double kWaitS = 120;

// Both workers push one gradient each for `steps` steps; w drops by the mean each step.
void StepTogether(ParameterServer* ps, int steps, uint64_t first) {
  for (uint64_t v = first; v < first + steps; ++v) {
    ASSERT_TRUE(Push(ps, Worker(0), "w", 1.0f, v).ok());
    ASSERT_TRUE(Push(ps, Worker(1), "w", 3.0f, v).ok());
  }
}

class SyncPauseTest : public testing::Test {
 protected:
  void SetUp() override {
    const ConfigureRequest config = Config("sync", 2, 2, 0, kWaitS, {Worker(0), Worker(1)});
    ps_ = MakePs(&config);
    Create(ps_.get(), "w", Tensor({4}, 0.0f));
  }
  std::unique_ptr<ParameterServer> ps_;
};

TEST_F(SyncPauseTest, APausedWorkerNoLongerHoldsTheStepBack) {
  StepTogether(ps_.get(), 3, 0);  // w = -6 at step 3
  ASSERT_EQ(Read(ps_.get(), "w"), (State{3, -6.0f}));
  // worker:1 takes one more step and waits for it; worker:0 goes to a barrier.
  ASSERT_TRUE(Push(ps_.get(), Worker(1), "w", 3.0f, 3).ok());
  AsyncPull next(ps_.get(), Worker(1), "w", 4, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(next.done()) << "one gradient of two must not complete the step";
  ASSERT_TRUE(Leave(ps_.get(), Worker(0), /*pause=*/true).ok());
  ASSERT_TRUE(Eventually([&] { return next.done(); }));
  ASSERT_TRUE(next.status.ok()) << next.status;
  EXPECT_EQ(next.resp.values(0).version(), 4u);
  EXPECT_FLOAT_EQ(next.first(), -9.0f);  // worker:1's gradient alone, not halved

  // While worker:0 is paused, worker:1 steps alone.
  ASSERT_TRUE(Push(ps_.get(), Worker(1), "w", 1.0f, 4).ok());
  EXPECT_EQ(Read(ps_.get(), "w"), (State{5, -10.0f}));
}

TEST_F(SyncPauseTest, APausedWorkersNextPushRejoinsIt) {
  StepTogether(ps_.get(), 1, 0);  // w = -2 at step 1
  ASSERT_TRUE(Leave(ps_.get(), Worker(0), /*pause=*/true).ok());
  ASSERT_TRUE(Push(ps_.get(), Worker(1), "w", 2.0f, 1).ok());
  ASSERT_EQ(Read(ps_.get(), "w"), (State{2, -4.0f}));
  // worker:0 passes the barrier and pushes: both count again, so one gradient waits for the
  // other and the step applies their mean.
  ASSERT_TRUE(Push(ps_.get(), Worker(0), "w", 1.0f, 2).ok());
  EXPECT_EQ(Read(ps_.get(), "w").version, 2u);
  ASSERT_TRUE(Push(ps_.get(), Worker(1), "w", 3.0f, 2).ok());
  EXPECT_EQ(Read(ps_.get(), "w"), (State{3, -6.0f}));
}

TEST_F(SyncPauseTest, ThePullAfterABarrierMakesEveryPausedWorkerCountAgain) {
  StepTogether(ps_.get(), 1, 0);  // w = -2 at step 1
  // Both wait at a barrier in the middle of training, then pass it. worker:0 pulls and pushes
  // before worker:1 has pulled: its gradient alone must not make the step.
  ASSERT_TRUE(Leave(ps_.get(), Worker(0), /*pause=*/true).ok());
  ASSERT_TRUE(Leave(ps_.get(), Worker(1), /*pause=*/true).ok());
  AsyncPull after(ps_.get(), Worker(0), "w", 0, 0);
  ASSERT_TRUE(Eventually([&] { return after.done(); }));
  ASSERT_TRUE(after.status.ok()) << after.status;
  ASSERT_TRUE(Push(ps_.get(), Worker(0), "w", 1.0f, 1).ok());
  EXPECT_EQ(Read(ps_.get(), "w").version, 1u) << "one gradient of two completed the step";
  ASSERT_TRUE(Push(ps_.get(), Worker(1), "w", 3.0f, 1).ok());
  EXPECT_EQ(Read(ps_.get(), "w"), (State{2, -4.0f}));  // the mean of both
}

TEST_F(SyncPauseTest, ANegativeClockIsRefused) {
  AsyncPull bad(ps_.get(), Worker(0), "w", 0, -1);
  ASSERT_TRUE(Eventually([&] { return bad.done(); }));
  EXPECT_EQ(bad.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status.message()), HasSubstr("clock -1"));
}

TEST_F(SyncPauseTest, AGradientSentBeforeLeavingStillCountsForItsStep) {
  // worker:0 pushes its last gradient and leaves before worker:1 pushes for the same step: the
  // step waits for worker:1 and averages both, as if worker:0 had stayed.
  ASSERT_TRUE(Push(ps_.get(), Worker(0), "w", 1.0f, 0).ok());
  ASSERT_TRUE(Leave(ps_.get(), Worker(0), /*pause=*/false).ok());
  EXPECT_EQ(Read(ps_.get(), "w").version, 0u);
  ASSERT_TRUE(Push(ps_.get(), Worker(1), "w", 3.0f, 0).ok());
  EXPECT_EQ(Read(ps_.get(), "w"), (State{1, -2.0f}));
  // From then on worker:1 steps alone.
  ASSERT_TRUE(Push(ps_.get(), Worker(1), "w", 3.0f, 1).ok());
  EXPECT_EQ(Read(ps_.get(), "w"), (State{2, -5.0f}));
}

TEST(SyncTimeoutTest, ATimedOutPullNamesTheWorkerTheStepLacks) {
  const ConfigureRequest config = Config("sync", 3, 3, 0, 0.3, {Worker(0), Worker(1), Worker(2)});
  std::unique_ptr<ParameterServer> ps = MakePs(&config);
  Create(ps.get(), "w", Tensor({4}, 0.0f));
  ASSERT_TRUE(Push(ps.get(), Worker(0), "w", 1.0f, 0).ok());
  ASSERT_TRUE(Leave(ps.get(), Worker(2), /*pause=*/true).ok());
  AsyncPull p(ps.get(), Worker(0), "w", 1, 0);
  ASSERT_TRUE(Eventually([&] { return p.done(); }));
  EXPECT_EQ(p.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(p.status.message(),
              HasSubstr("for step 1: variable 'w' is at step 0 on ps task 0; step 1 still lacks "
                        "gradients from worker:1 (it has 1 of 2)"));
}

TEST(SspPauseTest, APausedWorkerHoldsNobodyBackUntilItRejoins) {
  const ConfigureRequest config = Config("ssp", 2, 0, 1, kWaitS, {Worker(0), Worker(1)});
  std::unique_ptr<ParameterServer> ps = MakePs(&config);
  Create(ps.get(), "w", Tensor({4}, 0.0f));
  AsyncPull slow(ps.get(), Worker(1), "w", 0, 1);
  ASSERT_TRUE(Eventually([&] { return slow.done(); }));
  AsyncPull ahead(ps.get(), Worker(0), "w", 0, 3);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(ahead.done()) << "clock 3 is 2 ahead of worker:1 at clock 1";
  ASSERT_TRUE(Leave(ps.get(), Worker(1), /*pause=*/true).ok());
  ASSERT_TRUE(Eventually([&] { return ahead.done(); }));
  EXPECT_TRUE(ahead.status.ok()) << ahead.status;
  AsyncPull further(ps.get(), Worker(0), "w", 0, 4);
  ASSERT_TRUE(Eventually([&] { return further.done(); }));

  // worker:1 passes the barrier and pushes: its clock (1, from its last pull) counts again.
  ASSERT_TRUE(Push(ps.get(), Worker(1), "w", 1.0f, 0).ok());
  AsyncPull held(ps.get(), Worker(0), "w", 0, 5);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(held.done());
  AsyncPull caught_up(ps.get(), Worker(1), "w", 0, 5);
  ASSERT_TRUE(Eventually([&] { return held.done() && caught_up.done(); }));
  EXPECT_TRUE(held.status.ok()) << held.status;
}

TEST(SspPauseTest, WithEveryWorkerPausedNobodyWaits) {
  const ConfigureRequest config = Config("ssp", 2, 0, 0, kWaitS, {Worker(0), Worker(1)});
  std::unique_ptr<ParameterServer> ps = MakePs(&config);
  Create(ps.get(), "w", Tensor({4}, 0.0f));
  ASSERT_TRUE(Leave(ps.get(), Worker(0), /*pause=*/true).ok());
  ASSERT_TRUE(Leave(ps.get(), Worker(1), /*pause=*/false).ok());
  AsyncPull p(ps.get(), Worker(0), "w", 0, 100);
  ASSERT_TRUE(Eventually([&] { return p.done(); }));
  EXPECT_TRUE(p.status.ok()) << p.status;
}

}  // namespace
}  // namespace pstrain
