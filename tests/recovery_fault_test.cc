// Recovery in a whole cluster of real processes (2 PS, 2 workers, MNIST, async and sync;
// docs/recovery.md): the test SIGKILLs a PS and starts it again on the same address, and the
// chief rolls the job back to its latest checkpoint; or it SIGKILLs the chief and starts it
// again with --resume and --restarted, and the new chief resumes from the checkpoint; or a PS
// restarts while the chief evaluates the finished job, which rolls back and evaluates again; or
// the chief dies after it told the tasks to stop, and the restarted one reports the saved result.
// Each way the job finishes, every task of every epoch applied exactly once by the ledger and by
// every shard's watermarks, one failure survived. CTest label: fault.
#include <signal.h>

#include <filesystem>
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

class RecoveryFaultTest : public ProcessTest, public ::testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override {
    ProcessTest::SetUp();
    RequireMnist();
    ckpt_ = dir_ + "/ckpt";
    const std::vector<int> ports = FreePorts(5);
    auto addr = [&](int i) { return "\"127.0.0.1:" + std::to_string(ports[i]) + "\""; };
    cluster_ = dir_ + "/cluster.json";
    std::ofstream(cluster_) << "{\"cluster\": {\"chief\": [" << addr(0) << "], \"ps\": [" << addr(1)
                            << ", " << addr(2) << "], \"worker\": [" << addr(3) << ", " << addr(4)
                            << "]}}";
  }
  std::vector<std::string> Server(const std::string& job, int task,
                                  std::vector<std::string> extra = {}) const {
    std::vector<std::string> argv = {PSTRAIN_BINARY, "server", "--cluster", cluster_,
                                     "--job",        job,      "--task",    std::to_string(task)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }
  // Three epochs of 20 tasks (3000 rows) in the mode under test, a checkpoint every second;
  // worker 0 slowed, so the job outlasts the first checkpoint.
  std::vector<std::string> ChiefFlags(std::vector<std::string> extra) const {
    std::vector<std::string> argv = {"--data", MnistDir(), "--mode", GetParam()};
    for (const char* flag :
         {"--epochs=3", "--hidden=16", "--batch=100", "--task_rows=3000", "--heartbeat_secs=0.2",
          "--heartbeat_timeout_secs=4", "--checkpoint_every_secs=1", "--slow_worker=0",
          "--slow_worker_delay_ms=20"}) {
      argv.push_back(flag);
    }
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }
  // The two PS and two workers, started.
  struct Others {
    Proc ps0, ps1, w0, w1;
  };
  Others StartOthers() {
    return {StartTagged(Server("ps", 0)), StartTagged(Server("ps", 1)),
            StartTagged(Server("worker", 0)), StartTagged(Server("worker", 1))};
  }
  // Kills ps:1 with SIGKILL and starts it again.
  Proc RestartPs1(const Proc& ps1) {
    kill(ps1.pid, SIGKILL);
    EXPECT_EQ(Wait(ps1, 10).exit_code, 128 + SIGKILL);
    return StartTagged(Server("ps", 1));
  }
  // Waits up to 60 s for a checkpoint under ckpt_ (a ckpt-* directory with its manifest).
  bool WaitForCheckpoint() const {
    for (int i = 0; i < 600; ++i) {
      if (std::filesystem::exists(ckpt_)) {
        for (const auto& e : std::filesystem::directory_iterator(ckpt_)) {
          if (std::filesystem::exists(e.path() / "manifest.json")) return true;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
  // The chief's JSON once every process ended well.
  nlohmann::json Finish(const Proc& chief, const std::vector<Proc>& others) {
    const Result c = Wait(chief, 150);
    EXPECT_EQ(c.exit_code, 0) << c.err;
    for (const Proc& p : others) {
      const Result r = Wait(p, 30);
      EXPECT_EQ(r.exit_code, 0) << r.err;
    }
    const std::string line = LastJsonLine(c.out);
    EXPECT_FALSE(line.empty()) << c.err;
    return line.empty() ? nlohmann::json::object() : nlohmann::json::parse(line);
  }
  static void ExpectRecovered(nlohmann::json j) {
    ASSERT_TRUE(j.contains("tasks")) << j.dump();
    EXPECT_EQ(j["tasks"], 60) << j.dump();
    EXPECT_EQ(j["tasks_applied"], 60) << j.dump();
    EXPECT_EQ(j["tasks_applied_once"], true) << j.dump();
    EXPECT_FALSE(j.contains("ledger_problem")) << j.dump();
    EXPECT_EQ(j["failures_survived"], 1) << j.dump();
    EXPECT_GT(j["test_accuracy"].get<double>(), 0.8) << j.dump();
  }

  std::string cluster_, ckpt_;
};

TEST_P(RecoveryFaultTest, APsKilledAndRestartedRollsTheJobBackToItsCheckpoint) {
  Proc chief = StartTagged(Server("chief", 0, ChiefFlags({"--checkpoint_dir", ckpt_})));
  const Others o = StartOthers();
  ASSERT_TRUE(WaitForCheckpoint()) << ReadFile(chief.err_path);
  const Proc ps1b = RestartPs1(o.ps1);
  nlohmann::json j = Finish(chief, {o.ps0, ps1b, o.w0, o.w1});
  ExpectRecovered(j);
  EXPECT_EQ(j["rollbacks"], 1) << j.dump();
  EXPECT_EQ(j["chief_restarts"], 0) << j.dump();
  EXPECT_THAT(ReadFile(chief.err_path), HasSubstr("rollback: ps:1"));
}

// The PS dies after the last task, while the chief finishes the job (its final checkpoint is
// saved; the evaluation is held back by --eval_delay_ms): the restarted PS holds nothing, so the
// chief rolls back to that checkpoint, whose ledger is complete, and evaluates again.
TEST_P(RecoveryFaultTest, APsRestartedWhileTheChiefEvaluatesIsRolledBackAndEvaluatedAgain) {
  Proc chief = StartTagged(
      Server("chief", 0, ChiefFlags({"--checkpoint_dir", ckpt_, "--eval_delay_ms=2000"})));
  const Others o = StartOthers();
  WaitForText(chief.err_path, "the evaluation waits", 120);
  const Proc ps1b = RestartPs1(o.ps1);
  nlohmann::json j = Finish(chief, {o.ps0, ps1b, o.w0, o.w1});
  ExpectRecovered(j);
  EXPECT_EQ(j["rollbacks"], 1) << j.dump();
  EXPECT_EQ(j["tasks_redone"], 0) << j.dump();
  EXPECT_GT(j["examples"].get<int64_t>(), 0) << j.dump();
  const std::string err = ReadFile(chief.err_path);
  EXPECT_THAT(err, HasSubstr("the job's end failed"));
  EXPECT_THAT(err, HasSubstr("rollback: ps:1"));
}

TEST_P(RecoveryFaultTest, AChiefKilledAndRestartedResumesFromItsCheckpoint) {
  const std::vector<std::string> flags = ChiefFlags({"--resume", ckpt_});
  Proc chief = StartTagged(Server("chief", 0, flags));
  const Others o = StartOthers();
  ASSERT_TRUE(WaitForCheckpoint()) << ReadFile(chief.err_path);
  kill(chief.pid, SIGKILL);
  EXPECT_EQ(Wait(chief, 10).exit_code, 128 + SIGKILL);
  std::vector<std::string> again = flags;
  again.push_back("--restarted");
  Proc chief2 = StartTagged(Server("chief", 0, again));
  nlohmann::json j = Finish(chief2, {o.ps0, o.ps1, o.w0, o.w1});
  ExpectRecovered(j);
  EXPECT_EQ(j["chief_restarts"], 1) << j.dump();
  EXPECT_EQ(j["rollbacks"], 0) << j.dump();
}

// The chief dies after it told every task to stop (held there by --end_delay_ms), before it
// reported the result, and the tasks exit. Started again with --restarted, the chief finds the
// result it saved beside the checkpoints and reports it with its restart counted, instead of
// waiting for tasks that are gone (their connect timeout here is longer than the test waits). A
// chief that is not a restart then removes the saved result, so it cannot speak for a new job.
TEST_P(RecoveryFaultTest, AChiefKilledAfterItStoppedTheTasksReportsTheSavedResultWhenRestarted) {
  const std::vector<std::string> flags = ChiefFlags({"--resume", ckpt_});
  std::vector<std::string> first = flags;
  first.push_back("--end_delay_ms=60000");
  Proc chief = StartTagged(Server("chief", 0, first));
  const Others o = StartOthers();
  WaitForText(chief.err_path, "the chief reports the result in", 150);
  for (const Proc* p : {&o.ps0, &o.ps1, &o.w0, &o.w1}) {
    const Result r = Wait(*p, 30);
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
  kill(chief.pid, SIGKILL);
  EXPECT_EQ(Wait(chief, 10).exit_code, 128 + SIGKILL);
  EXPECT_TRUE(std::filesystem::exists(ckpt_ + "/result.json"));

  std::vector<std::string> again = flags;
  again.push_back("--restarted");
  const Result c = Wait(StartTagged(Server("chief", 0, again)), 40);
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_THAT(c.err, HasSubstr("the job finished before this chief was restarted"));
  const std::string line = LastJsonLine(c.out);
  ASSERT_FALSE(line.empty()) << c.err;
  const nlohmann::json j = nlohmann::json::parse(line);
  ExpectRecovered(j);
  EXPECT_EQ(j["chief_restarts"], 1) << j.dump();
  EXPECT_EQ(j["rollbacks"], 0) << j.dump();

  std::vector<std::string> fresh = flags;
  fresh.push_back("--connect_timeout=1");
  const Result f = Wait(StartTagged(Server("chief", 0, fresh)), 30);
  EXPECT_NE(f.exit_code, 0) << f.err;  // no task registers
  EXPECT_FALSE(std::filesystem::exists(ckpt_ + "/result.json"));
}

INSTANTIATE_TEST_SUITE_P(Modes, RecoveryFaultTest, ::testing::Values("async", "sync"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace pstrain
