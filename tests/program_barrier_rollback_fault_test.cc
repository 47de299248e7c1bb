// A client program that finished its tasks and then meets a barrier after its job rolled back
// (a PS killed and started again once every task was applied): the barrier's pause is refused
// by the restarted PS for the old generation, and the program must join the barrier of the
// restored job instead of failing. Real chief and PS processes on 127.0.0.1, the program in a
// thread of this process.
#include <condition_variable>
#include <mutex>
#include <thread>

#include "client/client.h"
#include "external_cluster.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing.h"

namespace pstrain {
namespace {

using namespace pstrain::testing;

constexpr int kRows = 32, kBatch = 8;  // two tasks of 16 rows, two batches each
constexpr int kSize = 4;

// The program tells the test once its task loop ended, and waits for the rollback.
struct Handshake {
  std::mutex mu;
  std::condition_variable cv;
  bool tasks_done = false, rolled_back = false;
};

// Every batch pushes ones at SGD's learning rate 1: each batch applied once moves every
// element by exactly -1.
absl::Status Program(const ExternalCluster& cluster, Handshake* hs) {
  absl::StatusOr<std::unique_ptr<Client>> c =
      Client::Connect({.chief = cluster.chief(), .task = 0, .timeout = absl::Seconds(60)});
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
      if (absl::Status s = client.Push({ones}, kBatch); !s.ok()) return s;
    }
    if (absl::Status s = client.TaskDone(); !s.ok()) return s;
  }
  {
    std::unique_lock lock(hs->mu);
    hs->tasks_done = true;
    hs->cv.notify_all();
    hs->cv.wait(lock, [&] { return hs->rolled_back; });
  }
  if (absl::Status s = client.Barrier("end"); !s.ok()) return s;
  if (absl::Status s = client.Pull(&values); !s.ok()) return s;
  for (int j = 0; j < kSize; ++j) {
    if (values[0][j] != -kRows / kBatch) {
      return absl::InternalError("w[" + std::to_string(j) + "] = " + std::to_string(values[0][j]));
    }
  }
  return client.Done();
}

// Polls the chief's log (an event, not a time) until it holds `line`, for up to two minutes.
bool ChiefLogged(const ExternalCluster& cluster, const std::string& line) {
  for (int i = 0; i < 6000; ++i) {
    if (cluster.ChiefLog().find(line) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

TEST(ProgramBarrierRollbackTest, ABarrierAfterTheTasksJoinsTheRolledBackJob) {
  ExternalCluster cluster("program_barrier_rollback_" + std::to_string(getpid()), 1, 1);
  const std::string dir = TempDir();
  cluster.Start({"--rows", std::to_string(kRows), "--task_rows", std::to_string(2 * kBatch),
                 "--epochs", "1", "--checkpoint_dir", dir + "/ckpt", "--checkpoint_every_steps",
                 "1"});
  Handshake hs;
  absl::Status result;
  std::thread program([&] { result = Program(cluster, &hs); });
  {
    std::unique_lock lock(hs.mu);
    ASSERT_TRUE(hs.cv.wait_for(lock, std::chrono::seconds(120), [&] { return hs.tasks_done; }))
        << "the program did not finish its tasks";
  }
  // The checkpoint that holds every task, then the PS killed and started again: the job rolls
  // back to it, and the program hears of it only at the barrier.
  EXPECT_TRUE(ChiefLogged(cluster, "every task is applied")) << cluster.ChiefLog();
  cluster.RestartPs(0);
  EXPECT_TRUE(ChiefLogged(cluster, "generation 2 started")) << cluster.ChiefLog();
  {
    std::lock_guard lock(hs.mu);
    hs.rolled_back = true;
  }
  hs.cv.notify_all();
  program.join();
  EXPECT_TRUE(result.ok()) << result;
  const Result r = cluster.Finish();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(LastJsonLine(r.out));
  EXPECT_EQ(j["tasks_applied"], 2) << j.dump();
  EXPECT_EQ(j["tasks_applied_once"], true) << j.dump();
  EXPECT_TRUE(cluster.AllEnded());
}

}  // namespace
}  // namespace pstrain
