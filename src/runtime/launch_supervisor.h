// Internal to src/runtime: the task processes of `pstrain launch`, how they are collected and
// stopped, and when one that died is restarted.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace pstrain {

// One task process.
struct Child {
  std::string name;  // "ps:0"
  pid_t pid = -1;
  bool command = false;  // runs the worker command, whose process group may hold more processes
  std::string log;       // its log file, or ""
  std::vector<std::string> argv;  // what it runs, and its environment, to start it again
  std::vector<std::string> env;
  bool exited = false;
  int status = 0;
  bool stopped = false;  // signalled by the launcher while it ran
  int restarts = 0;      // how many times it was started again
};

// "ps:1 exited with status 1", "ps:1 was killed by SIGKILL".
std::string Describe(const Child& c);
// "exited with status 1", "killed by SIGKILL".
std::string HowItEnded(const Child& c);
bool Failed(const Child& c);
// "once", "3 times".
std::string Times(int n);

// "pstrain launch: error: `message`" on stderr.
void LaunchError(const std::string& message);
// Says that `c` failed (then `more`), with the end of its log.
void ReportFailure(const Child& c, const std::string& more);
// After a job whose commands all succeeded: the last JSON object each command printed (its
// result, by the convention of the examples), since their output went only to their logs.
void ShowCommandResults(const std::vector<Child>& children);
// The launch's exit code when failed task `c` decides it: a worker command's own status (128 + a
// signal's number), else 1.
int ExitCodeOf(const Child& c);

// When a task that died is started again (--restart_failed, --max_restarts).
struct RestartPolicy {
  bool enabled = true;
  int max_restarts = 5;  // per task
  bool recovery = true;  // the chief runs the task queue, so it takes restarted tasks back
};

// The children of the launcher, the chief first, and their restarts.
class Supervisor {
 public:
  static constexpr absl::Duration kBackoff = absl::Milliseconds(500);

  explicit Supervisor(RestartPolicy policy) : policy_(policy) {}

  std::vector<Child>& children() { return children_; }
  const std::vector<Child>& children() const { return children_; }
  const Child& chief() const { return children_.front(); }
  // Indices into children(), in the order they exited (a restarted task may appear again).
  const std::vector<size_t>& exit_order() const { return exit_order_; }

  // Collects every child that exited, and any process a command left that was handed to the
  // launcher (PR_SET_CHILD_SUBREAPER).
  void Reap();
  // Whether `c` and, for a command, every process in its group have ended.
  static bool Ended(const Child& c);
  // Waits up to `grace` for the children to exit by themselves, then sends SIGTERM, then SIGKILL
  // to the process group of each that has not ended. What a command left running when it exited
  // gets no grace. With `commands_only`, pstrain's own tasks get no grace either (a chief that
  // failed never tells them to end): only the user's commands may end by themselves.
  void StopAll(absl::Duration grace, bool commands_only = false);

  // What becomes of task `i`, which died while the job runs.
  enum class Verdict {
    kRestart,     // started again after kBackoff (see Due)
    kOff,         // restarts are off, or the task is not one launch restarts: as without them
    kNoRecovery,  // the job has no recovery (--task_rows 0)
    kExhausted,   // it was restarted --max_restarts times already
  };
  Verdict OnDeath(size_t i);
  // The tasks whose restart is due, taken off the list.
  std::vector<size_t> Due();
  bool Pending(size_t i) const;
  bool AnyPending() const { return !pending_.empty(); }
  // No restart from now on (the job is being stopped); drops the pending ones.
  void Disable();
  int total_restarts() const { return total_restarts_; }
  void CountRestart(size_t i);
  // "worker:1 restarted 2 times, chief:0 once".
  std::string RestartSummary() const;
  const RestartPolicy& policy() const { return policy_; }

 private:
  struct PendingRestart {
    size_t child;
    absl::Time due;
  };
  RestartPolicy policy_;
  std::vector<Child> children_;
  std::vector<size_t> exit_order_;
  std::vector<PendingRestart> pending_;
  int total_restarts_ = 0;
};

// How the launcher restarts a chief that was killed: its flags, and where it starts from (for
// the launcher's message). The rule (docs/recovery.md): once this job saved a checkpoint in the
// launcher's checkpoint directory (`saved_by_this_job`), the chief resumes from that directory
// (--restarted --checkpoint_dir DIR --restore_from DIR: failing, never starting from scratch, if
// no checkpoint there can be read). Before that it starts as the first chief did, from the
// user's own --restore_from or --resume (with --restarted), or from scratch if `flags` ask for
// no restore: it is never pointed at a directory that holds no checkpoint of this job.
struct ChiefRestart {
  std::vector<std::string> flags;
  std::string from;  // DIR, or "--restore_from X, as the first chief did (...)", or "scratch, ..."
};
ChiefRestart RestartedChief(const std::vector<std::string>& flags,
                            const std::string& checkpoint_dir, bool saved_by_this_job);

}  // namespace pstrain
