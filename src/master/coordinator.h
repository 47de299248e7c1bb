// Internal to src/master: the chief's view of the cluster (who registered, with which
// incarnation, how far each worker got, who waits at which barrier) and the MasterService that
// feeds it.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "master.grpc.pb.h"
#include "master/task_ledger.h"
#include "nlohmann/json.hpp"

namespace pstrain {

struct WorkerProgress {
  int epoch = 0;
  int64_t nonfinite_skipped = 0;
  int64_t stale_dropped = 0;
  int64_t steps = 0;
  int64_t examples = 0;
  double loss = 0;
  bool has_loss = false;  // a client program may push without a loss
  bool done = false;
  std::string error;
  absl::Time last_report = absl::InfinitePast();
  std::string barrier;  // in snapshots: the barrier this worker waits at now ("" = none)
};

// Who is registered and when each task last sent the chief a message, for the status page.
struct ClusterView {
  std::vector<bool> ps_registered, workers_registered;
  // Register, Barrier, progress reports, CreateVariable, CreateTable; InfinitePast = never.
  std::vector<absl::Time> ps_seen, workers_seen;
  std::vector<WorkerProgress> progress;  // with the barrier each worker waits at
};

// One worker's call to Barrier, as the service sees it.
struct BarrierCall {
  // When the caller gives up; the arrival is then withdrawn and finished with DeadlineExceeded.
  absl::Time deadline = absl::InfiniteFuture();
  // True once the caller went away (the call was cancelled); the arrival is then withdrawn.
  // Empty = never. Called with the Coordinator's lock held, from any thread, until `done` runs.
  std::function<bool()> cancelled;
  // Called exactly once, without the Coordinator's lock, inline or from another thread.
  std::function<void(absl::Status)> done;
};

// Thread-safe. Filled by MasterService handlers, read by the job loop. Every method that takes a
// request checks its sender first: a missing sender or an over-long field is InvalidArgument, a
// job that may not call the method PermissionDenied, and a worker that is not registered, or
// registered by another process (a different incarnation), FailedPrecondition; a refused
// request changes nothing.
class Coordinator {
 public:
  // `ps_addresses` by task, told to registering tasks. Starts the thread that withdraws barrier
  // arrivals whose caller gave up (every `sweep_interval`).
  Coordinator(std::vector<std::string> ps_addresses, int num_workers,
              absl::Duration sweep_interval = absl::Milliseconds(200));
  // Finishes every pending barrier arrival with Cancelled and stops the sweep thread.
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // Registers a ps or worker task and answers with the job's mode, the chief's incarnation and
  // every PS address. The same task again with the same incarnation is a harmless retry (tasks
  // re-register every second to find a restarted chief); with another incarnation it is
  // FailedPrecondition (this job does not accept restarted tasks), except, once the task queue
  // is on, for a worker whose old incarnation was declared dead, and with recovery on (below).
  absl::Status Register(const RegisterRequest& req, RegisterResponse* resp);
  // The workers as they registered (with their incarnations), by task.
  std::vector<Sender> Workers() const;
  // The job's consistency mode, told to registering tasks.
  void SetMode(const std::string& mode);
  // Opens the "pstrain/start" barrier: the PS are configured.
  void SetReady();

  // A barrier releases once every worker has either arrived or reported done (and, for
  // "pstrain/start", the cluster is ready). An arrival whose call's deadline passed or that was
  // cancelled is withdrawn (it no longer counts) and finished with DeadlineExceeded naming the
  // workers that had not arrived and what they are doing. A barrier with no arrivals left is
  // freed. A second arrival of the same worker replaces its first (finished with Aborted).
  // Refused: a bad sender (see above), an empty name or one over kMaxNameBytes
  // (InvalidArgument), a new barrier while kMaxOpenBarriers are open (ResourceExhausted), or a
  // job that is ending (Cancelled).
  void Barrier(const BarrierRequest& req, BarrierCall call);
  // Barriers with at least one arrival waiting.
  int OpenBarriers() const;

  // Serves CreateVariable for client programs; unset = FailedPrecondition.
  using CreateVariableFn = std::function<absl::StatusOr<Placement>(const VariableSpec&)>;
  void SetCreateVariable(CreateVariableFn fn);
  absl::Status CreateVariable(const CreateVariableRequest& req, CreateVariableResponse* resp);
  // Serves CreateTable for client programs (get-or-create of req.table on every PS, e.g.
  // TableCreator::GetOrCreate); unset = FailedPrecondition.
  using CreateTableFn = std::function<absl::Status(const TableDef&)>;
  void SetCreateTable(CreateTableFn fn);
  absl::Status CreateTable(const CreateTableRequest& req, CreateTableResponse* resp);
  // Records a worker's report; a report that is refused is not counted (so its error cannot end
  // the job). A report of done re-checks the open barriers. Sets *stop when the job is ending.
  absl::Status Report(const ProgressRequest& req, bool* stop);

  // The seed a task's order of rows is drawn from (TaskAssignment.seed): a mix of `job_seed`,
  // the epoch and the task.
  void SetTaskSeed(uint64_t job_seed) ABSL_LOCKS_EXCLUDED(mu_);
  // The job told every PS of these workers' incarnations (Configure, ReplaceWorker): until then
  // NextTask answers a new incarnation WAIT, since the PS would refuse its pushes (before the
  // first call, as in tests of the Coordinator alone, nothing is waited for). BeginGeneration
  // forgets them: the job announces the workers again once the new generation's parameters are
  // in place, and from then on heartbeats tell a rollback's generation (0 before).
  void AnnounceWorkers(const std::vector<Sender>& workers) ABSL_LOCKS_EXCLUDED(mu_);
  // Client programs: once every task is applied, NextTask answers WAIT rather than FINISHED
  // until FinishedSaved (a checkpoint holding the finished ledger is written), so that a
  // program past its task loop never has to train again, whatever restarts after
  // (docs/recovery.md, "Client programs"). Each generation needs its own save.
  void HoldFinishedUntilSaved() ABSL_LOCKS_EXCLUDED(mu_);
  bool FinishedHeld() const ABSL_LOCKS_EXCLUDED(mu_);
  void FinishedSaved() ABSL_LOCKS_EXCLUDED(mu_);
  // With the task queue: waits up to `timeout` until every worker that reported done has been
  // answered that the job stops (client programs wait for it in Client::Done).
  void WaitUntilToldStop(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);

  // Turns on the task queue (master/task_ledger.h) over the workers registered so far: from then
  // on workers take tasks (NextTask, TaskDone), every worker call counts as a heartbeat, and
  // the sweep declares dead a worker silent past `heartbeat_timeout`. Registering workers are
  // told `heartbeat_interval`. InvalidArgument for a bad shape; FailedPrecondition if on already.
  absl::Status EnableTasks(const LedgerShape& shape, absl::Duration heartbeat_interval,
                           absl::Duration heartbeat_timeout);
  // Without the task queue: FailedPrecondition. Otherwise the sender is checked as above and by
  // the ledger (a declared-dead incarnation is FailedPrecondition "... declared dead at ..."),
  // and, once generations run (BeginGeneration), its generation: another one (0 = none given)
  // is FailedPrecondition "... generation G was rolled back; the chief runs generation H".
  absl::Status NextTask(const NextTaskRequest& req, NextTaskResponse* resp);
  absl::Status TaskDone(const TaskDoneRequest& req);
  // Answered with the chief's generation (of any sender's generation) and whether the job is
  // ending. A worker incarnation the chief does not know (a restarted chief; not registered,
  // not declared dead) is answered OK with register_again; a declared-dead one is refused as
  // above. Without the task queue (a chief still starting) a registered worker is answered too.
  absl::Status Heartbeat(const HeartbeatRequest& req, HeartbeatResponse* resp);
  // The ledger's JSON (TaskLedger::ToJson); null without the task queue.
  nlohmann::json LedgerJson() const;
  // "" once every task of every epoch was applied exactly once, else what was not; without the
  // task queue, says so.
  std::string LedgerCheck() const;
  bool TasksFinished() const;
  // By worker task: registered and, with the task queue, not declared dead since.
  std::vector<bool> LiveWorkers() const;

  // ---- Recovery (docs/recovery.md), with the task queue; master/coordinator_recovery.cc ----
  // From now on a PS registering with a new incarnation (a restarted process) is accepted and
  // asks for a rollback; so does, in sync and ssp modes, a worker's new incarnation (in async
  // mode a worker is replaced in place, as above).
  void EnableRecovery();
  // Why a rollback is needed ("ps:1 restarted (incarnation 123)"), or nullopt.
  std::optional<std::string> RollbackReason() const;
  // Starts the next generation (the first call starts generation 1; every later one counts a
  // rollback): clears the rollback reason, replaces the ledger by `ledger` (a checkpoint's
  // TaskLedger::ToJson; null = a fresh ledger of the EnableTasks shape) keeping the workers'
  // registrations (every task in flight is pending again; the workers' reports of done are
  // forgotten: they train again), and from then on refuses NextTask and TaskDone of another
  // generation (FailedPrecondition "... generation G was rolled back; the chief runs H").
  // Heartbeat of another generation is answered with the current one. FailedPrecondition
  // without the task queue; InvalidArgument for a ledger of another shape (nothing changes).
  // The failures of the first generation's ledger (a restarted chief's checkpoint) are carried
  // on; a later rollback's checkpoint holds older counts, so those are not taken.
  // The new generation is above `above` too (the generations the PS ran for a chief before).
  absl::StatusOr<uint64_t> BeginGeneration(const nlohmann::json& ledger, uint64_t above = 0);
  uint64_t generation() const;
  // The PS as registered (with their incarnations), by task.
  std::vector<Sender> PsTasks() const;
  // Failures survived so far; kept in the ledger's JSON, so a restarted chief carries them on.
  struct Failures {
    int64_t workers_replaced = 0;  // in place (async)
    int64_t rollbacks = 0;         // to a checkpoint (a PS, or in sync/ssp a worker, restarted)
    int64_t chief_restarts = 0;    // resumed from a checkpoint by a restarted chief
  };
  Failures failures() const;
  // This chief resumed a job whose chief died (counted once, however often it is called; before
  // or after BeginGeneration).
  void CountChiefRestart();
  // The job's result is made (trained, checkpointed, evaluated): a PS or worker that restarts
  // from now on is counted as a restart after the end and rolls nothing back.
  void EndJob();
  int64_t restarts_after_end() const;

  // Waits until every PS and worker registered. DeadlineExceeded lists the missing tasks;
  // Cancelled if Abort was called.
  absl::Status WaitForRegistration(absl::Duration timeout);
  // Waits up to `timeout` for the next report (or for Abort). Returns a snapshot.
  std::vector<WorkerProgress> WaitForReport(absl::Duration timeout);
  ClusterView View() const;
  // Tells workers to stop at their next report and finishes every barrier arrival (Cancelled).
  void RequestStop();
  // Ends the waits above early; the job loop then stops with `reason`. The first reason wins.
  void Abort(const std::string& reason);
  std::optional<std::string> AbortReason() const;

 private:
  using Finished = std::vector<std::pair<std::function<void(absl::Status)>, absl::Status>>;
  struct BarrierState {
    std::map<int, BarrierCall> arrivals;  // by worker task
  };

  // OK if `s` names a registered worker with its registered incarnation (and, with the task
  // queue, one not declared dead); `what` names the call. CheckAndSee also records the call as
  // the worker's heartbeat.
  absl::Status CheckAndSee(const Sender& s, const std::string& what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckWorker(const Sender& s, const std::string& what) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Moves the arrivals of every barrier that may release into *out and frees those barriers.
  void ReleaseBarriers(Finished* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Withdraws the arrivals whose caller gave up, into *out.
  void Sweep(absl::Time now, Finished* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // "worker:1 (training, last progress 3s ago)" for every worker not at barrier `name`.
  std::string Missing(const std::string& name, absl::Time now) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void SweepLoop();
  std::vector<WorkerProgress> ProgressLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // OK unless `s` is not a worker or a worker task outside the cluster (both PermissionDenied).
  absl::Status CheckWorkerTask(const Sender& s, const std::string& what) const;
  // OK before the first generation or for a sender of the current one; `what` names the call.
  absl::Status CheckGeneration(const Sender& s, const std::string& what) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // NextTask or TaskDone (`what`) without a task queue: FailedPrecondition; before the job is
  // ready, as one of another generation (a run of the chief before a restarted one).
  absl::Status NoTaskQueue(const Sender& s, const std::string& what) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Records why a rollback is needed (the first reason stands until BeginGeneration).
  void AskRollback(const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A task registered by `s`, a new incarnation of one registered by `old_incarnation`: a PS
  // or (sync, ssp with recovery) a worker asks for a rollback; else a worker replaced in place.
  void NoteRestart(const Sender& s, uint64_t old_incarnation) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Failures FailuresLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Writes FailuresLocked() into the ledger (its JSON carries them).
  void SyncFailures() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void Run(Finished& finished);

  const std::vector<std::string> ps_addresses_;
  const int num_ps_;
  const int num_workers_;
  const uint64_t chief_incarnation_;
  const absl::Duration sweep_interval_;
  mutable absl::Mutex mu_;
  std::vector<Sender> ps_ ABSL_GUARDED_BY(mu_);  // incarnation 0 = not registered
  std::vector<Sender> workers_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Time> ps_seen_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Time> workers_seen_ ABSL_GUARDED_BY(mu_);
  std::string mode_ ABSL_GUARDED_BY(mu_) = "async";
  bool ready_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, BarrierState> barriers_ ABSL_GUARDED_BY(mu_);
  CreateVariableFn create_variable_ ABSL_GUARDED_BY(mu_);
  CreateTableFn create_table_ ABSL_GUARDED_BY(mu_);
  std::vector<WorkerProgress> progress_ ABSL_GUARDED_BY(mu_);
  int64_t reports_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<std::string> abort_ ABSL_GUARDED_BY(mu_);
  std::optional<TaskLedger> ledger_ ABSL_GUARDED_BY(mu_);  // set by EnableTasks
  uint64_t task_seed_ ABSL_GUARDED_BY(mu_) = 0;
  bool start_released_ ABSL_GUARDED_BY(mu_) = false;      // the start barrier let every worker in
  std::vector<uint64_t> announced_ ABSL_GUARDED_BY(mu_);  // by worker: the PS know it
  // Heartbeats tell the generation (else 0): from a rollback's BeginGeneration to the
  // AnnounceWorkers that follows its parameters' restore, they do not.
  bool generation_open_ ABSL_GUARDED_BY(mu_) = true;
  bool hold_finished_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_saved_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<bool> told_stop_ ABSL_GUARDED_BY(mu_);  // by worker
  absl::Duration heartbeat_interval_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  absl::Duration ledger_timeout_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  LedgerShape shape_ ABSL_GUARDED_BY(mu_);  // of EnableTasks
  bool recovery_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;  // 0 = generations not started
  std::optional<std::string> rollback_reason_ ABSL_GUARDED_BY(mu_);
  Failures carried_ ABSL_GUARDED_BY(mu_);  // from the first generation's ledger
  Failures counted_ ABSL_GUARDED_BY(mu_);  // by this chief
  bool chief_restart_counted_ ABSL_GUARDED_BY(mu_) = false;
  bool job_ended_ ABSL_GUARDED_BY(mu_) = false;
  int64_t restarts_after_end_ ABSL_GUARDED_BY(mu_) = 0;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  std::thread sweeper_;  // last: started once everything above is constructed
};

// InvalidArgument unless the request names a sender (has_sender) with a job of sane length;
// `what` names the call.
absl::Status CheckSenderPresent(bool has_sender, const Sender& s, const std::string& what);

// gRPC MasterService (callback API) over a Coordinator that must outlive it.
std::unique_ptr<grpc::Service> MakeMasterService(Coordinator* coordinator);

}  // namespace pstrain
