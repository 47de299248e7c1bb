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
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/runtime.h"

namespace pstrain {
namespace {

volatile sig_atomic_t g_signal = 0;   // the first signal
volatile sig_atomic_t g_signals = 0;  // how many arrived
void OnSignal(int sig) {
  if (g_signal == 0) g_signal = sig;
  g_signals = g_signals + 1;
}

// How long the chief may take to end the job after the launcher forwarded SIGINT/SIGTERM.
constexpr absl::Duration kChiefStopGrace = absl::Seconds(10);
// How long a task that exited with an error waits for the chief to report the job's failure.
constexpr absl::Duration kTaskFailureGrace = absl::Seconds(10);

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

// This process's environment with TF_CONFIG set to `tf_config`.
std::vector<std::string> EnvironmentWith(const std::string& tf_config) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "TF_CONFIG=", 10) != 0) env.emplace_back(*e);
  }
  env.push_back("TF_CONFIG=" + tf_config);
  return env;
}

std::vector<char*> Pointers(const std::vector<std::string>& strings) {
  std::vector<char*> p;
  for (const std::string& s : strings) p.push_back(const_cast<char*>(s.c_str()));
  p.push_back(nullptr);
  return p;
}

// Starts `argv` with environment `env` in its own process group (so a terminal's Ctrl-C reaches
// only the launcher, which then stops the cluster) and asks the kernel to kill it if the
// launcher dies.
pid_t Spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env, int out_fd,
            int err_fd) {
  // Built before fork: the child may only make async-signal-safe calls.
  std::vector<char*> args = Pointers(argv), envp = Pointers(env);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid != 0) return pid;
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(1);
  if (out_fd >= 0) dup2(out_fd, STDOUT_FILENO);
  if (err_fd >= 0) dup2(err_fd, STDERR_FILENO);
  execve(args[0], args.data(), envp.data());
  static const char kCannot[] = "pstrain launch: cannot start a task: exec failed\n";
  (void)!write(STDERR_FILENO, kCannot, sizeof(kCannot) - 1);
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
    if (absl::Status s = PickAddresses(); !s.ok()) {
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
  absl::Status PickAddresses() {
    absl::StatusOr<std::vector<int>> ports = FreePorts(1 + o_.num_ps + o_.num_workers);
    if (!ports.ok()) return ports.status();
    size_t next = 0;
    auto address = [&] { return absl::StrCat("127.0.0.1:", (*ports)[next++]); };
    spec_.jobs["chief"].push_back(address());
    for (int i = 0; i < o_.num_ps; ++i) spec_.jobs["ps"].push_back(address());
    for (int i = 0; i < o_.num_workers; ++i) spec_.jobs["worker"].push_back(address());
    return absl::OkStatus();
  }

  // Each task reads the cluster and its own place in it from TF_CONFIG, so nothing is written
  // to disk and nothing is left behind however the launcher ends. --job and --task repeat it on
  // the command line to make the processes easy to tell apart.
  void Start(const std::string& job, int task, const std::vector<std::string>& extra, int out,
             int err) {
    ClusterSpec spec = spec_;
    spec.task_type = job;
    spec.task_index = task;
    std::vector<std::string> argv = {o_.binary, "server", "--job",
                                     job,       "--task", std::to_string(task)};
    if (job != "chief") argv.insert(argv.end(), {"--log_level", o_.log_level});
    argv.insert(argv.end(), extra.begin(), extra.end());
    children_.push_back(
        {absl::StrCat(job, ":", task), Spawn(argv, EnvironmentWith(spec.ToJson()), out, err)});
  }

  // Forwards the chief's output, shows its progress lines in place, and watches every child.
  // SIGINT or SIGTERM asks the chief to end the job (it tells every task); a second one, or a
  // chief that takes too long, stops every process at once.
  int Watch(int out_fd, int err_fd) {
    struct sigaction sa {};
    sa.sa_handler = OnSignal;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    std::string bufs[2];
    pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
    int open_fds = 2;
    Child& chief = children_.front();
    int stop_signal = 0;
    absl::Time stop_deadline = absl::InfiniteFuture();
    while (true) {
      if (g_signal != 0 && stop_signal == 0) {
        stop_signal = g_signal;
        EndProgress();
        std::fprintf(stderr, "pstrain launch: interrupted, stopping the cluster\n");
        if (!chief.exited) kill(chief.pid, SIGTERM);
        stop_deadline = absl::Now() + kChiefStopGrace;
      }
      if (stop_signal != 0 && (g_signals > 1 || absl::Now() > stop_deadline)) {
        StopAll(absl::ZeroDuration());
        return 128 + stop_signal;
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
      if (stop_signal == 0 && !chief.exited) {
        if (const Child* failed = FailedTask(); failed != nullptr) {
          EndProgress();
          std::fprintf(stderr, "pstrain launch: error: %s; stopping the cluster\n",
                       Describe(*failed).c_str());
          StopAll(absl::Seconds(2));
          return 1;
        }
      }
      if (chief.exited && open_fds == 0) {
        EndProgress();
        StopAll(absl::Seconds(5));
        if (stop_signal != 0) return 128 + stop_signal;
        if (WIFEXITED(chief.status)) return WEXITSTATUS(chief.status);
        std::fprintf(stderr, "pstrain launch: error: %s\n", Describe(chief).c_str());
        return 1;
      }
    }
  }

  // A ps or worker that died while the chief runs. One killed by a signal fails the launch at
  // once; one that exited with an error has said why, and the chief (which ends the job and
  // tells the others) gets kTaskFailureGrace to give the job's own error first.
  const Child* FailedTask() {
    for (const Child& c : children_) {
      if (&c == &children_.front() || !c.exited || c.status == 0) continue;
      if (WIFSIGNALED(c.status)) return &c;
      if (first_failure_ == absl::InfiniteFuture()) first_failure_ = absl::Now();
      if (absl::Now() - first_failure_ > kTaskFailureGrace) return &c;
    }
    return nullptr;
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
  }

  const LaunchOptions& o_;
  const bool tty_;
  ClusterSpec spec_;                                   // the addresses of every task
  std::vector<Child> children_;                        // the chief first
  absl::Time first_failure_ = absl::InfiniteFuture();  // when a task first exited with an error
  std::string last_progress_;
  bool progress_shown_ = false;
  std::chrono::steady_clock::time_point last_printed_{};
};

}  // namespace

int Launch(const LaunchOptions& options) { return Cluster(options).Run(); }

}  // namespace pstrain
