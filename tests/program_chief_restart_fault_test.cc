// Client programs on the chief's task queue in sync mode, the chief killed (SIGKILL) and started
// again while some programs wait in NextTask for a task (and so left the step): in the new
// chief's generation a program that still waits must leave the step again, or the program that
// holds the task never completes a step. Real chief and PS processes on 127.0.0.1, the programs
// in this process's threads.
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "external_cluster.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "ones_program.h"
#include "testing.h"

namespace pstrain {
namespace {

using namespace pstrain::testing;

constexpr int kWorkers = 3;
constexpr int kRows = 64, kBatch = 16;  // one task of 4 batches
constexpr int kSize = 4;

// The test's side of the first task's holder: told when its first step completed (so every
// other program left the step), it waits until the chief was restarted.
struct Handshake {
  std::mutex mu;
  std::condition_variable cv;
  bool holding = false, restarted = false;
  std::atomic<bool> first{true};

  void HoldUntilRestarted() {
    std::unique_lock lock(mu);
    holding = true;
    cv.notify_all();
    cv.wait(lock, [&] { return restarted; });
  }
};

// A program of the task loop (ones_program.h); the first program to reach the second batch of
// a task holds there until the chief was restarted.
absl::Status Program(const ExternalCluster& cluster, int task, Handshake* hs) {
  OnesProgram p;
  if (absl::Status s = p.Connect(cluster.chief(), task, absl::Seconds(30), kSize); !s.ok()) {
    return s;
  }
  absl::Status s = p.RunTasks(kBatch, [hs](int64_t k) {
    if (k == 1 && hs->first.exchange(false)) hs->HoldUntilRestarted();
  });
  if (!s.ok()) return s;
  if (absl::Status s = p.PullAndExpect(-kRows / kBatch); !s.ok()) return s;
  return p.client().Done();
}

// The holder pulled step 1 (its first push completed a step, which in sync mode needs the two
// other programs out of it: they wait in NextTask). The chief restarted from scratch hands the
// one task out again: whichever program takes it, at least one of those that waited through
// the restart is told to wait again, and must not hold back the step.
TEST(ProgramChiefRestartTest, ProgramsWaitingForATaskThroughARestartLeaveTheNewSteps) {
  ExternalCluster cluster("program_chief_restart_" + std::to_string(getpid()), 1, kWorkers);
  cluster.Start({"--mode", "sync", "--rows", std::to_string(kRows), "--task_rows",
                 std::to_string(kRows), "--epochs", "1", "--heartbeat_timeout_secs", "5"});
  Handshake hs;
  std::vector<absl::Status> results(kWorkers);
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] { results[w] = Program(cluster, w, &hs); });
  }
  {
    std::unique_lock lock(hs.mu);
    const bool held = hs.cv.wait_for(lock, std::chrono::seconds(120), [&] { return hs.holding; });
    EXPECT_TRUE(held) << "no program completed its first step";
  }
  cluster.RestartChief();
  {
    std::lock_guard lock(hs.mu);
    hs.restarted = true;
  }
  hs.cv.notify_all();
  for (std::thread& t : threads) t.join();
  for (int w = 0; w < kWorkers; ++w) EXPECT_TRUE(results[w].ok()) << w << ": " << results[w];
  const Result r = cluster.Finish();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(LastJsonLine(r.out));
  EXPECT_EQ(j["tasks_applied"], 1) << j.dump();
  EXPECT_EQ(j["tasks_applied_once"], true) << j.dump();
  EXPECT_TRUE(cluster.AllEnded());
}

}  // namespace
}  // namespace pstrain
