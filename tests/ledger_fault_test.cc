// The task queue in a whole cluster of real processes (2 PS, 2 workers, async): a worker killed
// with SIGKILL mid-epoch is declared dead, its task goes back to the queue, a replacement
// process with the same task index (started by the test) rejoins and takes tasks, and the job
// finishes with every task of every epoch applied exactly once in the chief's ledger; a worker
// paused past the deadline is told it was declared dead when it resumes. CTest label: fault.
#include <signal.h>

#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;
using namespace pstrain::testing;

class LedgerFaultTest : public ProcessTest {
 protected:
  void SetUp() override {
    ProcessTest::SetUp();
    RequireMnist();
  }
  // A cluster file: one chief, two ps, two workers on free ports of 127.0.0.1.
  std::string Cluster() {
    const std::vector<int> ports = FreePorts(5);
    auto addr = [&](int i) { return "\"127.0.0.1:" + std::to_string(ports[i]) + "\""; };
    const std::string path = dir_ + "/cluster.json";
    std::ofstream(path) << "{\"cluster\": {\"chief\": [" << addr(0) << "], \"ps\": [" << addr(1)
                        << ", " << addr(2) << "], \"worker\": [" << addr(3) << ", " << addr(4)
                        << "]}}";
    return path;
  }
  static std::vector<std::string> Server(const std::string& cluster, const std::string& job,
                                         int task, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {PSTRAIN_BINARY, "server", "--cluster", cluster,
                                     "--job",        job,      "--task",    std::to_string(task)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }

  struct Tasks {
    std::string cluster;
    Proc chief, ps0, ps1, w0, w1;
  };
  // The whole cluster, returned a second after the chief began its first epoch: mid-epoch, each
  // worker holding a task.
  Tasks StartMidEpoch();
  // The tasks the chief put back in the queue when it declared a worker dead, as its log says:
  // each is handed out again, so the job's tasks_redone.
  static int RequeuedTasks(const Proc& chief) {
    const std::string log = ReadFile(chief.err_path);
    int n = 0;
    for (size_t at = log.find("goes back to the queue"); at != std::string::npos;
         at = log.find("goes back to the queue", at + 1)) {
      ++n;
    }
    return n;
  }
};

// The chief's flags: 2 epochs of 60 tasks, a heartbeat every 0.2 s, dead after 2 s of silence.
// Worker 0 sleeps 3 ms a step, so that alone it needs over 4 s for what is left after worker 1
// is stopped, however fast the machine: the job outlasts the 2 s until worker 1 is declared dead
// and its replacement's start.
std::vector<std::string> ChiefFlags() {
  return {"--data",
          MnistDir(),
          "--slow_worker",
          "0",
          "--slow_worker_delay_ms",
          "3",
          "--epochs",
          "2",
          "--hidden",
          "64",
          "--task_rows",
          "1000",
          "--heartbeat_secs",
          "0.2",
          "--heartbeat_timeout_secs",
          "2"};
}

LedgerFaultTest::Tasks LedgerFaultTest::StartMidEpoch() {
  Tasks t;
  t.cluster = Cluster();
  t.chief = StartTagged(Server(t.cluster, "chief", 0, ChiefFlags()));
  t.ps0 = StartTagged(Server(t.cluster, "ps", 0));
  t.ps1 = StartTagged(Server(t.cluster, "ps", 1));
  t.w0 = StartTagged(Server(t.cluster, "worker", 0));
  t.w1 = StartTagged(Server(t.cluster, "worker", 1));
  WaitForText(t.chief.err_path, "epoch 1/2");
  EXPECT_THAT(ReadFile(t.chief.err_path), HasSubstr("epoch 1/2"));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  return t;
}

// A worker paused (SIGSTOP) past the deadline is declared dead; once resumed it is told so by
// its next Heartbeat and exits, and the job finishes without it, every task applied once.
TEST_F(LedgerFaultTest, AWorkerBackFromTheDeadIsToldSoAndTheJobFinishesWithoutIt) {
  const auto& [cluster, chief, ps0, ps1, w0, w1] = StartMidEpoch();
  if (HasFailure()) return;  // the chief never began its first epoch
  kill(w1.pid, SIGSTOP);
  WaitForText(chief.err_path, "worker:1 declared dead");
  kill(w1.pid, SIGCONT);
  const Result r1 = Wait(w1, 30);
  EXPECT_NE(r1.exit_code, 0);
  EXPECT_THAT(r1.err, HasSubstr("declared dead at"));
  const Result c = Wait(chief, 150);
  const Result r0 = Wait(w0, 30), p0 = Wait(ps0, 30), p1 = Wait(ps1, 30);
  ASSERT_EQ(c.exit_code, 0) << c.err;
  for (const Result* r : {&r0, &p0, &p1}) EXPECT_EQ(r->exit_code, 0) << r->err;
  const nlohmann::json j = nlohmann::json::parse(LastJsonLine(c.out));
  EXPECT_EQ(j["tasks_applied"], j["tasks"]) << j.dump();
  EXPECT_EQ(j["tasks_applied_once"], true) << j.dump();
  EXPECT_EQ(j["workers_declared_dead"], 1) << j.dump();
  EXPECT_EQ(j["tasks_redone"], RequeuedTasks(chief)) << j.dump();
}

TEST_F(LedgerFaultTest, AKilledWorkerIsReplacedAndEveryTaskIsAppliedOnce) {
  const auto& [cluster, chief, ps0, ps1, w0, w1] = StartMidEpoch();
  if (HasFailure()) return;  // the chief never began its first epoch
  kill(w1.pid, SIGKILL);
  EXPECT_EQ(Wait(w1, 10).exit_code, 128 + SIGKILL);
  WaitForText(chief.err_path, "worker:1 declared dead");
  ASSERT_THAT(ReadFile(chief.err_path), HasSubstr("worker:1 declared dead"));
  Proc w1b = StartTagged(Server(cluster, "worker", 1));
  const Result c = Wait(chief, 150);
  const Result r0 = Wait(w0, 30), r1 = Wait(w1b, 30), p0 = Wait(ps0, 30), p1 = Wait(ps1, 30);
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_THAT(c.err, HasSubstr("worker:1 replaced by incarnation"));
  for (const Result* r : {&r0, &r1, &p0, &p1}) EXPECT_EQ(r->exit_code, 0) << r->err;
  const nlohmann::json j = nlohmann::json::parse(LastJsonLine(c.out));
  EXPECT_EQ(j["tasks"].get<int64_t>() % 2, 0) << j.dump();  // the same tasks in both epochs
  EXPECT_GT(j["tasks"].get<int64_t>(), 20) << j.dump();
  EXPECT_EQ(j["tasks_applied"], j["tasks"]) << j.dump();
  EXPECT_EQ(j["tasks_applied_once"], true) << j.dump();
  EXPECT_EQ(j["workers_declared_dead"], 1) << j.dump();
  // The task worker:1 held when it was killed, unless it was killed between a task's report and
  // the next one's handout.
  EXPECT_EQ(j["tasks_redone"], RequeuedTasks(chief)) << j.dump();
  EXPECT_GT(j["test_accuracy"].get<double>(), 0.9) << j.dump();
}

}  // namespace
}  // namespace pstrain
