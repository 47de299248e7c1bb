// A job asked to start from a checkpoint starts from it or fails (pstrain launch, real processes
// on 127.0.0.1): a bad manifest ends the launch with the chief's error naming the field, the
// chief is not restarted into a fresh job, and the launch's temporary checkpoint directory is
// gone; a chief killed before this job saved a checkpoint is restarted from the user's
// --restore_from.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/checkpoint_manifest.h"
#include "ctr_testing.h"
#include "gmock/gmock.h"
#include "nlohmann/json.hpp"
#include "testing.h"

namespace pstrain::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

// A small MNIST job of 1 PS and 1 worker.
std::vector<std::string> Job(const std::vector<std::string>& more) {
  std::vector<std::string> argv = {
      PSTRAIN_BINARY, "launch", "--ps",     "1", "--workers", "1",   "--data",      MnistDir(),
      "--hidden",     "16",     "--epochs", "1", "--batch",   "128", "--task_rows", "2560"};
  argv.insert(argv.end(), more.begin(), more.end());
  return argv;
}

class CheckpointRestartClusterTest : public ProcessTest {
 protected:
  // One job's checkpoints for every test: the first of them, early in its epoch, is what the
  // tests restore (a job restored from it has most of its epoch still to train).
  static void SetUpTestSuite() {
    trained_ = TempDir();
    Result r = pstrain::testing::Run(Job({"--checkpoint_dir", trained_, "--checkpoint_every_steps",
                                          "40", "--keep_checkpoints", "100"}),
                                     {}, 300);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::vector<std::pair<int64_t, std::string>> all = ListCheckpoints(trained_);
    ASSERT_GE(all.size(), 2u) << r.err;
    first_ = all.back().second;
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(trained_); }
  void SetUp() override {
    ProcessTest::SetUp();
    tmp_ = dir_ + "/tmp";  // the launch's TMPDIR, for its temporary checkpoint directory
    std::filesystem::create_directories(tmp_);
  }
  // A copy of the first checkpoint in `root`: the copy's directory.
  std::string CopyOfFirst(const std::string& root) const {
    const std::string copy = root + "/" + std::filesystem::path(first_).filename().string();
    std::filesystem::create_directories(copy);
    std::filesystem::copy(first_, copy);
    return copy;
  }
  std::map<std::string, std::string> TmpEnv() const { return {{"TMPDIR", tmp_}}; }
  // What the launch left in its TMPDIR.
  std::vector<std::string> LeftInTmp() const {
    std::vector<std::string> left;
    for (const auto& e : std::filesystem::directory_iterator(tmp_)) {
      left.push_back(e.path().filename().string());
    }
    return left;
  }
  // The pid of the launch's chief (`pstrain server --job chief`), or -1.
  pid_t ChiefPid() const {
    for (pid_t pid : ProcessesTagged(Tag())) {
      const std::string cmdline = ReadFile("/proc/" + std::to_string(pid) + "/cmdline");
      if (cmdline.find(std::string("server\0--job\0chief", 18)) != std::string::npos) return pid;
    }
    return -1;
  }
  static int Count(const std::string& text, const std::string& what) {
    int n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  }

  static inline std::string trained_, first_;
  std::string tmp_;
};

// The probe's manifest: a shape of 4 TiB of floats aborted the chief with std::bad_alloc, the
// launcher restarted it with --resume of its empty directory, and the job trained from scratch
// and exited 0.
TEST_F(CheckpointRestartClusterTest, ABadManifestEndsTheLaunchNamingItAndIsNotRestarted) {
  RequireMnist();
  const std::string root = dir_ + "/bad";
  const std::string bad = CopyOfFirst(root);
  nlohmann::json m = nlohmann::json::parse(ReadFile(bad + "/manifest.json"));
  m["variables"][0]["shape"] = {1048576, 1048576};
  std::ofstream(bad + "/manifest.json", std::ios::trunc) << m.dump();
  Result r = RunTagged(Job({"--restore_from", root}), TmpEnv(), 180);
  const std::string all = r.err + r.out;
  EXPECT_EQ(r.exit_code, 1) << all;
  EXPECT_THAT(all, AllOf(HasSubstr(bad + "/manifest.json"), HasSubstr("variables[0].shape"),
                         HasSubstr("[1048576,1048576]")));
  EXPECT_THAT(all, Not(HasSubstr("starts from scratch")));
  EXPECT_THAT(all, Not(HasSubstr("restarting chief")));
  EXPECT_THAT(LeftInTmp(), IsEmpty()) << "the launch's temporary checkpoint directory";
}

// A chief that fails at start by a flag only it checks: the launch fails and leaves nothing in
// its TMPDIR.
TEST_F(CheckpointRestartClusterTest, AChiefFailingAtStartLeavesNoTemporaryDirectory) {
  RequireMnist();
  Result r = RunTagged(Job({"--restore_from", dir_ + "/nothing-here"}), TmpEnv(), 120);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err + r.out, HasSubstr("no valid checkpoint"));
  EXPECT_THAT(LeftInTmp(), IsEmpty()) << "the launch's temporary checkpoint directory";
}

// A launch whose output goes to a reader that went away (`pstrain launch ... | head` after head
// exited) and whose chief fails at start: it was ended by SIGPIPE at its first message, leaving
// its pstrain-checkpoints-* directory. It now goes on, fails as the chief did, and cleans up.
TEST_F(CheckpointRestartClusterTest, ALaunchWritingToAClosedPipeStillCleansUp) {
  RequireMnist();
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  close(fds[0]);  // no reader
  std::vector<std::string> argv = Job({"--restore_from", dir_ + "/nothing-here"});
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("TMPDIR", tmp_.c_str(), 1);
    setenv("PSTRAIN_TEST_TAG", tag_.c_str(), 1);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    std::vector<char*> args;
    for (std::string& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status)) << "ended by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_THAT(LeftInTmp(), IsEmpty()) << "the launch's temporary checkpoint directory";
}

// Killed before this job saved a checkpoint, the chief restarts from the user's --restore_from
// (it says "restoring checkpoint <path>" twice), not from scratch in the launcher's directory.
TEST_F(CheckpointRestartClusterTest, AChiefKilledBeforeTheFirstCheckpointRestoresTheUsersOne) {
  RequireMnist();
  const std::string saved = dir_ + "/saved";
  const std::string first = CopyOfFirst(saved);
  Proc launch = StartTagged(Job({"--restore_from", saved}), TmpEnv());
  const std::string restoring = "restoring checkpoint " + first;
  WaitForText(launch.err_path, restoring, 120);
  ASSERT_THAT(ReadFile(launch.err_path), HasSubstr(restoring));
  const pid_t chief = ChiefPid();
  ASSERT_GT(chief, 0);
  kill(chief, SIGKILL);  // the launch saves every 10 s: nothing of this job is saved yet
  Result r = Wait(launch, 180);
  const std::string out = r.err + r.out;
  ResultOf(r);
  EXPECT_THAT(out, HasSubstr("restarting chief:0 (killed by SIGKILL)"));
  EXPECT_THAT(out, HasSubstr("it resumes from --restore_from " + saved));
  EXPECT_EQ(Count(out, restoring), 2) << out;
  EXPECT_THAT(out, Not(HasSubstr("starts from scratch")));
  EXPECT_THAT(LeftInTmp(), IsEmpty()) << "the launch's temporary checkpoint directory";
}

}  // namespace
}  // namespace pstrain::testing
