// Internal to src/master: the chief's task queue and ledger (docs/recovery.md). Each epoch's
// training records are cut into tasks of `task_rows` rows; workers take the next task, report it
// done, and heartbeat; a worker silent past the deadline is declared dead and its task goes back
// to the queue. The ledger says which task of which epoch was handed to whom and applied.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace pstrain {

struct LedgerShape {
  int64_t rows = 0;       // training records per epoch
  int64_t task_rows = 0;  // rows per task (the last task of an epoch may have fewer)
  int epochs = 0;
  int num_workers = 0;
};

// One task: rows [begin, end) of the training records, in epoch `epoch`.
struct TaskRef {
  int epoch = 0;
  int64_t id = 0;  // within the epoch, from 0
  int64_t begin = 0, end = 0;
};

// What NextTask answers.
struct NextTask {
  enum class Kind { kTask, kWait, kFinished } kind = Kind::kWait;
  TaskRef task;  // with kTask
};

// What a worker pushed for a task, as it reports it done.
struct TaskReport {
  int epoch = 0;
  int64_t id = 0;
  int64_t steps = 0;     // batches of the task it trained on
  int64_t examples = 0;  // rows of the task it trained on: all of them
};

// Failures a job survived (docs/recovery.md), kept in the ledger's JSON so that a restored
// ledger carries them on.
struct FailureCounts {
  int64_t workers_replaced = 0;  // in place (async)
  int64_t rollbacks = 0;         // to a checkpoint
  int64_t chief_restarts = 0;    // resumed by a restarted chief
};

// Not thread-safe: the Coordinator calls it under its lock. Every method taking a worker checks
// it: an unknown task index is InvalidArgument; an incarnation that is not the registered one is
// FailedPrecondition, saying "declared dead at ..." for one the ledger declared dead.
class TaskLedger {
 public:
  // InvalidArgument naming the bad field: no rows, task_rows < 1, epochs < 1, no workers, or
  // more than kMaxTasks tasks in all.
  static absl::StatusOr<TaskLedger> Create(const LedgerShape& shape,
                                           absl::Duration heartbeat_timeout);
  static constexpr int64_t kMaxTasks = 1 << 22;

  // OK if `incarnation` is the registered one of `worker`; refused as above otherwise.
  absl::Status Check(int worker, uint64_t incarnation, const char* what) const {
    return CheckLive(worker, incarnation, what);
  }
  // Registers `worker` with `incarnation` (non-zero) at `now`: the first time, again with the same
  // incarnation (a retry), or with a new one once the old one was declared dead (a restarted
  // process). Another incarnation while the old one lives is FailedPrecondition, unless
  // `replace_live`: a restarted process proves the old one dead, which is then declared dead at
  // `now` and its task requeued. A declared-dead incarnation registering again is
  // FailedPrecondition "declared dead at ...".
  absl::Status Register(int worker, uint64_t incarnation, absl::Time now,
                        bool replace_live = false);
  // Any message from a registered worker counts as a heartbeat.
  absl::Status Heartbeat(int worker, uint64_t incarnation, absl::Time now);
  // The worker's task: the one it holds already (a retry whose answer was lost), else the first
  // pending task of the earliest epoch (a dead worker's task first). kWait while tasks are in
  // the hands of others; kFinished once every task of every epoch is applied.
  absl::StatusOr<NextTask> Next(int worker, uint64_t incarnation, absl::Time now);
  // The worker finished the task it holds: it is applied. The same report again from the worker
  // that applied it is a harmless retry. Refused (FailedPrecondition, nothing changes): a task
  // the worker does not hold; InvalidArgument: an unknown epoch or task, counts that do not fit
  // the task (examples at most its rows: a header or a skipped bad line gives none; steps in [1,
  // examples], none without examples).
  absl::Status Done(int worker, uint64_t incarnation, const TaskReport& report, absl::Time now);
  // Declares dead every live worker silent since before `now - heartbeat_timeout` that has not
  // finished; their tasks go back to the front of the queue. Returns the workers declared dead,
  // each with the task it held (none between a task's report and the next one's handout).
  struct Death {
    int worker = 0;
    std::optional<TaskRef> requeued;
  };
  std::vector<Death> CheckDeadlines(absl::Time now);

  // Registered and not declared dead since.
  bool Alive(int worker) const { return workers_[worker].incarnation != 0; }
  // The worker's registered incarnation (0 = none), and whether `incarnation` was declared dead.
  uint64_t incarnation(int worker) const { return workers_[worker].incarnation; }
  bool DeclaredDead(int worker, uint64_t incarnation) const {
    return workers_[worker].dead.contains(incarnation);
  }
  // Takes over the workers of `from` (a ledger of the same number of workers): their registered
  // incarnations, seen at `now`, and the incarnations declared dead; each holds no task.
  void KeepWorkers(const TaskLedger& from, absl::Time now);
  const FailureCounts& failures() const { return failures_; }
  void set_failures(const FailureCounts& f) { failures_ = f; }
  bool Finished() const { return applied_ == total_tasks(); }
  int64_t tasks_per_epoch() const { return tasks_per_epoch_; }
  int64_t total_tasks() const { return tasks_per_epoch_ * shape_.epochs; }
  int64_t applied() const { return applied_; }
  // Tasks handed out again after their holder was declared dead.
  int64_t redone() const { return redone_; }
  int64_t deaths() const { return deaths_; }
  // "" if every task of every epoch was applied exactly once; else the first that was not.
  std::string CheckExactlyOnce() const;
  // The ledger: shape, totals, failures and per task its state, holder, hand-outs and applications.
  // An in-flight task is written as pending (a checkpoint's cut: it is redone after a restore).
  nlohmann::json ToJson() const;
  // A ledger from ToJson for a job of `shape`; InvalidArgument naming the first field that is
  // missing, malformed or differs from `shape` ("failures" may be missing: none). Workers start
  // unregistered.
  static absl::StatusOr<TaskLedger> FromJson(const nlohmann::json& j, const LedgerShape& shape,
                                             absl::Duration heartbeat_timeout);

 private:
  enum class State { kPending, kInFlight, kApplied };
  struct Task {
    State state = State::kPending;
    int holder = -1;           // worker holding or that applied it
    uint64_t incarnation = 0;  // of the holder
    int handouts = 0;
    int applications = 0;
    int64_t steps = 0, examples = 0;
  };
  struct WorkerState {
    uint64_t incarnation = 0;  // 0 = not registered
    absl::Time last_seen = absl::InfinitePast();
    int64_t holding = -1;  // index into tasks_, -1 = none
    int64_t tasks_done = 0;
    bool finished = false;  // was told kFinished: no longer watched
    struct Death {
      absl::Time at;
      std::string why;  // "silent for more than 10s"
    };
    std::map<uint64_t, Death> dead;  // declared-dead incarnations
  };

  TaskLedger(const LedgerShape& shape, absl::Duration timeout);
  absl::Status CheckLive(int worker, uint64_t incarnation, const char* what) const;
  TaskRef RefOf(int64_t index) const;
  // Both return the task the worker held, now back in the queue, if it held one.
  std::optional<TaskRef> Requeue(int worker);
  std::optional<TaskRef> DeclareDead(int worker, absl::Time now, std::string why);

  LedgerShape shape_;
  absl::Duration timeout_;
  int64_t tasks_per_epoch_ = 0;
  std::vector<Task> tasks_;       // epoch-major: epoch * tasks_per_epoch + id
  std::deque<int64_t> requeued_;  // tasks of dead workers, handed out first
  int64_t next_fresh_ = 0;        // tasks_ before it were handed out at least once
  std::vector<WorkerState> workers_;
  int64_t applied_ = 0, redone_ = 0, deaths_ = 0;
  FailureCounts failures_;
};

}  // namespace pstrain
