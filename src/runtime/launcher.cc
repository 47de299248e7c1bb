// Launch: a whole cluster on 127.0.0.1 as child processes of this one.
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/runtime.h"

namespace pstrain {
namespace {

volatile sig_atomic_t g_signal = 0;
void OnSignal(int sig) { g_signal = sig; }

struct Child {
  std::string name;  // "ps:0"
  pid_t pid = -1;
  bool exited = false;
  int status = 0;
};

// Free TCP ports on 127.0.0.1: all sockets stay bound until every port is chosen, so none repeats.
absl::StatusOr<std::vector<int>> FreePorts(int n) {
  std::vector<int> fds, ports;
  absl::Status error;
  for (int i = 0; i < n && error.ok(); ++i) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      error = absl::UnavailableError(absl::StrCat("cannot pick a free port: ", strerror(errno)));
    } else {
      ports.push_back(ntohs(addr.sin_port));
    }
    if (fd >= 0) fds.push_back(fd);
  }
  for (int fd : fds) close(fd);
  if (!error.ok()) return error;
  return ports;
}

// Starts `argv` in its own process group (so a terminal's Ctrl-C reaches only the launcher, which
// then stops the cluster) and asks the kernel to kill it if the launcher dies.
pid_t Spawn(const std::vector<std::string>& argv, int out_fd, int err_fd) {
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid != 0) return pid;
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(1);
  if (out_fd >= 0) dup2(out_fd, STDOUT_FILENO);
  if (err_fd >= 0) dup2(err_fd, STDERR_FILENO);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execv(args[0], args.data());
  std::fprintf(stderr, "cannot start %s: %s\n", args[0], strerror(errno));
  _exit(127);
}

std::string Describe(const Child& c) {
  if (WIFEXITED(c.status))
    return absl::StrCat(c.name, " exited with status ", WEXITSTATUS(c.status));
  if (WIFSIGNALED(c.status))
    return absl::StrCat(c.name, " was killed by signal ", WTERMSIG(c.status));
  return c.name + " stopped";
}

class Cluster {
 public:
  explicit Cluster(const LaunchOptions& o) : o_(o), tty_(isatty(STDERR_FILENO)) {}
  ~Cluster() { StopAll(absl::Seconds(0)); }

  int Run() {
    if (o_.num_ps < 1 || o_.num_workers < 1) {
      std::fprintf(stderr, "pstrain launch: error: need at least 1 ps and 1 worker\n");
      return 2;
    }
    if (absl::Status s = WriteClusterFile(); !s.ok()) {
      std::fprintf(stderr, "pstrain launch: error: %s\n", std::string(s.message()).c_str());
      return 1;
    }
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
      std::fprintf(stderr, "pstrain launch: error: pipe: %s\n", strerror(errno));
      return 1;
    }
    // The chief first, so the others find it listening when they register.
    Start("chief", 0, o_.chief_flags, out[1], err[1]);
    for (int i = 0; i < o_.num_ps; ++i) Start("ps", i, {}, -1, -1);
    for (int i = 0; i < o_.num_workers; ++i) Start("worker", i, {}, -1, -1);
    close(out[1]);
    close(err[1]);
    const int code = Watch(out[0], err[0]);
    close(out[0]);
    close(err[0]);
    return code;
  }

 private:
  absl::Status WriteClusterFile() {
    absl::StatusOr<std::vector<int>> ports = FreePorts(1 + o_.num_ps + o_.num_workers);
    if (!ports.ok()) return ports.status();
    ClusterSpec spec;
    size_t next = 0;
    auto address = [&] { return absl::StrCat("127.0.0.1:", (*ports)[next++]); };
    spec.jobs["chief"].push_back(address());
    for (int i = 0; i < o_.num_ps; ++i) spec.jobs["ps"].push_back(address());
    for (int i = 0; i < o_.num_workers; ++i) spec.jobs["worker"].push_back(address());
    char dir[] = "/tmp/pstrain-launch-XXXXXX";
    if (mkdtemp(dir) == nullptr) {
      return absl::UnavailableError(
          absl::StrCat("cannot create a temporary directory: ", strerror(errno)));
    }
    dir_ = dir;
    cluster_file_ = dir_ + "/cluster.json";
    std::ofstream(cluster_file_) << spec.ToJson() << "\n";
    return absl::OkStatus();
  }

  void Start(const std::string& job, int task, const std::vector<std::string>& extra, int out,
             int err) {
    std::vector<std::string> argv = {o_.binary, "server", "--cluster", cluster_file_,
                                     "--job",   job,      "--task",    std::to_string(task)};
    if (job != "chief") argv.insert(argv.end(), {"--log_level", o_.log_level});
    argv.insert(argv.end(), extra.begin(), extra.end());
    children_.push_back({absl::StrCat(job, ":", task), Spawn(argv, out, err)});
  }

  // Forwards the chief's output, shows its progress lines in place, and watches every child.
  int Watch(int out_fd, int err_fd) {
    struct sigaction sa {};
    sa.sa_handler = OnSignal;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    std::string bufs[2];
    pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
    int open_fds = 2;
    while (true) {
      if (g_signal != 0) {
        EndProgress();
        std::fprintf(stderr, "pstrain launch: interrupted, stopping the cluster\n");
        StopAll(absl::Seconds(2));
        return 130;
      }
      if (open_fds > 0 && poll(fds, 2, 200) > 0) {
        for (int k = 0; k < 2; ++k) {
          if (fds[k].fd < 0 || !(fds[k].revents & (POLLIN | POLLHUP))) continue;
          char buf[4096];
          ssize_t n = read(fds[k].fd, buf, sizeof(buf));
          if (n <= 0) {
            fds[k].fd = -1;
            --open_fds;
            continue;
          }
          bufs[k].append(buf, n);
          for (size_t nl; (nl = bufs[k].find('\n')) != std::string::npos;) {
            HandleLine(k == 0, bufs[k].substr(0, nl));
            bufs[k].erase(0, nl + 1);
          }
        }
      } else if (open_fds == 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      Reap();
      Child& chief = children_.front();
      for (const Child& c : children_) {
        if (&c != &chief && c.exited && !chief.exited && c.status != 0) {
          EndProgress();
          std::fprintf(stderr, "pstrain launch: error: %s; stopping the cluster\n",
                       Describe(c).c_str());
          StopAll(absl::Seconds(2));
          return 1;
        }
      }
      if (chief.exited && open_fds == 0) {
        EndProgress();
        StopAll(absl::Seconds(5));
        if (WIFEXITED(chief.status)) return WEXITSTATUS(chief.status);
        std::fprintf(stderr, "pstrain launch: error: %s\n", Describe(chief).c_str());
        return 1;
      }
    }
  }

  void HandleLine(bool is_stdout, const std::string& line) {
    const std::string prefix = "progress ";
    if (!is_stdout && line.rfind(prefix, 0) == 0) {
      const auto now = std::chrono::steady_clock::now();
      last_progress_ = line.substr(prefix.size());
      if (tty_) {
        std::fprintf(stderr, "\r\033[K%s", last_progress_.c_str());
        progress_shown_ = true;
      } else if (now - last_printed_ > std::chrono::seconds(5)) {
        std::fprintf(stderr, "%s\n", last_progress_.c_str());
        last_printed_ = now;
      }
      std::fflush(stderr);
      return;
    }
    EndProgress();
    std::fprintf(is_stdout ? stdout : stderr, "%s\n", line.c_str());
    std::fflush(is_stdout ? stdout : stderr);
  }

  void EndProgress() {
    if (progress_shown_)
      std::fprintf(stderr, "\n");
    else if (!tty_ && !last_progress_.empty())
      std::fprintf(stderr, "%s\n", last_progress_.c_str());
    progress_shown_ = false;
    last_progress_.clear();
  }

  void Reap() {
    for (Child& c : children_) {
      if (!c.exited && c.pid > 0 && waitpid(c.pid, &c.status, WNOHANG) == c.pid) c.exited = true;
    }
  }

  // Waits up to `grace` for the children to exit by themselves, then SIGTERM, then SIGKILL.
  void StopAll(absl::Duration grace) {
    auto wait_all = [this](absl::Duration d) {
      const absl::Time end = absl::Now() + d;
      do {
        Reap();
        bool all = true;
        for (const Child& c : children_) all = all && (c.exited || c.pid <= 0);
        if (all) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      } while (absl::Now() < end);
      return false;
    };
    if (!wait_all(grace)) {
      for (const Child& c : children_)
        if (!c.exited && c.pid > 0) kill(c.pid, SIGTERM);
      if (!wait_all(absl::Seconds(2))) {
        for (const Child& c : children_)
          if (!c.exited && c.pid > 0) kill(c.pid, SIGKILL);
        wait_all(absl::Seconds(5));
      }
    }
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
      dir_.clear();
    }
  }

  const LaunchOptions& o_;
  const bool tty_;
  std::string dir_, cluster_file_;
  std::vector<Child> children_;  // the chief first
  std::string last_progress_;
  bool progress_shown_ = false;
  std::chrono::steady_clock::time_point last_printed_{};
};

}  // namespace

int Launch(const LaunchOptions& options) { return Cluster(options).Run(); }

}  // namespace pstrain
