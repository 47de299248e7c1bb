// `pstrain launch -- COMMAND ARGS...`: the user's program as every worker of a local cluster,
// real processes on 127.0.0.1. Every process carries the test's tag; TearDown fails the test if
// one is left running.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using namespace pstrain::testing;

// Built next to the pstrain binary (top-level CMakeLists.txt).
std::string ExampleBinary() {
  return (std::filesystem::path(PSTRAIN_BINARY).parent_path() / "linear_regression").string();
}

// The log path the launcher printed for `task` ("worker:0"), or "".
std::string PrintedLog(const std::string& err, const std::string& task) {
  std::smatch m;
  const std::regex line("pstrain launch: " + task + " log: (\\S+)");
  return std::regex_search(err, m, line) ? m[1].str() : "";
}

class LaunchCommandTest : public ProcessTest {
 protected:
  void SetUp() override {
    ProcessTest::SetUp();
    if (!std::filesystem::exists(ExampleBinary())) {
      GTEST_FAIL() << ExampleBinary() << " is missing: build the linear_regression target";
    }
  }
  // `pstrain launch` with `flags`, then "--" and `command`; the default log directory (if used)
  // goes under the test's own directory.
  Result Launch(const std::vector<std::string>& flags, const std::vector<std::string>& command,
                double timeout_s = 120) {
    std::vector<std::string> argv = {PSTRAIN_BINARY, "launch"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.push_back("--");
    argv.insert(argv.end(), command.begin(), command.end());
    return RunTagged(argv, {{"TMPDIR", dir_}}, timeout_s);
  }
};

// The C++ example as both workers, in each mode: the job's result comes from the chief, and
// each worker's own result line is in its log file, at the path printed at start.
class LaunchExampleTest : public LaunchCommandTest,
                          public ::testing::WithParamInterface<std::string> {};

TEST_P(LaunchExampleTest, RunsTheExampleAsEveryWorker) {
  const std::string mode = GetParam();
  // Async: the default log directory; sync: --log_dir, created with its parents.
  std::vector<std::string> flags = {"--ps", "2", "--workers", "2", "--mode", mode};
  const std::string log_dir = dir_ + "/logs/" + mode;
  if (mode == "sync") flags.insert(flags.end(), {"--log_dir", log_dir});
  const Result r = Launch(flags, {ExampleBinary(), "--steps", "200", "--timeout", "60"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string line = LastJsonLine(r.out);
  ASSERT_FALSE(line.empty()) << r.out << r.err;
  const nlohmann::json job = nlohmann::json::parse(line);
  EXPECT_EQ(job["mode"], mode);
  EXPECT_EQ(job["workers"], 2);
  EXPECT_EQ(job["worker_steps"], nlohmann::json::array({200, 200})) << line;
  EXPECT_EQ(job["global_step"], mode == "sync" ? 200 : 400) << line;
  EXPECT_EQ(job["examples"], 2 * 200 * 32) << line;
  EXPECT_THAT(r.err, Not(HasSubstr("error:")));

  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE("worker " + std::to_string(i));
    const std::string log = PrintedLog(r.err, "worker:" + std::to_string(i));
    ASSERT_FALSE(log.empty()) << r.err;
    if (mode == "sync") {
      EXPECT_EQ(log, log_dir + "/worker-" + std::to_string(i) + ".log");
    } else {
      EXPECT_EQ(std::filesystem::path(log).parent_path().parent_path(), dir_);
      EXPECT_THAT(log, HasSubstr("/pstrain-launch-"));
    }
    const std::string worker_line = LastJsonLine(ReadFile(log));
    ASSERT_FALSE(worker_line.empty()) << ReadFile(log);
    const nlohmann::json w = nlohmann::json::parse(worker_line);
    EXPECT_EQ(w["task"], i);
    EXPECT_EQ(w["mode"], mode);
    EXPECT_LT(w["w_error"].get<double>(), 0.02) << worker_line;
    // Its output went to the log, not to the launcher's stdout; its result is shown at the end.
    EXPECT_THAT(r.out, Not(HasSubstr("\"w_error\"")));
    EXPECT_THAT(r.err, HasSubstr("pstrain launch: worker:" + std::to_string(i) +
                                 " result: " + worker_line + "\n"));
  }
  // The other tasks have theirs next to the workers' logs; the chief's repeats its result.
  const std::string chief_log = PrintedLog(r.err, "chief:0");
  EXPECT_EQ(std::filesystem::path(chief_log).parent_path(),
            std::filesystem::path(PrintedLog(r.err, "worker:0")).parent_path());
  EXPECT_EQ(LastJsonLine(ReadFile(chief_log)), line);
  EXPECT_TRUE(std::filesystem::exists(PrintedLog(r.err, "ps:1")));
}

INSTANTIATE_TEST_SUITE_P(Modes, LaunchExampleTest, ::testing::Values("async", "sync"),
                         [](const auto& info) { return info.param; });

// A command that fails on worker 0 (after forking a process that would outlive it) while worker
// 1 waits: the launch ends within seconds with worker 0's status, its log path and the end of
// its log, and nothing is left running, not even what the command forked.
TEST_F(LaunchCommandTest, AFailingCommandEndsTheJobWithItsStatusAndLog) {
  const std::string script =
      "sleep 300 & "
      "case \"$TF_CONFIG\" in *'\"index\":0'*) echo starting; echo boom >&2; exit 3;; esac; "
      "exec sleep 300";
  const auto start = std::chrono::steady_clock::now();
  const Result r = Launch({"--ps", "1", "--workers", "2", "--log_dir", dir_ + "/logs"},
                          {"/bin/sh", "-c", script}, 60);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_LT(seconds, 20) << r.err;
  const std::string log = dir_ + "/logs/worker-0.log";
  EXPECT_THAT(r.err, HasSubstr("error: worker:0 exited with status 3 (log: " + log + ")"));
  EXPECT_THAT(r.err, HasSubstr("the end of worker:0's log:\n    starting\n    boom\n"));
  EXPECT_THAT(r.err, Not(HasSubstr("worker:1 exited")));
}

// A worker command killed by a signal: 128 + its number, as a shell reports it. Its log's end
// shows a line redrawn with carriage returns (a progress bar) as a terminal would.
TEST_F(LaunchCommandTest, ACommandKilledByASignalGives128PlusTheSignal) {
  const Result r =
      Launch({"--ps", "1", "--workers", "1"},
             {"/bin/sh", "-c", "printf 'step 1\\rstep 2\\n'; echo dying >&2; kill -9 $$"}, 60);
  EXPECT_EQ(r.exit_code, 128 + 9) << r.err;
  EXPECT_THAT(r.err, HasSubstr("worker:0 was killed by signal 9"));
  EXPECT_THAT(r.err, HasSubstr("the end of worker:0's log:\n    step 2\n    dying\n"));
}

// Commands that exit 0 without ending the job (no done()): the launch does not wait for the
// chief's task timeout, and says what is missing.
TEST_F(LaunchCommandTest, CommandsThatNeverCallDoneFailTheLaunch) {
  const auto start = std::chrono::steady_clock::now();
  const Result r = Launch({"--ps", "1", "--workers", "2"}, {"/bin/true"}, 60);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 30);
  EXPECT_THAT(r.err, HasSubstr("does each worker call done()?"));
}

// Ctrl-C on the launcher stops the job and the commands' process groups: 128 + SIGINT.
TEST_F(LaunchCommandTest, InterruptedLaunchStopsTheCommands) {
  const Proc p =
      StartTagged({PSTRAIN_BINARY, "launch", "--ps", "1", "--workers", "2", "--log_dir",
                   dir_ + "/logs", "--", "/bin/sh", "-c", "sleep 300 & echo started; wait"});
  for (int i = 0; i < 500 && ReadFile(dir_ + "/logs/worker-1.log").empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(ReadFile(dir_ + "/logs/worker-1.log"), "started\n");
  kill(p.pid, SIGINT);
  const Result r = Wait(p, 30);
  EXPECT_EQ(r.exit_code, 128 + SIGINT) << r.err;
  EXPECT_THAT(r.err, HasSubstr("interrupted, stopping the cluster"));
}

// Bad commands and flags are refused before any process starts.
TEST_F(LaunchCommandTest, BadCommandsAndModelsAreRefusedBeforeAnythingStarts) {
  Result r = Launch({"--ps", "1", "--workers", "1"}, {"no-such-command-pstrain", "--x"}, 30);
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_THAT(r.err, HasSubstr("worker command \"no-such-command-pstrain\" not found in PATH"));
  EXPECT_THAT(r.err, Not(HasSubstr("log:")));  // nothing started, no log directory
  r = Launch({}, {dir_ + "/missing.py"}, 30);
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_THAT(r.err, HasSubstr("\"" + dir_ + "/missing.py\" not found"));
  r = Launch({}, {dir_}, 30);  // a directory
  EXPECT_EQ(r.exit_code, 126);
  EXPECT_THAT(r.err, HasSubstr("is not an executable file"));

  r = Launch({"--model", "mlp"}, {ExampleBinary()}, 30);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("error: --model mlp does not go with -- COMMAND"));
  std::ofstream(dir_ + "/file") << "not a directory";
  r = Launch({"--log_dir", dir_ + "/file"}, {ExampleBinary()}, 30);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--log_dir " + dir_ + "/file: cannot create the directory"));
  r = Launch({"--ps", "1"}, {}, 30);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("nothing after --"));
  // A flag of the built-in models is named and ignored; an explicit --model external is fine.
  r = Launch({"--ps", "1", "--workers", "1", "--model", "external", "--batch", "3"},
             {ExampleBinary(), "--steps", "20"}, 60);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("warning: --batch does not apply to --model external"));
}

// Without a command, --log_dir gives the built-in tasks their files too; the chief's output is
// still shown, and also kept in its log.
TEST_F(LaunchCommandTest, LogDirWithoutACommandKeepsEveryTasksLog) {
  RequireMnist();
  const std::string logs = dir_ + "/logs";
  const Result r =
      RunTagged({PSTRAIN_BINARY, "launch", "--ps", "1", "--workers", "1", "--data", MnistDir(),
                 "--epochs", "1", "--hidden", "16", "--log_dir", logs, "--log_level", "info"},
                {}, 180);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string line = LastJsonLine(r.out);
  ASSERT_FALSE(line.empty()) << r.out;
  EXPECT_EQ(LastJsonLine(ReadFile(logs + "/chief-0.log")), line);
  EXPECT_THAT(ReadFile(logs + "/worker-0.log"), HasSubstr("[info]"));
  EXPECT_TRUE(std::filesystem::exists(logs + "/ps-0.log"));
  EXPECT_EQ(PrintedLog(r.err, "worker:0"), logs + "/worker-0.log");
}

}  // namespace
}  // namespace pstrain
