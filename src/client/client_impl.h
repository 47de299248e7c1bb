// Internal to src/client: the state behind a Client (client.h), shared by client.cc (the chief,
// tables, barriers) and client_dense.cc (the dense variables' pulls and pushes, also in flight).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "client/client.h"
#include "client/session.h"
#include "master.grpc.pb.h"

namespace pstrain {

class Client::Impl {
 public:
  Impl(const ClientOptions& options, std::unique_ptr<MasterService::Stub> master)
      : options_(options),
        chief_("chief " + options.chief),
        sender_(MakeSender("worker", options.task)),
        master_(std::move(master)) {}

  ~Impl();  // stops the heartbeats

  absl::Status Connect();
  absl::StatusOr<int> CreateVariable(const VariableOptions& v);
  absl::Status Pull(std::vector<const float*>* values);
  absl::Status Push(const std::vector<TensorView>& grads, int64_t examples,
                    std::optional<double> loss);
  PendingCall PullAsync(std::vector<const float*>* values);
  PendingCall PushAsync(const std::vector<TensorView>& grads, int64_t examples,
                        std::optional<double> loss);
  absl::StatusOr<int> CreateTable(const TableOptions& t);
  absl::Status Lookup(const std::vector<std::vector<uint64_t>>& keys,
                      std::vector<const float*>* rows);
  absl::Status PushSparse(const std::vector<std::vector<uint64_t>>& keys,
                          const std::vector<std::vector<float>>& grads, int64_t examples,
                          std::optional<double> loss);
  absl::Status Barrier(const std::string& name);
  absl::Status Done(const absl::Status& outcome);
  // The task queue (client_tasks.cc).
  absl::StatusOr<std::optional<Task>> NextTask(int64_t batch_size);
  absl::Status TaskDone();
  bool has_tasks() const { return heartbeat_interval_ > absl::ZeroDuration(); }
  bool task_abandoned() const { return abandoned_; }

  int64_t global_step() const { return global_step_; }
  int64_t pushes() const { return pushes_; }
  const std::string& mode() const { return mode_; }
  std::vector<std::string> data_plane() const;
  int num_ps() const { return static_cast<int>(ps_addresses_.size()); }
  int num_workers() const { return num_workers_; }

 private:
  // PullAsync and PushAsync; `blocking`: for Pull and Push, which wait for the call at once.
  PendingCall StartPull(std::vector<const float*>* values, bool blocking);
  PendingCall StartPush(const std::vector<TensorView>& grads, int64_t examples,
                        std::optional<double> loss, bool blocking);
  absl::Status CheckUsable() const;
  // FailedPrecondition naming `what` while a PullAsync or PushAsync is not yet waited for.
  absl::Status CheckIdle(const char* what) const;
  absl::Status WaitAtBarrier(const std::string& name);
  absl::Status Report(bool done, const std::string& error);
  // After a push of `kind`: counts the step (see Client::pushes), adds the examples and loss,
  // and reports progress every kReportEvery steps.
  enum class Pushed { kNone, kDense, kSparse, kPaired };
  absl::Status AfterPush(Pushed kind, int64_t examples, std::optional<double> loss);
  void RebuildPsClient();
  // After the start barrier: the chief's generation, and with a task queue the heartbeats.
  absl::Status JoinTasks();
  void SendHeartbeats() ABSL_LOCKS_EXCLUDED(heartbeat_mu_);
  void StopHeartbeats() ABSL_LOCKS_EXCLUDED(heartbeat_mu_);
  // The tag of a push of `kind` now: none in a job without tasks; FailedPrecondition outside a
  // task or past its last batch.
  absl::StatusOr<std::optional<PushTag>> TagFor(Pushed kind) const;
  // With tasks, after `s` failed a call: if the chief runs another generation (the job rolled
  // back), abandons the task in hand and returns OK (docs/recovery.md, "Client programs");
  // else returns `s`.
  absl::Status AbandonIfRolledBack(absl::Status s);
  // The next NextTask's first step after an abandoned task: the new generation's clients, and
  // after a restarted chief the variables and tables created again.
  absl::Status AdoptGeneration();
  // Registers `sender` again with the chief, which did not know it (a restarted chief), and
  // notes a new chief. Thread-safe: the heartbeat thread calls it too.
  absl::Status RegisterAgain(const Sender& sender) ABSL_LOCKS_EXCLUDED(chief_mu_);
  // One heartbeat as `sender` within `timeout`: the chief's answer, or nullopt if it did not
  // answer. A chief that asks for it (a restarted one) is registered with again, and
  // *registered (may be null) tells whether that succeeded. Thread-safe.
  std::optional<HeartbeatResponse> Beat(const Sender& sender, absl::Duration timeout,
                                        bool* registered = nullptr);
  // Sends the creation of a variable of `shape` (or a table) to the chief, retried while it is
  // not ready; the variable's placement.
  absl::StatusOr<VariableRef> SendCreateVariable(const VariableSpec& spec,
                                                 const std::vector<int64_t>& shape);
  absl::Status SendCreateTable(const TableDef& def);
  // A restarted chief knows none of this program's parameters: creates each again, in order.
  absl::Status CreateAgain();
  // A rollback met outside any task (a pull or barrier after the task loop): nothing to
  // abandon, so the new generation is taken at once.
  absl::Status AdoptOutsideTask();
  // Done in a job with tasks: reports, then stays until the chief ends the job, reporting
  // again to a restarted chief (which waits for every worker).
  absl::Status DoneWithTasks(const absl::Status& outcome);
  // The values of the last pull, for a read after the job rolled back (Aborted if none).
  absl::Status ValuesInHand(std::vector<const float*>* values) const;
  void RebuildTableClient();
  std::unique_ptr<grpc::ClientContext> Context() const {
    return ContextWithTimeout(options_.timeout);
  }

  // Constant after Connect.
  const ClientOptions options_;
  const std::string chief_;  // "chief host:port", for messages
  Sender sender_;            // its generation set by JoinTasks
  const std::unique_ptr<MasterService::Stub> master_;
  std::string mode_;
  std::vector<std::string> ps_addresses_;  // from the chief, by task
  int num_workers_ = 0;                    // from the chief

  std::vector<VariableRef> variables_;   // in creation order
  std::vector<VariableSpec> var_specs_;  // as created, by variable
  DataType push_dtype_ = DT_FLOAT;       // from options_.push_dtype
  // The pulls, pushes and lookups (client/session.h), made by Connect; its variables and tables
  // are set again by CreateVariable and CreateTable, and with the sender of a new generation.
  // The pushes go through the connections whose last pull read the values in hand; a blocking
  // pull with no push in flight goes through them too, a PullAsync or a pull beside a
  // PushAsync in flight through the others (which then hold the values in hand).
  std::unique_ptr<ParameterSession> session_;
  // Not yet waited for (owned by the PendingCall).
  const PendingCall::State* pull_in_flight_ = nullptr;
  const PendingCall::State* push_in_flight_ = nullptr;
  bool pulled_ = false;            // a Pull since the last CreateVariable
  bool after_barrier_ = false;     // sync: the next Pull must not wait for a step
  uint64_t next_min_version_ = 0;  // sync: the step the next Pull waits for

  std::vector<TableRef> tables_;               // in creation order
  std::vector<TableDef> table_defs_;           // as created, by table
  std::vector<std::vector<float>> zero_rows_;  // a Lookup's rows after a rollback, by table
  bool looked_up_ = false;                     // a Lookup since the last CreateTable
  bool tables_after_barrier_ = false;          // sync: the next Lookup must not wait for a step
  uint64_t next_table_version_ = 0;            // sync: the step the next Lookup waits for
  Pushed pushed_ = Pushed::kNone;              // pushes since the last Pull or Lookup

  int64_t global_step_ = 0;
  int64_t pushes_ = 0;
  int64_t examples_ = 0;
  int64_t stale_dropped_ = 0;
  double loss_sum_ = 0;  // since the last progress report
  int loss_count_ = 0;
  std::optional<double> last_loss_;  // none until a push gives a loss
  bool stopping_ = false;            // the chief said the job is ending
  bool done_ = false;

  // The task queue: set by JoinTasks.
  absl::Duration heartbeat_interval_ = absl::ZeroDuration();  // zero: no task queue
  std::optional<Task> task_;                                  // in hand, not finished
  int64_t task_steps_ = 0;                                    // steps pushed in task_
  // The job rolled back: pushes are dropped and reads give the values in hand until NextTask
  // adopts `next_generation_`.
  bool abandoned_ = false;
  bool abandoned_in_task_ = false;  // a task was in hand when the job rolled back
  uint64_t next_generation_ = 0;
  // The chief that answered the last Register, and whether it is another one than the chief
  // of the generation in hand (a restarted chief).
  absl::Mutex chief_mu_;
  uint64_t chief_incarnation_ ABSL_GUARDED_BY(chief_mu_) = 0;
  bool new_chief_ ABSL_GUARDED_BY(chief_mu_) = false;
  absl::Mutex heartbeat_mu_;
  bool heartbeat_stop_ ABSL_GUARDED_BY(heartbeat_mu_) = false;
  std::thread heartbeat_;
};

}  // namespace pstrain
