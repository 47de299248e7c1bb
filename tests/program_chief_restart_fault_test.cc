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

#include "client/client.h"
#include "external_cluster.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
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

// A program: every batch pulls, then pushes a gradient of ones (SGD at learning rate 1), so
// each batch applied once moves every element by exactly -1.
absl::Status Program(const ExternalCluster& cluster, int task, Handshake* hs) {
  absl::StatusOr<std::unique_ptr<Client>> c =
      Client::Connect({.chief = cluster.chief(), .task = task, .timeout = absl::Seconds(30)});
  if (!c.ok()) return c.status();
  Client& client = **c;
  absl::StatusOr<int> w = client.CreateVariable(
      {.name = "w", .shape = {kSize}, .optimizer = OptimizerOptions{.learning_rate = 1.0}});
  if (!w.ok()) return w.status();
  Tensor ones({kSize});
  for (int j = 0; j < kSize; ++j) ones.data()[j] = 1;
  std::vector<const float*> values;
  for (;;) {
    absl::StatusOr<std::optional<Task>> t = client.NextTask(kBatch);
    if (!t.ok()) return t.status();
    if (!t->has_value()) break;
    for (int64_t k = 0; k < (*t)->num_batches() && !client.task_abandoned(); ++k) {
      if (absl::Status s = client.Pull(&values); !s.ok()) return s;
      if (k == 1 && hs->first.exchange(false)) hs->HoldUntilRestarted();
      if (absl::Status s = client.Push({ones}, kBatch); !s.ok()) return s;
    }
    if (absl::Status s = client.TaskDone(); !s.ok()) return s;
  }
  if (absl::Status s = client.Pull(&values); !s.ok()) return s;
  for (int j = 0; j < kSize; ++j) {
    if (values[0][j] != -kRows / kBatch) {
      return absl::InternalError("w[" + std::to_string(j) + "] = " + std::to_string(values[0][j]));
    }
  }
  return client.Done();
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
