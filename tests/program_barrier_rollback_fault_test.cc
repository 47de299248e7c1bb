// A client program that finished its tasks and then meets a barrier after its job rolled back
// (a PS killed and started again once every task was applied): the barrier's pause is refused
// by the restarted PS for the old generation, and the program must join the barrier of the
// restored job instead of failing. Real chief and PS processes on 127.0.0.1, the program in a
// thread of this process.
#include <condition_variable>
#include <mutex>
#include <thread>

#include "external_cluster.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "ones_program.h"
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

absl::Status Program(const ExternalCluster& cluster, Handshake* hs) {
  OnesProgram p;
  if (absl::Status s = p.Connect(cluster.chief(), 0, absl::Seconds(60), kSize); !s.ok()) return s;
  if (absl::Status s = p.RunTasks(kBatch); !s.ok()) return s;
  {
    std::unique_lock lock(hs->mu);
    hs->tasks_done = true;
    hs->cv.notify_all();
    hs->cv.wait(lock, [&] { return hs->rolled_back; });
  }
  if (absl::Status s = p.client().Barrier("end"); !s.ok()) return s;
  if (absl::Status s = p.PullAndExpect(-kRows / kBatch); !s.ok()) return s;
  return p.client().Done();
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
