// Launch: a whole cluster on 127.0.0.1 as child processes of this one.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/launch_logs.h"
#include "runtime/launch_process.h"
#include "runtime/launch_secrets.h"
#include "runtime/runtime.h"

namespace pstrain {
namespace {

volatile sig_atomic_t g_signal = 0;   // the first signal
volatile sig_atomic_t g_signals = 0;  // how many arrived
void OnSignal(int sig) {
  if (g_signal == 0) g_signal = sig;
  g_signals = g_signals + 1;
}

// How long the chief may take to end the job after the launcher asked it to stop.
constexpr absl::Duration kChiefStopGrace = absl::Seconds(10);
// How long a task that exited with an error waits for the chief to report the job's failure, and
// the chief may take to end the job once every worker command exited 0.
constexpr absl::Duration kTaskFailureGrace = absl::Seconds(10);
// The lines of a failed task's log that its error shows.
constexpr int kTailLines = 10;

struct Child {
  std::string name;  // "ps:0"
  pid_t pid = -1;
  bool command = false;  // runs the worker command, whose process group may hold more processes
  std::string log;       // its log file, or ""
  bool exited = false;
  int status = 0;
  bool stopped = false;  // signalled by the launcher while it ran
};

std::string Describe(const Child& c) {
  if (WIFEXITED(c.status))
    return absl::StrCat(c.name, " exited with status ", WEXITSTATUS(c.status));
  if (WIFSIGNALED(c.status))
    return absl::StrCat(c.name, " was killed by signal ", WTERMSIG(c.status));
  return c.name + " stopped";
}

bool Failed(const Child& c) { return c.exited && c.status != 0; }

void Error(const std::string& message) {
  std::fprintf(stderr, "pstrain launch: error: %s\n", message.c_str());
}

class Cluster {
 public:
  explicit Cluster(const LaunchOptions& o) : o_(o), tty_(isatty(STDERR_FILENO)) {}
  ~Cluster() {
    StopAll(absl::Seconds(0));
    if (chief_log_ >= 0) close(chief_log_);
  }

  int Run() {
    if (o_.num_ps < 1 || o_.num_workers < 1) {
      Error("need at least 1 ps and 1 worker");
      return 2;
    }
    if (!o_.worker_command.empty()) {
      absl::StatusOr<std::string> found = FindCommand(o_.worker_command[0]);
      if (!found.ok()) {
        Error(absl::StrCat("worker ", found.status().message()));
        return absl::IsPermissionDenied(found.status()) ? 126 : 127;
      }
      command_path_ = *found;
    }
    if (!o_.worker_command.empty() || !o_.log_dir.empty()) {
      absl::StatusOr<TaskLogs> logs = TaskLogs::Open(o_.log_dir);
      if (!logs.ok()) {
        Error(std::string(logs.status().message()));
        return o_.log_dir.empty() ? 1 : 2;
      }
      logs_ = *logs;
    }
    absl::StatusOr<LaunchSecrets> secrets =
        LaunchSecrets::Make(logs_ ? logs_->dir() : "", o_.auth_token_file, o_.tls);
    if (!secrets.ok()) {
      Error(std::string(secrets.status().message()));
      return absl::IsInvalidArgument(secrets.status()) || absl::IsNotFound(secrets.status()) ? 2
                                                                                             : 1;
    }
    secrets_.emplace(*std::move(secrets));
    if (absl::Status s = PickAddresses(); !s.ok()) {
      Error(std::string(s.message()));
      return 1;
    }
    prctl(PR_SET_CHILD_SUBREAPER, 1);  // what a command forks and leaves is reaped here
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
      Error(absl::StrCat("pipe: ", strerror(errno)));
      return 1;
    }
    // The chief first, so the others find it listening when they register.
    absl::Status started = Start("chief", 0, out[1], err[1]);
    for (int i = 0; i < o_.num_ps && started.ok(); ++i) started = Start("ps", i, -1, -1);
    for (int i = 0; i < o_.num_workers && started.ok(); ++i) started = Start("worker", i, -1, -1);
    close(out[1]);
    close(err[1]);
    if (!started.ok()) Error(std::string(started.message()));
    const int code = started.ok() ? Watch(out[0], err[0]) : 1;
    close(out[0]);
    close(err[0]);
    return code;
  }

 private:
  absl::Status PickAddresses() {
    const int tasks = 1 + o_.num_ps + o_.num_workers;
    absl::StatusOr<std::vector<int>> ports = FreePorts(o_.metrics ? 2 * tasks : tasks);
    if (!ports.ok()) return ports.status();
    size_t next = 0;
    auto address = [&] { return absl::StrCat("127.0.0.1:", (*ports)[next++]); };
    spec_.jobs["chief"].push_back(address());
    for (int i = 0; i < o_.num_ps; ++i) spec_.jobs["ps"].push_back(address());
    for (int i = 0; i < o_.num_workers; ++i) spec_.jobs["worker"].push_back(address());
    if (o_.metrics) metrics_ports_.assign(ports->begin() + tasks, ports->end());
    return absl::OkStatus();
  }

  // Each task reads the cluster and its own place in it from TF_CONFIG, so nothing is written
  // to disk but the logs asked for. --job and --task repeat it on the command line to make the
  // processes easy to tell apart. The chief's output comes to the launcher through `out` and
  // `err`; with logs, every other task's goes to its log file.
  absl::Status Start(const std::string& job, int task, int out, int err) {
    Child child;
    child.name = absl::StrCat(job, ":", task);
    ClusterSpec spec = spec_;
    spec.task_type = job;
    spec.task_index = task;
    std::vector<std::string> argv = {o_.binary, "server", "--job",
                                     job,       "--task", std::to_string(task)};
    std::vector<std::string> defaults;
    if (job == "chief") {
      argv.insert(argv.end(), o_.chief_flags.begin(), o_.chief_flags.end());
    } else if (job == "worker" && !o_.worker_command.empty()) {
      argv = o_.worker_command;
      child.command = true;
      defaults.push_back("PYTHONUNBUFFERED=1");  // a script's prints reach its log at once
    } else {
      argv.insert(argv.end(), {"--log_level", o_.log_level});
    }
    if (!child.command) AddTaskFlags(child.name, &argv);
    int log_fd = -1;
    if (logs_) {
      child.log = logs_->PathOf(child.name);
      absl::StatusOr<int> fd = logs_->Create(child.name);
      if (!fd.ok()) return fd.status();
      std::fprintf(stderr, "pstrain launch: %s log: %s\n", child.name.c_str(), child.log.c_str());
      if (job == "chief") {
        chief_log_ = *fd;
      } else {
        log_fd = out = err = *fd;
      }
    }
    const std::string& path = child.command ? command_path_ : o_.binary;
    child.pid = Spawn(path, argv, EnvironmentWith(spec.ToJson(), defaults, secrets_->Environment()),
                      out, err);
    if (log_fd >= 0) close(log_fd);
    if (child.pid < 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot start ", child.name, ": fork: ", strerror(errno)));
    }
    children_.push_back(child);
    return absl::OkStatus();
  }

  // The flags of security, metrics and log format of `pstrain server` task `name`; prints where
  // its metrics are.
  void AddTaskFlags(const std::string& name, std::vector<std::string>* argv) {
    const std::vector<std::string> security = secrets_->TaskFlags();
    argv->insert(argv->end(), security.begin(), security.end());
    argv->insert(argv->end(), {"--log_format", o_.log_format});
    if (metrics_ports_.empty()) return;
    const std::string port = std::to_string(metrics_ports_[children_.size()]);
    argv->insert(argv->end(), {"--metrics_port", port, "--metrics_linger", "0"});
    std::fprintf(stderr, "pstrain launch: %s metrics: http://127.0.0.1:%s/metrics\n", name.c_str(),
                 port.c_str());
    if (children_.empty()) {
      std::fprintf(stderr, "pstrain launch: status page: http://127.0.0.1:%s/?token=%s\n",
                   port.c_str(), secrets_->token().c_str());
    }
  }

  // Forwards the chief's output, shows its progress lines in place, and watches every child.
  // SIGINT or SIGTERM asks the chief to end the job (it tells every task); a second one, or a
  // chief that takes too long, stops every process at once. A failed task (see FailedTask) also
  // has the chief end the job. Once the chief has ended it, the worker commands may finish
  // their own work: the launch ends when the last of them exits.
  int Watch(int out_fd, int err_fd) {
    struct sigaction sa {};
    sa.sa_handler = OnSignal;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
    const Child& chief = children_.front();
    int stop_signal = 0;
    while (true) {
      if (g_signal != 0 && stop_signal == 0) {
        stop_signal = g_signal;
        EndProgress();
        std::fprintf(stderr, "pstrain launch: interrupted, stopping the cluster\n");
        StopChief();
      }
      if ((stop_signal != 0 && g_signals > 1) || absl::Now() > stop_deadline_) {
        StopAll(absl::ZeroDuration());
        return stop_signal != 0 ? 128 + stop_signal : failure_.value_or(1);
      }
      const bool output_open = Forward(fds);
      Reap();
      if (stop_signal == 0 && !failure_ && !chief.exited) CheckTasks();
      if (!chief.exited || output_open) continue;
      // The chief has ended the job.
      int code = 0;
      if (stop_signal != 0) {
        code = 128 + stop_signal;
      } else if (failure_) {
        code = *failure_;
      } else if (chief.status != 0) {
        // The job failed; the chief said why. Each command that failed by itself shows the end of
        // its log too, for the error the script printed.
        EndProgress();
        if (!WIFEXITED(chief.status)) Error(Describe(chief));
        StopAll(absl::Seconds(5));
        for (size_t i : exit_order_) {
          const Child& c = children_[i];
          if (c.command && Failed(c) && !c.stopped) Report(c, false);
        }
        return WIFEXITED(chief.status) ? WEXITSTATUS(chief.status) : 1;
      } else if (!CommandsExited()) {
        continue;
      } else {
        EndProgress();
        if (const Child* c = FirstFailedCommand(); c != nullptr) {
          Report(*c, false);
          code = CodeOf(*c);
        } else {
          ShowResults();
        }
      }
      StopAll(absl::Seconds(5));
      return code;
    }
  }

  // The command that failed first (the others often fail because the job ended), or null.
  const Child* FirstFailedCommand() const {
    for (size_t i : exit_order_) {
      if (children_[i].command && Failed(children_[i])) return &children_[i];
    }
    return nullptr;
  }

  bool CommandsExited() const {
    for (const Child& c : children_) {
      if (c.command && !c.exited) return false;
    }
    return true;
  }

  // Reads what the chief wrote (waiting up to 200 ms) and passes it on line by line; false once
  // both of its outputs are closed.
  bool Forward(pollfd fds[2]) {
    if (fds[0].fd < 0 && fds[1].fd < 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      return false;
    }
    if (poll(fds, 2, 200) <= 0) return true;
    for (int k = 0; k < 2; ++k) {
      if (fds[k].fd < 0 || !(fds[k].revents & (POLLIN | POLLHUP))) continue;
      char buf[4096];
      const ssize_t n = read(fds[k].fd, buf, sizeof(buf));
      if (n <= 0) {
        if (!bufs_[k].empty()) HandleLine(k == 0, bufs_[k]);  // a last line without its newline
        bufs_[k].clear();
        fds[k].fd = -1;
        continue;
      }
      bufs_[k].append(buf, n);
      for (size_t nl; (nl = bufs_[k].find('\n')) != std::string::npos;) {
        HandleLine(k == 0, bufs_[k].substr(0, nl));
        bufs_[k].erase(0, nl + 1);
      }
    }
    return fds[0].fd >= 0 || fds[1].fd >= 0;
  }

  // While the chief runs: a ps or worker that died ends the job (see FailedTask), and so does a
  // chief that has not ended it kTaskFailureGrace after every worker command exited 0.
  void CheckTasks() {
    if (const Child* failed = FailedTask(); failed != nullptr) {
      Report(*failed, true);
      failure_ = CodeOf(*failed);
      StopChief();
      return;
    }
    if (o_.worker_command.empty() || !CommandsExited()) return;
    if (commands_ended_ == absl::InfiniteFuture()) commands_ended_ = absl::Now();
    if (absl::Now() - commands_ended_ > kTaskFailureGrace) {
      EndProgress();
      Error(
          absl::StrCat("every worker command exited with status 0, but the chief has not ended "
                       "the job ",
                       absl::FormatDuration(kTaskFailureGrace),
                       " later: does each worker call done()? Stopping the cluster"));
      failure_ = 1;
      StopChief();
    }
  }

  // A ps or worker that died while the chief runs. A worker command that exited with an error,
  // and any task killed by a signal, fails the launch at once. A `pstrain server` task that
  // exited with an error has said why, and the chief (which ends the job and tells the others)
  // gets kTaskFailureGrace to give the job's own error first.
  const Child* FailedTask() {
    for (size_t i : exit_order_) {
      const Child& c = children_[i];
      if (i == 0 || !Failed(c)) continue;
      if (c.command || WIFSIGNALED(c.status)) return &c;
      if (first_failure_ == absl::InfiniteFuture()) first_failure_ = absl::Now();
      if (absl::Now() - first_failure_ > kTaskFailureGrace) return &c;
    }
    return nullptr;
  }

  // Says that `c` failed, with the end of its log.
  // After a job whose commands all succeeded: the last JSON object each command printed (its
  // result, by the convention of the examples), since their output went only to their logs.
  void ShowResults() const {
    for (const Child& c : children_) {
      if (!c.command || c.log.empty()) continue;
      const std::vector<std::string> tail = LastLines(c.log, kTailLines);
      for (auto line = tail.rbegin(); line != tail.rend(); ++line) {
        if (line->size() < 2 || line->front() != '{' || line->back() != '}') continue;
        std::fprintf(stderr, "pstrain launch: %s result: %s\n", c.name.c_str(), line->c_str());
        break;
      }
    }
    std::fflush(stderr);
  }

  void Report(const Child& c, bool stopping) {
    EndProgress();
    std::string message = Describe(c);
    if (!c.log.empty()) absl::StrAppend(&message, " (log: ", c.log, ")");
    if (stopping) absl::StrAppend(&message, "; stopping the cluster");
    Error(message);
    if (!c.log.empty()) {
      const std::vector<std::string> tail = LastLines(c.log, kTailLines);
      if (!tail.empty())
        std::fprintf(stderr, "pstrain launch: the end of %s's log:\n", c.name.c_str());
      for (const std::string& line : tail) std::fprintf(stderr, "    %s\n", line.c_str());
    }
    std::fflush(stderr);
  }

  // The launch's exit code when failed task `c` decides it: a worker command's own status (128 +
  // a signal's number), else 1.
  static int CodeOf(const Child& c) {
    if (!c.command) return 1;
    return WIFEXITED(c.status) ? WEXITSTATUS(c.status) : 128 + WTERMSIG(c.status);
  }

  // Asks the chief to end the job, and gives it kChiefStopGrace.
  void StopChief() {
    const Child& chief = children_.front();
    if (!chief.exited) kill(chief.pid, SIGTERM);
    stop_deadline_ = absl::Now() + kChiefStopGrace;
  }

  void HandleLine(bool is_stdout, const std::string& line) {
    if (chief_log_ >= 0) (void)!write(chief_log_, (line + "\n").data(), line.size() + 1);
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

  // Collects every child that exited, and any process a command left that was handed to the
  // launcher (PR_SET_CHILD_SUBREAPER).
  void Reap() {
    int status = 0;
    for (pid_t pid; (pid = waitpid(-1, &status, WNOHANG)) > 0;) {
      for (size_t i = 0; i < children_.size(); ++i) {
        if (children_[i].pid != pid) continue;
        children_[i].exited = true;
        children_[i].status = status;
        exit_order_.push_back(i);
      }
    }
  }

  // Whether `c` and, for a command, every process in its group have ended.
  static bool Ended(const Child& c) { return c.exited && (!c.command || kill(-c.pid, 0) != 0); }

  // Waits up to `grace` for the children to exit by themselves, then sends SIGTERM, then
  // SIGKILL to the process group of each that has not ended. What a command left running when it
  // exited gets no grace.
  void StopAll(absl::Duration grace) {
    auto wait_all = [this](absl::Duration d, bool leaders_only) {
      const absl::Time end = absl::Now() + d;
      while (true) {
        Reap();
        bool all = true;
        for (const Child& c : children_) all = all && (leaders_only ? c.exited : Ended(c));
        if (all) return true;
        if (absl::Now() >= end) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    };
    auto signal_all = [this](int sig) {
      for (Child& c : children_) {
        if (Ended(c)) continue;
        kill(-c.pid, sig);
        c.stopped = c.stopped || !c.exited;
      }
    };
    wait_all(grace, true);
    if (wait_all(absl::ZeroDuration(), false)) return;
    signal_all(SIGTERM);
    if (wait_all(absl::Seconds(2), false)) return;
    signal_all(SIGKILL);
    wait_all(absl::Seconds(5), false);
  }

  const LaunchOptions& o_;
  const bool tty_;
  ClusterSpec spec_;          // the addresses of every task
  std::string command_path_;  // the file the worker command runs
  std::optional<TaskLogs> logs_;
  std::optional<LaunchSecrets> secrets_;  // the job token and TLS files of every task
  std::vector<int> metrics_ports_;        // of each task, in start order; empty without --metrics
  int chief_log_ = -1;                    // the chief's log file, written by the launcher
  std::vector<Child> children_;           // the chief first
  std::vector<size_t> exit_order_;        // indices into children_, in the order they exited
  std::string bufs_[2];                   // the chief's stdout and stderr, not yet a whole line
  std::optional<int> failure_;            // the exit code, once a failed task decided it
  absl::Time stop_deadline_ = absl::InfiniteFuture();   // when to stop waiting for the chief
  absl::Time first_failure_ = absl::InfiniteFuture();   // when a task first exited with an error
  absl::Time commands_ended_ = absl::InfiniteFuture();  // when every worker command had exited 0
  std::string last_progress_;
  bool progress_shown_ = false;
  std::chrono::steady_clock::time_point last_printed_{};
};

}  // namespace

int Launch(const LaunchOptions& options) { return Cluster(options).Run(); }

}  // namespace pstrain
