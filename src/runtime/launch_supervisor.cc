#include "runtime/launch_supervisor.h"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "runtime/launch_logs.h"

namespace pstrain {
namespace {

// The lines of a failed task's log that its error shows.
constexpr int kTailLines = 10;

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? absl::StrCat("SIG", abbrev) : absl::StrCat("signal ", sig);
}

}  // namespace

std::string HowItEnded(const Child& c) {
  if (WIFEXITED(c.status)) return absl::StrCat("exited with status ", WEXITSTATUS(c.status));
  if (WIFSIGNALED(c.status)) return absl::StrCat("killed by ", SignalName(WTERMSIG(c.status)));
  return "stopped";
}

std::string Describe(const Child& c) {
  if (WIFSIGNALED(c.status)) {
    const int sig = WTERMSIG(c.status);
    return absl::StrCat(c.name, " was killed by signal ", sig, " (", SignalName(sig), ")");
  }
  return absl::StrCat(c.name, " ", HowItEnded(c));
}

bool Failed(const Child& c) { return c.exited && c.status != 0; }

std::string Times(int n) { return n == 1 ? "once" : absl::StrCat(n, " times"); }

void Supervisor::Reap() {
  int status = 0;
  for (pid_t pid; (pid = waitpid(-1, &status, WNOHANG)) > 0;) {
    for (size_t i = 0; i < children_.size(); ++i) {
      if (children_[i].pid != pid || children_[i].exited) continue;
      children_[i].exited = true;
      children_[i].status = status;
      exit_order_.push_back(i);
    }
  }
}

bool Supervisor::Ended(const Child& c) { return c.exited && (!c.command || kill(-c.pid, 0) != 0); }

void Supervisor::StopAll(absl::Duration grace, bool commands_only) {
  Disable();
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
  auto signal_all = [this](int sig, bool tasks_only) {
    for (Child& c : children_) {
      if (Ended(c) || (tasks_only && c.command)) continue;
      kill(-c.pid, sig);
      c.stopped = c.stopped || !c.exited;
    }
  };
  if (commands_only) signal_all(SIGTERM, true);
  wait_all(grace, true);
  if (wait_all(absl::ZeroDuration(), false)) return;
  signal_all(SIGTERM, false);
  if (wait_all(absl::Seconds(2), false)) return;
  signal_all(SIGKILL, false);
  wait_all(absl::Seconds(5), false);
}

Supervisor::Verdict Supervisor::OnDeath(size_t i) {
  const Child& c = children_[i];
  // A worker command is the user's program: it rejoins a job that hands out tasks (it takes
  // them again), else that is its own affair. A chief that exited by itself with an error has
  // ended the job and said why.
  if (!policy_.enabled || (c.command && !policy_.recovery) || (i == 0 && WIFEXITED(c.status))) {
    return Verdict::kOff;
  }
  if (!policy_.recovery) return Verdict::kNoRecovery;
  if (c.restarts >= policy_.max_restarts) return Verdict::kExhausted;
  if (!Pending(i)) pending_.push_back({i, absl::Now() + kBackoff});
  return Verdict::kRestart;
}

std::vector<size_t> Supervisor::Due() {
  std::vector<size_t> due;
  const absl::Time now = absl::Now();
  for (auto p = pending_.begin(); p != pending_.end();) {
    if (p->due <= now) {
      due.push_back(p->child);
      p = pending_.erase(p);
    } else {
      ++p;
    }
  }
  return due;
}

bool Supervisor::Pending(size_t i) const {
  return std::any_of(pending_.begin(), pending_.end(),
                     [i](const PendingRestart& p) { return p.child == i; });
}

void Supervisor::Disable() {
  policy_.enabled = false;
  pending_.clear();
}

void Supervisor::CountRestart(size_t i) {
  ++children_[i].restarts;
  ++total_restarts_;
}

std::string Supervisor::RestartSummary() const {
  std::vector<std::string> parts;
  for (const Child& c : children_) {
    if (c.restarts == 0) continue;
    parts.push_back(absl::StrCat(c.name, " ", Times(c.restarts)));
  }
  return absl::StrCat(total_restarts_, total_restarts_ == 1 ? " restart" : " restarts",
                      parts.empty() ? "" : " (", absl::StrJoin(parts, ", "),
                      parts.empty() ? "" : ")");
}

void LaunchError(const std::string& message) {
  std::fprintf(stderr, "pstrain launch: error: %s\n", message.c_str());
}

void ReportFailure(const Child& c, const std::string& more) {
  std::string message = Describe(c);
  if (!c.log.empty()) absl::StrAppend(&message, " (log: ", c.log, ")");
  LaunchError(message + more);
  if (!c.log.empty()) {
    const std::vector<std::string> tail = LastLines(c.log, kTailLines);
    if (!tail.empty())
      std::fprintf(stderr, "pstrain launch: the end of %s's log:\n", c.name.c_str());
    for (const std::string& line : tail) std::fprintf(stderr, "    %s\n", line.c_str());
  }
  std::fflush(stderr);
}

void ShowCommandResults(const std::vector<Child>& children) {
  for (const Child& c : children) {
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

int ExitCodeOf(const Child& c) {
  if (!c.command) return 1;
  return WIFEXITED(c.status) ? WEXITSTATUS(c.status) : 128 + WTERMSIG(c.status);
}

namespace {

// `flags` without those named in `drop` (each "--flag value" or "--flag=value", and a bare
// --restarted); the last --restore_from or --resume dropped, with its value, in `*kept`.
std::vector<std::string> Without(const std::vector<std::string>& flags,
                                 const std::vector<std::string>& drop,
                                 std::pair<std::string, std::string>* kept) {
  std::vector<std::string> out;
  for (size_t i = 0; i < flags.size(); ++i) {
    const size_t eq = flags[i].find('=');
    const std::string name = flags[i].substr(0, eq);
    if (std::find(drop.begin(), drop.end(), name) == drop.end()) {
      out.push_back(flags[i]);
      continue;
    }
    if (name == "--restarted") continue;
    std::string value;
    if (eq != std::string::npos) {
      value = flags[i].substr(eq + 1);
    } else if (i + 1 < flags.size()) {
      value = flags[++i];  // "--flag value": its value too
    }
    if (name == "--restore_from" || name == "--resume") *kept = {name, value};
  }
  return out;
}

}  // namespace

ChiefRestart RestartedChief(const std::vector<std::string>& flags,
                            const std::string& checkpoint_dir, bool saved_by_this_job) {
  std::pair<std::string, std::string> restore;  // the user's --restore_from or --resume
  ChiefRestart r;
  if (saved_by_this_job) {
    r.flags =
        Without(flags, {"--checkpoint_dir", "--restore_from", "--resume", "--restarted"}, &restore);
    r.flags.insert(r.flags.end(), {"--restarted", "--checkpoint_dir", checkpoint_dir,
                                   "--restore_from", checkpoint_dir});
    r.from = checkpoint_dir;
    return r;
  }
  // As the first chief: its own flags (--checkpoint_dir included), --restarted where they ask
  // for a restore (a chief needs one to count its restart in).
  r.flags = Without(flags, {"--restarted"}, &restore);
  Without(flags, {"--restore_from", "--resume"}, &restore);
  if (restore.first.empty()) {
    r.from = "scratch, as the first chief did (this job saved no checkpoint yet)";
    return r;
  }
  r.flags.push_back("--restarted");
  r.from = absl::StrCat(restore.first, " ", restore.second,
                        ", as the first chief did (this job saved no checkpoint yet)");
  return r;
}

}  // namespace pstrain
