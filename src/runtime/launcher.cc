// Launch: a whole cluster on 127.0.0.1 as child processes of this one.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/launch_logs.h"
#include "runtime/launch_output.h"
#include "runtime/launch_plan.h"
#include "runtime/launch_process.h"
#include "runtime/launch_secrets.h"
#include "runtime/launch_supervisor.h"
#include "runtime/runtime.h"

namespace pstrain {
namespace {

volatile sig_atomic_t g_signal = 0;   // the first signal
volatile sig_atomic_t g_signals = 0;  // how many arrived
void CountSignal(int sig) {
  if (g_signal == 0) g_signal = sig;
  g_signals = g_signals + 1;
}
// A closed stdout or stderr (a pipe to a reader that went away) must not end the launcher
// before it stopped its tasks and removed its files: the write fails instead. A handler, not
// SIG_IGN, which the tasks would inherit through exec.
void OnBrokenPipe(int) {}

// From the start of the launch: a stop requested while the tasks are being started is handled
// once they are, like any other, so the launch still stops them and cleans up.
void CatchSignals() {
  struct sigaction sa {};
  sa.sa_handler = CountSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  sa.sa_handler = OnBrokenPipe;
  sigaction(SIGPIPE, &sa, nullptr);
}

// How long the chief may take to end the job after the launcher asked it to stop.
constexpr absl::Duration kChiefStopGrace = absl::Seconds(10);
// How long a task that exited with an error waits for the chief to report the job's failure, and
// the chief may take to end the job once every worker command exited 0.
constexpr absl::Duration kTaskFailureGrace = absl::Seconds(10);

class Cluster {
 public:
  explicit Cluster(const LaunchOptions& o)
      : o_(o),
        sup_({.enabled = o.restart_failed, .max_restarts = o.max_restarts, .recovery = o.recovery}),
        plan_(o) {}
  ~Cluster() { sup_.StopAll(absl::Seconds(0)); }

  int Run() {
    if (o_.num_ps < 1 || o_.num_workers < 1) {
      LaunchError("need at least 1 ps and 1 worker");
      return 2;
    }
    CatchSignals();
    if (!o_.worker_command.empty()) {
      absl::StatusOr<std::string> found = FindCommand(o_.worker_command[0]);
      if (!found.ok()) {
        LaunchError(absl::StrCat("worker ", found.status().message()));
        return absl::IsPermissionDenied(found.status()) ? 126 : 127;
      }
      command_path_ = *found;
    }
    if (!o_.worker_command.empty() || !o_.log_dir.empty()) {
      absl::StatusOr<TaskLogs> logs = TaskLogs::Open(o_.log_dir);
      if (!logs.ok()) {
        LaunchError(std::string(logs.status().message()));
        return o_.log_dir.empty() ? 1 : 2;
      }
      logs_ = *logs;
    }
    absl::StatusOr<LaunchSecrets> secrets =
        LaunchSecrets::Make(logs_ ? logs_->dir() : "", o_.auth_token_file, o_.tls);
    if (!secrets.ok()) {
      LaunchError(std::string(secrets.status().message()));
      return absl::IsInvalidArgument(secrets.status()) || absl::IsNotFound(secrets.status()) ? 2
                                                                                             : 1;
    }
    secrets_.emplace(*std::move(secrets));
    if (absl::Status s = plan_.Prepare(&*secrets_, logs_ ? &*logs_ : nullptr); !s.ok()) {
      LaunchError(std::string(s.message()));
      return 1;
    }
    prctl(PR_SET_CHILD_SUBREAPER, 1);  // what a command forks and leaves is reaped here
    // The chief first, so the others find it listening when they register.
    absl::Status started = Start("chief", 0);
    for (int i = 0; i < o_.num_ps && started.ok(); ++i) started = Start("ps", i);
    for (int i = 0; i < o_.num_workers && started.ok(); ++i) started = Start("worker", i);
    if (!started.ok()) LaunchError(std::string(started.message()));
    return started.ok() ? Watch() : 1;
  }

 private:
  // Each task reads the cluster and its own place in it from TF_CONFIG, so nothing is written
  // to disk but the logs asked for. --job and --task repeat it on the command line to make the
  // processes easy to tell apart.
  absl::Status Start(const std::string& job, int task) {
    Child child;
    child.name = absl::StrCat(job, ":", task);
    std::vector<std::string> defaults;
    if (job == "worker" && !o_.worker_command.empty()) {
      child.argv = o_.worker_command;
      child.command = true;
      defaults.push_back("PYTHONUNBUFFERED=1");  // a script's prints reach its log at once
    } else {
      child.argv = plan_.ServerArgv(job, task, /*restarted=*/false);
    }
    child.env = plan_.Environment(job, task, defaults);
    if (child.command) PrependBuiltPythonPackage(o_.binary, &child.env);
    if (logs_) {
      child.log = logs_->PathOf(child.name);
      std::fprintf(stderr, "pstrain launch: %s log: %s\n", child.name.c_str(), child.log.c_str());
    }
    sup_.children().push_back(child);
    return Spawn(sup_.children().back());
  }

  // Starts the process of `c`. The chief's output comes to the launcher through pipes; with
  // logs, every other task's goes to its log file. A restart (`restart` says why) is appended to
  // the log, which then goes on.
  absl::Status Spawn(Child& c, const std::string& restart = "") {
    const bool chief = &c == &sup_.children().front();
    int out = -1, err = -1, pipes[2][2];
    if (chief) {
      if (pipe2(pipes[0], O_CLOEXEC) != 0 || pipe2(pipes[1], O_CLOEXEC) != 0) {
        return absl::UnavailableError(absl::StrCat("pipe: ", strerror(errno)));
      }
      out = pipes[0][1];
      err = pipes[1][1];
    }
    if (logs_ && (!chief || restart.empty())) {
      absl::StatusOr<int> fd = logs_->Create(c.name, /*truncate=*/restart.empty());
      if (!fd.ok()) return fd.status();
      if (chief) {
        output_.SetLog(*fd);
      } else {
        out = err = *fd;
      }
    }
    if (!restart.empty()) {
      const std::string line = absl::StrCat("pstrain launch: ", restart, "\n");
      if (chief) {
        output_.WriteLog(line);
      } else if (out >= 0) {
        (void)!write(out, line.data(), line.size());
      }
    }
    c.exited = false;
    c.status = 0;
    c.pid = pstrain::Spawn(c.command ? command_path_ : o_.binary, c.argv, c.env, out, err);
    if (chief) {
      close(out);
      close(err);
      output_.Attach(pipes[0][0], pipes[1][0]);
    } else if (out >= 0) {
      close(out);
    }
    if (c.pid < 0) {
      c.exited = true;
      return absl::UnavailableError(
          absl::StrCat("cannot start ", c.name, ": fork: ", strerror(errno)));
    }
    return absl::OkStatus();
  }

  // Forwards the chief's output and watches every child. SIGINT, SIGTERM or SIGHUP asks the chief
  // to end the job (it tells every task); a second one, or a chief that takes too long, stops every
  // process at once. A task that died is restarted (CheckDeaths); one that is not has the chief
  // end the job (see FailedTask). Once the chief has ended it, the worker commands may finish
  // their own work: the launch ends when the last of them exits.
  int Watch() {
    const Child& chief = sup_.chief();
    int stop_signal = 0;
    while (true) {
      if (g_signal != 0 && stop_signal == 0) {
        stop_signal = g_signal;
        output_.EndProgress();
        std::fprintf(stderr, "pstrain launch: interrupted, stopping the cluster\n");
        sup_.Disable();
        StopChief();
      }
      if ((stop_signal != 0 && g_signals > 1) || absl::Now() > stop_deadline_) {
        sup_.StopAll(absl::ZeroDuration());
        return stop_signal != 0 ? 128 + stop_signal : failure_.value_or(1);
      }
      const bool output_open = output_.Forward();
      sup_.Reap();
      if (stop_signal == 0 && !failure_) CheckDeaths();
      if (stop_signal == 0 && !failure_ && !chief.exited) CheckTasks();
      if (!chief.exited || output_open || sup_.Pending(0)) continue;
      // The chief has ended the job.
      int code = 0;
      if (stop_signal != 0) {
        code = 128 + stop_signal;
      } else if (failure_) {
        code = *failure_;
      } else if (chief.status != 0) {
        // The job failed; the chief said why. Each command that failed by itself shows the end of
        // its log too, for the error the script printed.
        output_.EndProgress();
        if (!WIFEXITED(chief.status)) LaunchError(Describe(chief));
        sup_.StopAll(absl::Seconds(5), /*commands_only=*/true);
        for (size_t i : sup_.exit_order()) {
          const Child& c = sup_.children()[i];
          if (c.command && Failed(c) && !c.stopped) Report(c, "");
        }
        SayRestarts();
        return WIFEXITED(chief.status) ? WEXITSTATUS(chief.status) : 1;
      } else if (!CommandsExited()) {
        continue;
      } else {
        output_.EndProgress();
        if (const Child* c = FirstFailedCommand(); c != nullptr) {
          Report(*c, "");
          code = ExitCodeOf(*c);
        } else {
          ShowCommandResults(sup_.children());
        }
      }
      SayRestarts();
      sup_.StopAll(absl::Seconds(5));
      return code;
    }
  }

  // The tasks that died since the last look, while the job runs: each is restarted after a short
  // backoff if the restart policy allows it; one restarted too often ends the job.
  void CheckDeaths() {
    const std::vector<size_t>& order = sup_.exit_order();
    std::vector<size_t> died(order.begin() + deaths_seen_, order.end());
    deaths_seen_ = order.size();
    // The chief first: whether it is restarted decides whether the job goes on for the others.
    std::stable_partition(died.begin(), died.end(), [](size_t i) { return i == 0; });
    for (const size_t i : died) {
      const Child& c = sup_.children()[i];
      if (!Failed(c) || c.stopped || (i != 0 && JobOver())) continue;
      switch (sup_.OnDeath(i)) {
        case Supervisor::Verdict::kRestart:
        case Supervisor::Verdict::kOff:
          break;
        case Supervisor::Verdict::kNoRecovery:
          output_.EndProgress();
          std::fprintf(stderr,
                       "pstrain launch: %s; this job has no recovery (no task queue: --task_rows "
                       "0, or --model external without --rows), so it is not restarted\n",
                       Describe(c).c_str());
          break;
        case Supervisor::Verdict::kExhausted:
          Report(c, absl::StrCat(c.restarts == 0
                                     ? "; not restarted"
                                     : absl::StrCat("; restarted ", Times(c.restarts), " already"),
                                 " (--max_restarts ", sup_.policy().max_restarts,
                                 "); stopping the cluster"));
          failure_ = 1;
          StopChief();
          return;
      }
    }
    for (size_t i : sup_.Due()) {
      if (i != 0 && JobOver()) continue;
      Child& c = sup_.children()[i];
      sup_.CountRestart(i);
      output_.EndProgress();
      std::string from;
      if (i == 0) c.argv = plan_.ServerArgv("chief", 0, /*restarted=*/true, &from);
      const std::string restart = absl::StrCat(
          "restarting ", c.name, " (", HowItEnded(c), "), restart ", c.restarts, " of ",
          sup_.policy().max_restarts, i == 0 ? absl::StrCat("; it resumes from ", from) : "");
      std::fprintf(stderr, "pstrain launch: %s\n", restart.c_str());
      std::fflush(stderr);
      if (absl::Status s = Spawn(c, restart); !s.ok()) {
        LaunchError(std::string(s.message()));
        failure_ = 1;
        StopChief();
        return;
      }
    }
  }

  // The chief exited and will not be started again.
  bool JobOver() const { return sup_.chief().exited && !sup_.Pending(0); }

  // The command that failed first (the others often fail because the job ended), or null.
  const Child* FirstFailedCommand() const {
    for (size_t i : sup_.exit_order()) {
      if (sup_.children()[i].command && Failed(sup_.children()[i])) return &sup_.children()[i];
    }
    return nullptr;
  }

  bool CommandsExited() const {
    for (const Child& c : sup_.children()) {
      if (c.command && !c.exited) return false;
    }
    return true;
  }

  // While the chief runs: a ps or worker that died ends the job (see FailedTask), and so does a
  // chief that has not ended it kTaskFailureGrace after every worker command exited 0.
  void CheckTasks() {
    if (const Child* failed = FailedTask(); failed != nullptr) {
      Report(*failed, "; stopping the cluster");
      failure_ = ExitCodeOf(*failed);
      StopChief();
      return;
    }
    if (o_.worker_command.empty() || !CommandsExited()) return;
    if (commands_ended_ == absl::InfiniteFuture()) commands_ended_ = absl::Now();
    if (absl::Now() - commands_ended_ > kTaskFailureGrace) {
      output_.EndProgress();
      LaunchError(
          absl::StrCat("every worker command exited with status 0, but the chief has not ended "
                       "the job ",
                       absl::FormatDuration(kTaskFailureGrace),
                       " later: does each worker call done()? Stopping the cluster"));
      failure_ = 1;
      StopChief();
    }
  }

  // A ps or worker that died while the chief runs and is not being restarted. A worker command
  // that exited with an error, and any task killed by a signal, fails the launch at once. A
  // `pstrain server` task that exited with an error has said why, and the chief (which ends the
  // job and tells the others) gets kTaskFailureGrace to give the job's own error first.
  const Child* FailedTask() {
    for (size_t i : sup_.exit_order()) {
      const Child& c = sup_.children()[i];
      if (i == 0 || !Failed(c) || sup_.Pending(i)) continue;
      if (c.command || WIFSIGNALED(c.status)) return &c;
      if (first_failure_ == absl::InfiniteFuture()) first_failure_ = absl::Now();
      if (absl::Now() - first_failure_ > kTaskFailureGrace) return &c;
    }
    return nullptr;
  }

  // How many tasks were restarted, if any.
  void SayRestarts() const {
    if (sup_.total_restarts() == 0) return;
    std::fprintf(stderr, "pstrain launch: %s during the job\n", sup_.RestartSummary().c_str());
    std::fflush(stderr);
  }

  // Says that `c` failed (then `more`), with the end of its log.
  void Report(const Child& c, const std::string& more) {
    output_.EndProgress();
    ReportFailure(c, more);
  }

  // Asks the chief to end the job, and gives it kChiefStopGrace.
  void StopChief() {
    sup_.Disable();
    const Child& chief = sup_.chief();
    if (!chief.exited) kill(chief.pid, SIGTERM);
    stop_deadline_ = absl::Now() + kChiefStopGrace;
  }

  const LaunchOptions& o_;
  Supervisor sup_;            // the processes, the chief first
  std::string command_path_;  // the file the worker command runs
  std::optional<TaskLogs> logs_;
  std::optional<LaunchSecrets> secrets_;  // the job token and TLS files of every task
  LaunchPlan plan_;                       // the addresses and command lines of the tasks
  ChiefOutput output_;
  size_t deaths_seen_ = 0;      // the exits CheckDeaths has looked at
  std::optional<int> failure_;  // the exit code, once a failed task decided it
  absl::Time stop_deadline_ = absl::InfiniteFuture();   // when to stop waiting for the chief
  absl::Time first_failure_ = absl::InfiniteFuture();   // when a task first exited with an error
  absl::Time commands_ended_ = absl::InfiniteFuture();  // when every worker command had exited 0
};

}  // namespace

int Launch(const LaunchOptions& options) { return Cluster(options).Run(); }

}  // namespace pstrain
