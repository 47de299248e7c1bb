// Internal to src/master: the chief's job loop (RunJob, master/master.h), in four files:
// job.cc (the run from start to end), job_workers.cc (starting workers, waiting for them,
// summing their reports and the PS counters), job_programs.cc (the parameters client programs
// create, restored from a checkpoint) and job_recovery.cc (generations: Reset and
// Configure of every PS, the parameters created or restored, rollbacks, the final check of the
// task watermarks; docs/recovery.md).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/rpc.h"
#include "master/checkpoints.h"
#include "master/coordinator.h"
#include "master/job_status.h"
#include "master/master.h"
#include "master/model_job.h"
#include "master/tables.h"
#include "master/variables.h"
#include "ps.grpc.pb.h"
#include "worker.grpc.pb.h"

namespace pstrain {

// Calls `rpc` with a fresh context until it succeeds, fails for good, or `timeout` has passed:
// for calls to a peer that may not be ready yet, and that are safe to repeat.
template <typename Rpc>
absl::Status CallWithRetry(absl::Duration timeout, const std::string& what, const std::string& task,
                           Rpc rpc) {
  const absl::Time deadline = absl::Now() + timeout;
  return RetryUntil(timeout, absl::StrCat(what, " at ", task), [&] {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(deadline));
    return FromGrpcStatus(rpc(&ctx), what, task);
  });
}

// As CallWithRetry, also retrying PermissionDenied for a while: a task that registered with
// this (restarted) chief may not have read its answer yet, and then still obeys the old chief.
template <typename Rpc>
absl::Status CallAsNewChief(absl::Duration timeout, const std::string& what,
                            const std::string& task, Rpc rpc) {
  constexpr absl::Duration kLearnChief = absl::Seconds(10), kLongestPause = absl::Milliseconds(500);
  const absl::Time end = absl::Now() + std::min(timeout, kLearnChief);
  for (absl::Duration pause = absl::Milliseconds(20);; pause = std::min(2 * pause, kLongestPause)) {
    absl::Status s = CallWithRetry(timeout, what, task, rpc);
    if (!absl::IsPermissionDenied(s) || absl::Now() + pause > end) return s;
    absl::SleepFor(pause);
  }
}

// Cancelled("stopped by <reason>"): the job was stopped (RequestJobStop, Coordinator::Abort).
absl::Status Stopped(const std::string& reason);

// What a checkpoint's watermarks say when the job cannot use its ledger: nothing. Tasks then
// start afresh, and no push of theirs may count as a duplicate of the checkpoint's.
void DropWatermarks(LoadedCheckpoint* ckpt);

// "" if every shard and table of `applied` (one AppliedTasks answer per PS) has applied every
// batch of every task of `shape` with `batch` rows per batch, once; else the first that has
// not, by PS, shard or table, epoch and task. `shards` and `tables`: how many of each the job
// created (tables per PS). `batches_of(epoch, task)`, if set, is how many batches a task has
// (the steps its worker reported: fewer when records gave no example); else all its rows'.
std::string CheckWatermarks(
    const std::vector<AppliedTasksResponse>& applied, const LedgerShape& shape, int batch,
    int64_t shards, int64_t tables,
    const std::function<int64_t(int epoch, int64_t task)>& batches_of = nullptr);

class Job {
 public:
  Job(const MasterOptions& options, Coordinator* coordinator, ModelJob* model_job,
      VariablePlacer* placer, TableCreator* tables, StatusTracker* status);

  absl::StatusOr<JobResult> Run();
  // Best effort: every task is told to stop, in parallel, each with a short deadline.
  void ShutdownTasks(const std::string& reason, bool job_succeeded);
  // Checkpoints (master/checkpoints.h): saved through `manager`, the job started from `restore`
  // (its watermarks dropped if its ledger does not fit the job).
  void SetCheckpoints(CheckpointManager* manager, LoadedCheckpoint* restore) {
    checkpoints_ = manager;
    restore_ = restore;
  }

 private:
  // The chief as sender of this generation's requests.
  Sender Chief() const;
  // After the workers: the final checkpoint, the PS's counters, the ledger's totals and the
  // evaluation into *result.
  absl::Status Finish(absl::Time start, JobResult* result);
  // With recovery, a job's end that failed as a restarted PS makes it fail: the reason to roll
  // back once that PS registers (waited for up to --task_timeout); else none.
  std::optional<std::string> FinalRollback(const absl::Status& finished);
  bool Recovery() const { return task_rows_ > 0; }

  // ---- job_recovery.cc ----
  // The task queue and recovery, with task rows (config_.TaskRows).
  absl::Status EnableTasks();
  // Starts the next generation on `ckpt`'s ledger (null: a fresh one; a ledger of another
  // shape is warned of and replaced by a fresh one, the checkpoint's watermarks dropped).
  absl::Status BeginGeneration(LoadedCheckpoint* ckpt);
  // Reset (with recovery; each PS retried within `timeout`) and Configure every PS for this
  // generation.
  absl::Status ResetPs(absl::Duration timeout);
  absl::Status ConfigurePs();
  // The built-in model's parameters, from `ckpt` (null: their initial values); the placer and
  // table creator forget what they created before; the checkpoint manager learns the placement.
  absl::Status CreateModel(const LoadedCheckpoint* ckpt);
  // A restarted PS (or sync/ssp worker): every PS back, a new generation from the latest
  // checkpoint, every worker started on it.
  absl::Status Rollback(const std::string& reason, std::vector<absl::Time>* alive);
  absl::Status WaitForPs(absl::Duration timeout);
  // The latest valid checkpoint of --checkpoint_dir, else the one the job started from, else
  // null (initial values).
  absl::StatusOr<LoadedCheckpoint*> LatestCheckpoint();
  // Design item 8: every PS's AppliedTasks against the ledger's shape; "" if all hold.
  absl::StatusOr<std::string> CheckApplied();
  LedgerShape Shape() const;
  void LedgerTotals(JobResult* result);

  // ---- job_programs.cc ----
  // CreateVariable and CreateTable of client programs: the parameter restored from restore_ if
  // it holds one of that name, else created afresh; either way saved by the checkpoints from
  // then on.
  absl::StatusOr<Placement> Create(const VariableSpec& spec) ABSL_LOCKS_EXCLUDED(create_mu_);
  absl::Status CreateTable(const TableDef& def) ABSL_LOCKS_EXCLUDED(create_mu_);
  // Once: one warning listing what restore_ holds that no program created (it is in no later
  // checkpoint).
  void WarnNotCreated() ABSL_LOCKS_EXCLUDED(create_mu_);
  // After a rollback: every parameter the programs created, in their order, again from `ckpt`
  // (null: from their initializers), so that each lands where the programs know it is.
  absl::Status RecreateProgramParameters(const LoadedCheckpoint* ckpt)
      ABSL_LOCKS_EXCLUDED(create_mu_);
  absl::StatusOr<Placement> CreateVariableLocked(const VariableSpec& spec)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(create_mu_);
  absl::Status CreateTableLocked(const TableDef& def) ABSL_EXCLUSIVE_LOCKS_REQUIRED(create_mu_);

  // ---- job_workers.cc ----
  // The job's length in global steps.
  int64_t GlobalSteps() const;
  int64_t SyncSteps() const;
  void SetScheduleLength();
  void WarnIfUnbalanced();
  // Async task queue: a worker declared dead is not waited for; one registered by a new
  // incarnation is announced to every PS in place of the old one and started.
  absl::Status StartReplacements(std::vector<absl::Time>* alive, absl::Time now);
  // Starts every live worker on this generation; *bad_lines_skipped sums the lines they skipped.
  absl::Status StartWorkers(int64_t* bad_lines_skipped);
  absl::Status StartWorker(size_t t, StartTrainingResponse* resp);
  // Saves a checkpoint if the schedule says one is due at the step `progress` adds up to.
  void KeepCheckpointSchedule(const std::vector<WorkerProgress>& progress);
  // Until every worker is done (the ledger finished, with the task queue); a worker is counted
  // as heard from at `alive_since` (the start, or the end of a rollback).
  absl::Status WaitForWorkers(absl::Time start, absl::Time alive_since, JobResult* result);
  // Client programs: once every task is applied, a checkpoint of it before any program hears
  // that the tasks are finished (Coordinator::HoldFinishedUntilSaved).
  void SaveFinishedLedger();
  int finished_save_failures_ = 0;  // in a row, by SaveFinishedLedger
  bool TasksDone(const std::vector<WorkerProgress>& progress) const;
  absl::Status CheckLedgerMoves(const std::vector<WorkerProgress>& progress, absl::Time now,
                                absl::Time* done_since) const;
  bool Summarize(const std::vector<WorkerProgress>& progress, JobResult* result) const;
  absl::Status CollectStats(JobResult* result);
  absl::Status Evaluate(JobResult* result);

  JobConfig config_;  // a copy: Run fills in what the flags left to the job
  Coordinator* const coordinator_;
  ModelJob* const model_job_;  // null for external programs
  VariablePlacer* const placer_;
  TableCreator* const tables_;
  StatusTracker* const status_;
  const std::function<void(const std::string&)> print_progress_;
  const std::vector<std::string> ps_addresses_;
  std::vector<std::unique_ptr<ParameterServerService::Stub>> ps_;
  std::vector<std::unique_ptr<WorkerService::Stub>> workers_;
  CheckpointManager* checkpoints_ = nullptr;
  LoadedCheckpoint* restore_ = nullptr;
  std::unique_ptr<LoadedCheckpoint> latest_;  // the checkpoint of the last rollback
  int64_t task_rows_ = 0;                     // 0: no task queue, no recovery
  uint64_t generation_ = 0;                   // 0: no recovery
  uint64_t ps_generation_ = 0;                // the highest generation a PS ran before a Reset
  TrainingSpec spec_;                         // what StartWorkers sent, for replacements
  std::vector<uint64_t> started_;           // by worker: the incarnation started on spec_ (0: none)
  std::vector<Sender> configured_workers_;  // the workers the last ConfigurePs told every PS of
  // Client programs' parameters: one created (or restored) at a time, so that no program
  // reaches a restored one before its slots and version are in.
  absl::Mutex create_mu_;
  std::set<std::string> program_variables_ ABSL_GUARDED_BY(create_mu_);
  std::set<std::string> program_tables_ ABSL_GUARDED_BY(create_mu_);
  std::vector<VariableSpec> program_specs_ ABSL_GUARDED_BY(create_mu_);  // in creation order
  std::vector<TableDef> program_table_defs_ ABSL_GUARDED_BY(create_mu_);
  // Where a parameter a program creates comes from: restore_, or the checkpoint of the last
  // rollback.
  const LoadedCheckpoint* source_ ABSL_GUARDED_BY(create_mu_) = nullptr;
  bool warned_not_created_ ABSL_GUARDED_BY(create_mu_) = false;
};

}  // namespace pstrain
