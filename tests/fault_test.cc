// Faults injected into whole clusters: a Ctrl-C, a killed worker, a chief that disappears. Each
// ends with a clear message and no process left behind. CTest label: fault.
#include <signal.h>

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
};

// Ctrl-C on `pstrain launch` stops the whole cluster: exit 130 and nothing left running.
TEST_F(FaultTest, InterruptedLaunchStopsEveryProcess) {
  Proc p = StartTagged({PSTRAIN_BINARY, "launch", "--ps", "2", "--workers", "2", "--data",
                        MnistDir(), "--epochs", "50"});
  // Wait until training runs (the chief prints progress), then interrupt.
  WaitForText(p.err_path, "epoch");
  kill(p.pid, SIGINT);
  Result r = Wait(p, 30);
  EXPECT_EQ(r.exit_code, 130) << r.err;
  EXPECT_THAT(r.err, HasSubstr("interrupted, stopping the cluster"));
}

// A worker killed mid-training: the launcher names it, stops the rest and fails.
TEST_F(FaultTest, DeadWorkerEndsTheLaunchWithItsName) {
  Proc p = StartTagged({PSTRAIN_BINARY, "launch", "--ps", "1", "--workers", "2", "--data",
                        MnistDir(), "--epochs", "50"});
  WaitForText(p.err_path, "epoch");
  // The worker processes are the launcher's children with "--job worker" in their command line.
  int killed = 0;
  for (pid_t pid : ProcessesTagged(Tag())) {
    std::vector<std::string> args;
    std::istringstream cmd(ReadFile("/proc/" + std::to_string(pid) + "/cmdline"));
    for (std::string a; std::getline(cmd, a, '\0');) args.push_back(a);
    for (size_t i = 0; i + 3 < args.size(); ++i) {
      if (args[i] == "--job" && args[i + 1] == "worker" && args[i + 2] == "--task" &&
          args[i + 3] == "1") {
        kill(pid, SIGKILL);
        ++killed;
      }
    }
  }
  ASSERT_EQ(killed, 1);
  Result r = Wait(p, 60);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("worker:1 was killed by signal 9"));
}

// A chief that dies without ending the job: its PS and workers notice and exit by themselves.
TEST_F(FaultTest, TasksExitWhenTheChiefIsGone) {
  const std::vector<int> ports = FreePorts(3);
  const std::string cluster = ClusterFile(ports[0], ports[1], ports[2]);
  auto server = [&](const std::string& job) {
    return std::vector<std::string>{PSTRAIN_BINARY, "server",   "--cluster",         cluster,
                                    "--job",        job,        "--connect_timeout", "3",
                                    "--data",       MnistDir(), "--epochs",          "50"};
  };
  Proc chief = StartTagged(server("chief"));
  Proc ps = StartTagged(server("ps"));
  Proc worker = StartTagged(server("worker"));
  WaitForText(chief.err_path, "epoch");
  kill(chief.pid, SIGKILL);
  Wait(chief, 5);
  Result w = Wait(worker, 30);
  Result p = Wait(ps, 30);
  EXPECT_NE(w.exit_code, -1) << "worker still running";
  EXPECT_EQ(p.exit_code, 1) << p.err;
  EXPECT_THAT(p.err, HasSubstr("lost the chief at 127.0.0.1:" + std::to_string(ports[0])));
}

}  // namespace
}  // namespace pstrain
