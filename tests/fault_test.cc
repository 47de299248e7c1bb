// Faults injected into whole clusters: a Ctrl-C, a killed worker, a chief that disappears. Each
// ends with a clear message and no process left behind. CTest label: fault.
#include <signal.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;
using namespace pstrain::testing;

class FaultTest : public ProcessTest {
 protected:
  void SetUp() override {
    ProcessTest::SetUp();
    RequireMnist();
  }

  // A cluster file with one chief, one ps and `workers` workers on free ports of 127.0.0.1.
  std::string Cluster(int workers) {
    ports_ = FreePorts(2 + workers);
    auto addr = [&](int i) { return "\"127.0.0.1:" + std::to_string(ports_[i]) + "\""; };
    std::string worker_list;
    for (int w = 0; w < workers; ++w) worker_list += (w > 0 ? ", " : "") + addr(2 + w);
    const std::string path = dir_ + "/cluster.json";
    std::ofstream(path) << "{\"cluster\": {\"chief\": [" << addr(0) << "], \"ps\": [" << addr(1)
                        << "], \"worker\": [" << worker_list << "]}}";
    return path;
  }
  // `pstrain server` for one task of `cluster`, with `extra` flags.
  static std::vector<std::string> Server(const std::string& cluster, const std::string& job,
                                         int task, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {PSTRAIN_BINARY, "server", "--cluster", cluster,
                                     "--job",        job,      "--task",    std::to_string(task)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }
  // The pid of the launcher's child running `job`:`task` (found by its command line).
  pid_t ChildOf(const std::string& job, int task) {
    for (pid_t pid : ProcessesTagged(Tag())) {
      std::vector<std::string> args;
      std::istringstream cmd(ReadFile("/proc/" + std::to_string(pid) + "/cmdline"));
      for (std::string a; std::getline(cmd, a, '\0');) args.push_back(a);
      for (size_t i = 0; i + 3 < args.size(); ++i) {
        if (args[i] == "--job" && args[i + 1] == job && args[i + 2] == "--task" &&
            args[i + 3] == std::to_string(task)) {
          return pid;
        }
      }
    }
    return -1;
  }

  std::vector<int> ports_;
};

std::vector<std::string> LaunchLeftovers() {
  std::vector<std::string> found;
  for (const auto& e :
       std::filesystem::directory_iterator(std::filesystem::temp_directory_path())) {
    if (e.path().filename().string().rfind("pstrain-launch-", 0) == 0) {
      found.push_back(e.path().string());
    }
  }
  return found;
}

// Ctrl-C (SIGINT) or SIGTERM on `pstrain launch` stops the whole cluster: exit 128 + the signal
// and nothing left running (checked by TearDown).
TEST_F(FaultTest, InterruptedOrTerminatedLaunchStopsEveryProcess) {
  for (const int sig : {SIGINT, SIGTERM}) {
    SCOPED_TRACE(strsignal(sig));
    Proc p = StartTagged({PSTRAIN_BINARY, "launch", "--ps", "2", "--workers", "2", "--data",
                          MnistDir(), "--epochs", "50"});
    // Wait until training runs (the chief prints progress), then stop it.
    WaitForText(p.err_path, "examples/s");  // training: a progress line
    kill(p.pid, sig);
    Result r = Wait(p, 30);
    EXPECT_EQ(r.exit_code, 128 + sig) << r.err;
    EXPECT_THAT(r.err, HasSubstr("interrupted, stopping the cluster"));
  }
}

// A worker killed mid-training, restarts off: the launcher names it, stops the rest and fails.
TEST_F(FaultTest, DeadWorkerEndsTheLaunchWithItsName) {
  Proc p = StartTagged({PSTRAIN_BINARY, "launch", "--ps", "1", "--workers", "2", "--data",
                        MnistDir(), "--epochs", "50", "--restart_failed=false"});
  WaitForText(p.err_path, "examples/s");  // training: a progress line
  const pid_t worker = ChildOf("worker", 1);
  ASSERT_GT(worker, 0);
  kill(worker, SIGKILL);
  Result r = Wait(p, 60);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("worker:1 was killed by signal 9"));
}

// A chief that dies without ending the job: its PS and workers notice, say so at the default
// log level, and exit non-zero by themselves.
TEST_F(FaultTest, TasksExitWhenTheChiefIsGone) {
  const std::string cluster = Cluster(1);
  Proc chief = StartTagged(Server(
      cluster, "chief", 0,
      {"--connect_timeout", "3", "--data", MnistDir(), "--epochs", "50", "--task_timeout", "5"}));
  Proc ps = StartTagged(Server(cluster, "ps", 0, {"--connect_timeout", "3"}));
  Proc worker = StartTagged(Server(cluster, "worker", 0, {"--connect_timeout", "3"}));
  WaitForText(chief.err_path, "examples/s");  // training: a progress line
  kill(chief.pid, SIGKILL);
  Wait(chief, 5);
  Result w = Wait(worker, 30);
  Result p = Wait(ps, 30);
  EXPECT_EQ(w.exit_code, 1) << w.err;
  EXPECT_THAT(w.err, HasSubstr("pstrain worker:0: error: "));
  EXPECT_THAT(w.err, HasSubstr("lost the chief"));
  EXPECT_EQ(p.exit_code, 1) << p.err;
  EXPECT_THAT(p.err, HasSubstr("lost the chief at 127.0.0.1:" + std::to_string(ports_[0])));
}

// SIGKILL leaves the launcher no chance to clean up: its tasks die with it (PR_SET_PDEATHSIG,
// checked by TearDown), and it left no log directory. Only the temporary checkpoint directory
// it announced stays (nothing can remove it after a SIGKILL): the test removes it.
TEST_F(FaultTest, KilledLauncherLeavesNothingBehind) {
  const std::vector<std::string> before = LaunchLeftovers();
  Proc p = StartTagged({PSTRAIN_BINARY, "launch", "--ps", "1", "--workers", "1", "--data",
                        MnistDir(), "--epochs", "50"});
  WaitForText(p.err_path, "examples/s");  // training: a progress line
  kill(p.pid, SIGKILL);
  Result r = Wait(p, 10);
  EXPECT_EQ(LaunchLeftovers(), before);
  const std::string announced = "checkpoints (to restart failed tasks from): ";
  const size_t at = r.err.find(announced);
  ASSERT_NE(at, std::string::npos) << r.err;
  const size_t from = at + announced.size();
  const std::string checkpoints = r.err.substr(from, r.err.find('\n', from) - from);
  EXPECT_THAT(checkpoints, HasSubstr("pstrain-checkpoints-"));
  std::filesystem::remove_all(checkpoints);
}

// SIGTERM on a hand-run chief ends the job for every task at once (not after their 60 s
// connect timeout), and every exit code says the job did not succeed.
TEST_F(FaultTest, TerminatedChiefShutsEveryTaskDown) {
  const std::string cluster = Cluster(1);
  Proc chief = StartTagged(Server(cluster, "chief", 0, {"--data", MnistDir(), "--epochs", "50"}));
  Proc ps = StartTagged(Server(cluster, "ps", 0));
  Proc worker = StartTagged(Server(cluster, "worker", 0));
  WaitForText(chief.err_path, "examples/s");  // training: a progress line
  kill(chief.pid, SIGTERM);
  Result c = Wait(chief, 30);
  Result w = Wait(worker, 30);
  Result p = Wait(ps, 30);
  EXPECT_EQ(c.exit_code, 143) << c.err;
  EXPECT_THAT(c.err, HasSubstr("SIGTERM"));
  for (const Result* r : {&w, &p}) {
    EXPECT_EQ(r->exit_code, 1) << r->err;
    EXPECT_THAT(r->err, HasSubstr("the job did not succeed"));
  }
}

// A failed job: the chief says so in its Shutdown and every task exits 1 with the reason.
TEST_F(FaultTest, TasksOfAFailedJobExitNonZero) {
  const std::string data = dir_ + "/testonly";
  std::filesystem::create_directories(data);
  for (const char* f :
       {"t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", "train-labels-idx1-ubyte"}) {
    std::filesystem::create_symlink(MnistDir() + "/" + f, data + "/" + f);
  }
  const std::string cluster = Cluster(1);
  Proc chief = StartTagged(Server(cluster, "chief", 0, {"--data", data}));
  Proc ps = StartTagged(Server(cluster, "ps", 0));
  Proc worker = StartTagged(Server(cluster, "worker", 0));
  Result c = Wait(chief, 60);
  Result w = Wait(worker, 30);
  Result p = Wait(ps, 30);
  EXPECT_EQ(c.exit_code, 1) << c.err;
  for (const Result* r : {&w, &p}) {
    EXPECT_EQ(r->exit_code, 1) << r->err;
    EXPECT_THAT(r->err, HasSubstr("the job did not succeed: StartTraining at worker:0"));
  }
}

// Without the task queue (no recovery), a worker restarted with the index of a running one is
// refused by the chief's Register and exits at once, saying why, instead of idling until the
// job times out.
TEST_F(FaultTest, RestartedWorkerIsRefusedAndExits) {
  const std::string cluster = Cluster(2);
  Proc chief = StartTagged(
      Server(cluster, "chief", 0, {"--data", MnistDir(), "--epochs", "50", "--task_rows", "0"}));
  Proc ps = StartTagged(Server(cluster, "ps", 0));
  Proc w0 = StartTagged(Server(cluster, "worker", 0));
  Proc w1 = StartTagged(Server(cluster, "worker", 1));
  WaitForText(chief.err_path, "examples/s");  // training: a progress line
  kill(w1.pid, SIGKILL);
  Wait(w1, 5);
  Result again = RunTagged(Server(cluster, "worker", 1), {}, 30);
  EXPECT_EQ(again.exit_code, 1) << again.err;
  EXPECT_THAT(again.err, HasSubstr("pstrain worker:1: error: Register at chief"));
  EXPECT_THAT(again.err, HasSubstr("does not accept restarted tasks"));
  for (const Proc* p : {&chief, &ps, &w0}) kill(p->pid, SIGKILL);
  for (const Proc* p : {&chief, &ps, &w0}) Wait(*p, 10);
}

// A chief paused for longer than a progress report's old fixed 30 s deadline: the workers'
// reports wait for it within the job's task timeout, and the job finishes.
TEST_F(FaultTest, PausedChiefDoesNotEndTheJob) {
  Proc p = StartTagged({PSTRAIN_BINARY, "launch", "--ps", "1", "--workers", "2", "--data",
                        MnistDir(), "--epochs", "3", "--hidden", "32", "--batch", "32"});
  WaitForText(p.err_path, "examples/s");  // training: a progress line
  const pid_t chief = ChildOf("chief", 0);
  ASSERT_GT(chief, 0);
  kill(chief, SIGSTOP);
  std::this_thread::sleep_for(std::chrono::seconds(35));
  kill(chief, SIGCONT);
  Result r = Wait(p, 200);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(LastJsonLine(r.out), HasSubstr("\"test_accuracy\""));
}

}  // namespace
}  // namespace pstrain
