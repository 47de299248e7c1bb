// Helpers for tests that run the pstrain binary as real processes.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain::testing {

struct Proc {
  pid_t pid = -1;
  std::string out_path, err_path;
};

struct Result {
  int exit_code = -1;  // -1: killed after the timeout
  std::string out, err;
};

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The directory under which every TempDir() of this test process lives: made on first use and
// removed with everything in it when the process exits (a test that fails exits normally too), so
// a run leaves nothing in $TMPDIR. A forked child that exits does not remove its parent's.
inline const std::string& TestRoot() {
  struct Root {
    Root() {
      std::string pattern = (std::filesystem::temp_directory_path() /
                             ("pstrain-test-" + std::to_string(owner) + "-XXXXXX"))
                                .string();
      if (mkdtemp(pattern.data()) != nullptr) path = pattern;
    }
    ~Root() {
      std::error_code ec;
      if (getpid() == owner && !path.empty()) std::filesystem::remove_all(path, ec);
    }
    const pid_t owner = getpid();
    std::string path;
  };
  static const Root root;
  return root.path;
}

inline std::string TempDir() {
  static std::mt19937_64 rng(std::random_device{}());
  std::filesystem::path p = std::filesystem::path(TestRoot()) / ("d-" + std::to_string(rng()));
  std::filesystem::create_directories(p);
  return p.string();
}

// Starts `argv` with extra environment variables; stdout and stderr go to files.
inline Proc Start(const std::vector<std::string>& argv,
                  const std::map<std::string, std::string>& env = {}) {
  Proc p;
  const std::string dir = TempDir();
  p.out_path = dir + "/out";
  p.err_path = dir + "/err";
  p.pid = fork();
  if (p.pid == 0) {
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    int out = open(p.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = open(p.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out, 1);
    dup2(err, 2);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  return p;
}

// Waits for `p` up to `timeout_s`, killing it (exit_code -1) if it takes longer.
inline Result Wait(const Proc& p, double timeout_s) {
  Result r;
  int status = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (waitpid(p.pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > end) {
      kill(p.pid, SIGKILL);
      waitpid(p.pid, &status, 0);
      status = -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (status != -1 && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (status != -1 && WIFSIGNALED(status)) r.exit_code = 128 + WTERMSIG(status);
  r.out = ReadFile(p.out_path);
  r.err = ReadFile(p.err_path);
  return r;
}

inline Result Run(const std::vector<std::string>& argv,
                  const std::map<std::string, std::string>& env = {}, double timeout_s = 120) {
  return Wait(Start(argv, env), timeout_s);
}

// Processes still running whose environment holds `tag` (set through Start's env).
inline std::vector<pid_t> ProcessesTagged(const std::string& tag) {
  std::vector<pid_t> found;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string env = ReadFile(e.path().string() + "/environ");
    if (env.find(tag) == std::string::npos) continue;
    const std::string stat = ReadFile(e.path().string() + "/stat");
    const size_t close = stat.rfind(')');
    if (close != std::string::npos && stat.size() > close + 2 && stat[close + 2] == 'Z') continue;
    found.push_back(std::stoi(name));
  }
  return found;
}

// The address 127.0.0.1:`port` (0: any port, for bind).
inline sockaddr_in Loopback(int port = 0) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

// A socket listening on 127.0.0.1 at a port the kernel picked; closed when destroyed.
class PortHolder {
 public:
  PortHolder() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = Loopback();
    socklen_t len = sizeof(a);
    bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    listen(fd_, 1);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
  ~PortHolder() { close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// `n` distinct free ports on 127.0.0.1.
inline std::vector<int> FreePorts(int n) {
  std::vector<std::unique_ptr<PortHolder>> held;
  std::vector<int> ports;
  for (int i = 0; i < n; ++i) {
    held.push_back(std::make_unique<PortHolder>());
    ports.push_back(held.back()->port());
  }
  return ports;
}

// Waits until something accepts TCP connections on 127.0.0.1:`port` (a task that started
// serving); false after `timeout_s`.
inline bool WaitUntilListening(int port, double timeout_s = 120) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = Loopback(port);
    const bool up = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    ::close(fd);
    if (up) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

inline std::string MnistDir() { return std::string(PSTRAIN_SOURCE_DIR) + "/data/mnist"; }

// The last line of `out` that starts with '{'.
inline std::string LastJsonLine(const std::string& out) {
  std::string last;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] == '{') last = line;
  }
  return last;
}

// Base of tests that start pstrain processes. Every process a test starts through it carries a
// tag in its environment; TearDown fails the test if any tagged process is still running.
class ProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir();
    tag_ = std::to_string(getpid()) + "-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }
  void TearDown() override {
    // A process killed with its parent (PR_SET_PDEATHSIG) may take a moment to go.
    for (int i = 0; i < 100 && !ProcessesTagged(Tag()).empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_THAT(ProcessesTagged(Tag()), ::testing::IsEmpty()) << "processes left running";
    for (pid_t pid : ProcessesTagged(Tag())) kill(pid, SIGKILL);
    std::filesystem::remove_all(dir_);
  }
  std::string Tag() const { return "PSTRAIN_TEST_TAG=" + tag_; }
  std::map<std::string, std::string> Env(std::map<std::string, std::string> env = {}) const {
    env["PSTRAIN_TEST_TAG"] = tag_;
    return env;
  }
  Proc StartTagged(const std::vector<std::string>& argv,
                   const std::map<std::string, std::string>& env = {}) {
    return Start(argv, Env(env));
  }
  Result RunTagged(const std::vector<std::string>& argv,
                   const std::map<std::string, std::string>& env = {}, double timeout_s = 120) {
    return pstrain::testing::Run(argv, Env(env), timeout_s);
  }
  // A cluster file with one chief, one ps and one worker on 127.0.0.1 at the given ports.
  std::string ClusterFile(int chief, int ps, int worker) {
    const std::string path = dir_ + "/cluster.json";
    std::ofstream(path) << "{\"cluster\": {\"chief\": [\"127.0.0.1:" << chief
                        << "\"], \"ps\": [\"127.0.0.1:" << ps
                        << "\"], \"worker\": [\"127.0.0.1:" << worker << "\"]}}";
    return path;
  }
  // Fails the test unless the real MNIST files are where setup puts them.
  static void RequireMnist() {
    if (!std::filesystem::exists(MnistDir() + "/train-images-idx3-ubyte")) {
      GTEST_FAIL() << "MNIST is missing under " << MnistDir() << ": run scripts/setup.sh";
    }
  }
  // Waits up to `timeout_s` until the file at `path` contains `text`.
  static void WaitForText(const std::string& path, const std::string& text, double timeout_s = 30) {
    for (int i = 0; i < timeout_s * 20 && ReadFile(path).find(text) == std::string::npos; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  std::string dir_, tag_;
};

}  // namespace pstrain::testing
