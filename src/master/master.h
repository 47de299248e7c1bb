// The chief's coordinator: registration, variable creation and placement, data sharding, progress,
// evaluation and the end of the job. Public header of src/master.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ps.pb.h"

namespace pstrain {

// JobConfig::schema of a schema inferred from the data.
inline constexpr char kInferredSchema[] = "auto";
// JobConfig::epochs of a number of epochs chosen from the data's size (--epochs auto).
inline constexpr int kAutoEpochs = -1;

// What to train and how. Defaults are the demo job's.
struct JobConfig {
  // A built-in model (model/model.h: mlp, linear, wide_deep) trained by the workers on `data`,
  // or "external": workers are client programs (client.h); the chief creates their variables
  // and tables, runs their barriers and ends the job when all report done.
  std::string model = "mlp";
  // The training data, "FORMAT:PATH" (data/data.h DataSpec: idx, csv, libsvm, criteo) or an
  // MNIST-layout directory. Held out: `test_data` if set, else the last `holdout` fraction of a
  // text file's records (an idx directory has its own t10k split).
  std::string data = "data/mnist";
  std::string test_data;
  // A CSV table's feature columns (docs/features.md): a schema file (JSON), or kInferredSchema
  // to infer one from the training records; empty: every column a number, the label first.
  std::string schema;
  // With kInferredSchema: the label column's name (empty: the first column).
  std::string label;
  // classification or regression; empty: the schema's task (an inferred one's from the label's
  // values), or classification without a schema.
  std::string objective;
  double holdout = 0.1;
  bool skip_bad_lines = false;  // a malformed data line is skipped and counted, not an error
  std::vector<int> hidden = {256, 128};  // mlp, and the deep part of wide_deep
  int embedding_dim = 16;                // wide_deep
  bool shared_embedding = false;         // wide_deep: one table for every categorical field
  // The model's embedding tables (proto TableDef): their optimizer ("adagrad", learning rate
  // 0.1 unless set), admission and eviction. The caps are for the whole table; each PS task
  // holds its share (cap / number of PS, rounded up).
  OptimizerConfig table_optimizer;
  // Whether table_optimizer is every table's (--table_optimizer or --table_lr was given), else
  // only that of tables whose model picks no optimizer of its own (model/model.h TableSpec).
  bool table_optimizer_given = false;
  int admit_after = 0;
  bool unadmitted_zeros = false;
  int64_t evict_after_steps = 0;
  int64_t table_max_rows = 0;
  int64_t table_max_bytes = 0;
  std::string mode = "async";     // async, sync or ssp
  int replicas_to_aggregate = 0;  // sync: gradients per step; 0 = every worker
  int staleness = 0;              // ssp: clocks a worker may run ahead of the slowest
  // auto (split a variable over 256 KiB into up to one shard per PS of at least 256 KiB, and
  // always into shards of at most 64 MiB), none, fixed:N, min_bytes:B, max_bytes:B
  std::string partitioner = "auto";
  std::string placement = "greedy";  // greedy (by bytes) or round_robin
  bool stop_on_nonfinite = false;    // a NaN/Inf gradient stops the job; else skipped and counted
  DataType push_dtype = DT_FLOAT;    // dense gradients on the wire: float32, float16 or bfloat16
  bool overlap_pull = false;         // async/ssp: pull step t+1 while step t computes and pushes
  bool pipeline_push = false;        // async/ssp: push layers as the backward pass ends them
  // pipeline_push: the least bytes of an early push (0: each layer as it is ready). 1 MB, as
  // PyTorch DDP's first bucket: pushing the MNIST MLP's two upper layers (136 KB) on their own
  // cost a request and a scan in the training thread each, 6% of its examples/s.
  int64_t push_bucket_bytes = 1 << 20;
  int slow_worker = -1;  // for tests: this worker sleeps slow_worker_delay_ms per step
  int slow_worker_delay_ms = 0;
  int eval_delay_ms = 0;  // for tests: the chief waits this long before the final evaluation
  int end_delay_ms =
      0;  // for tests: and this long after it told the tasks to stop, before it returns
  OptimizerConfig optimizer;  // name "adam", learning rate 0.001 unless set
  // The schedule was left to the model (mlp through a schema): the chief, which knows the task
  // once it has read the schema, makes a regression's cosine (docs/features.md).
  bool cosine_if_regression = false;
  int batch_size = 64;
  int epochs = 3;  // kAutoEpochs: chosen from the training records (EpochsFor)
  uint64_t seed = 1;
  int report_every = 20;
  absl::Duration register_timeout = absl::Seconds(60);  // for every task to register
  absl::Duration task_timeout = absl::Seconds(120);     // silence after which a worker is lost
  absl::Duration rpc_timeout = absl::Seconds(30);
  // Checkpoints (docs/checkpoints.md): saved under checkpoint_dir every checkpoint_every_steps
  // global steps and/or checkpoint_every_secs seconds (0: not by that) and at the end, the
  // newest keep_checkpoints kept; restore_from: a checkpoint root (its newest valid checkpoint)
  // or one ckpt-<step> directory to start from.
  std::string checkpoint_dir;
  int64_t checkpoint_every_steps = 0;
  double checkpoint_every_secs = 0;
  int keep_checkpoints = 3;
  std::string restore_from;
  bool restore_if_any = false;
  // The task queue (docs/recovery.md): each epoch is cut into tasks of task_rows rows that
  // workers take from the chief, heartbeating every heartbeat_secs; a worker silent for
  // heartbeat_timeout_secs is declared dead and replaced. The queue also turns recovery on: a
  // restarted PS (or, in sync and ssp modes, worker) rolls the job back to its latest
  // checkpoint. -1 = auto (TaskRows), 0 = every worker trains on a fixed shard, no recovery.
  // Client programs (--model external) have a queue when `rows` is set: the number of rows of
  // their data, which the chief cuts into tasks as it cuts a built-in model's records.
  int64_t task_rows = -1;
  int64_t rows = 0;
  double heartbeat_secs = 1;
  double heartbeat_timeout_secs = 10;
  // This chief was restarted by its supervisor after the job's chief died (with restore_from the
  // job's checkpoint root): it counts the restart among the failures survived.
  bool restarted = false;

  JobConfig();
  // Whether the chief trains a built-in model (anything but "external").
  bool BuiltInModel() const;
  // The rows per task of a job over `rows` training records and `num_workers` workers: 0 = no
  // task queue (task_rows 0, or an external job); auto (-1) = min(200 batches,
  // ceil(rows / (8 * workers))) rounded up to whole batches, at least one batch.
  int64_t TaskRows(int64_t rows, int num_workers) const;
  // The epochs of a job over `rows` training records: `epochs`, or with kAutoEpochs enough to
  // see kAutoEpochExamples examples (kAutoDeepEpochExamples with a deep part: mlp, wide_deep),
  // from 1 to kMaxAutoEpochs.
  int EpochsFor(int64_t rows) const;
  static constexpr int64_t kAutoEpochExamples = 50000;
  static constexpr int64_t kAutoDeepEpochExamples = 5000;
  static constexpr int kMaxAutoEpochs = 100;
  // InvalidArgument naming the first bad setting by its command-line flag ("--lr_step_size must
  // be positive with --lr_schedule step, got 0").
  absl::Status Validate() const;
  // Validate, then what depends on the cluster: at least one PS and one worker (at most
  // kMaxTasks each), --replicas_to_aggregate at most the workers, --slow_worker among them.
  // The launcher calls it before starting any process; RunJob calls it too.
  absl::Status ValidateFor(int num_ps, int num_workers) const;
  // Parts of Validate: --data, --test_data and --holdout (a built-in model's only), and the
  // table settings.
  absl::Status ValidateData() const;
  absl::Status ValidateTables() const;
};

// A live view of the job, for the chief's status page and /metrics: RunJob keeps it current
// (at least once a second while the job runs), readers take copies.
struct JobStatus {
  struct Task {
    std::string job;  // "chief", "ps" or "worker"
    int index = 0;
    std::string address;
    std::string state;   // "waiting" (not registered), "running", "done", "failed", "lost"
    std::string detail;  // what a worker does ("at barrier \"end\"") or why it failed
    // Since its last message to the chief (a PS: its registration or its last answer to the
    // chief's Stats); -1 = never.
    double seconds_since_seen = -1;
    int64_t steps = 0;  // a worker's steps so far
  };
  struct Shard {       // one placed variable shard
    std::string name;  // "dense_1/kernel" or "dense_1/kernel/part_0"
    int ps = 0;
    int64_t bytes = 0;
  };
  struct LossPoint {
    double seconds = 0;  // since training started
    int64_t step = 0;
    double loss = 0;
  };
  // "starting" (waiting for tasks), "running", "evaluating", "succeeded" or "failed".
  std::string state = "starting";
  std::string error;  // why it failed
  std::string mode, model;
  int epoch = 0, epochs = 0;  // epoch from 1; 0 = not known (external)
  int64_t global_step = 0;
  int64_t total_steps = 0;  // 0 = not known
  double examples_per_sec = 0;
  double loss = 0;
  double elapsed_seconds = 0;
  double eta_seconds = -1;  // -1 = not known
  int workers_alive = 0;
  std::vector<Task> tasks;  // the chief, then every ps, then every worker
  std::vector<Shard> placement;
  std::vector<int64_t> ps_bytes;        // bytes of dense variables placed on each PS
  std::vector<int64_t> ps_table_bytes;  // memory of each PS's embedding tables (as last collected)
  std::vector<int64_t> ps_pushes;       // pushes each PS applied so far (as last collected)
  std::vector<LossPoint> loss_curve;    // at most a few hundred points, evenly thinned
};

// Holds the latest JobStatus. Thread-safe.
class JobMonitor {
 public:
  void Update(const std::function<void(JobStatus*)>& change);
  JobStatus Snapshot() const;

 private:
  mutable absl::Mutex mu_;
  JobStatus status_ ABSL_GUARDED_BY(mu_);
};

struct MasterOptions {
  std::string listen_address;             // where MasterService listens
  std::string address;                    // the chief's address in the cluster; "" = listen_address
  std::vector<std::string> ps_addresses;  // by task index
  std::vector<std::string> worker_addresses;
  JobConfig job;
  JobMonitor* monitor = nullptr;
  // Writes one progress line ("progress epoch 1/3 step ..."); unset: to stderr as it is.
  std::function<void(const std::string&)>
      print_progress;  // if set, RunJob keeps it current; must outlive RunJob
};

struct JobResult {
  std::string mode;
  std::string model;
  // Held-out metrics of a built-in model: test_accuracy for a classifier, auc and log_loss for
  // a binary model and a classifier of two classes, rmse and mae for a regression
  // (model/model.h Evaluate).
  bool classification = false, binary = false, regression = false;
  double test_accuracy = 0;
  double auc = 0;
  double log_loss = 0, base_log_loss = 0;
  double macro_f1 = 0;
  double rmse = 0, mae = 0;
  int64_t test_examples = 0;
  int64_t bad_lines_skipped = 0;   // malformed data lines skipped, by the workers and the chief
  std::vector<TableStats> tables;  // per table, summed over the PS tasks (master/tables.h)
  double examples_per_sec = 0;
  int64_t steps = 0;          // steps of all workers together
  int64_t global_step = 0;    // sync: steps of the model (the PS version); else updates applied
  int64_t total_steps = 0;    // the job's length in global steps; 0 = not known (external)
  int64_t worker_pushes = 0;  // gradients the workers pushed, all together
  int64_t examples = 0;
  double seconds = 0;  // training time, from the first task started to the last finished
  double final_loss = 0;
  bool loss_reported = false;  // some worker reported a loss (a client program need not)
  int num_ps = 0;
  int num_workers = 0;
  std::vector<int64_t> worker_steps;
  std::vector<int64_t> worker_stale_steps;  // sync: steps whose gradient was dropped as stale
  int64_t nonfinite_skipped = 0;            // steps whose gradient had NaN/Inf (skip policy)
  StatsResponse ps_stats;                   // summed over PS tasks (max for max_clock_gap)
  // With the task queue: the ledger's totals, and "" if every task of every epoch was applied
  // exactly once, by the ledger and by every shard's and table's watermarks (else the first
  // task, shard or table that was not).
  bool task_queue = false;
  int64_t tasks = 0, tasks_applied = 0, tasks_redone = 0, workers_declared_dead = 0;
  std::string ledger_check;
  // Failures the job survived (docs/recovery.md): workers replaced in place, rollbacks to a
  // checkpoint, restarts of the chief, and tasks restarted after the result was made (while
  // the chief stopped the tasks); and the tagged pushes the PS dropped as duplicates.
  int64_t workers_replaced = 0, rollbacks = 0, chief_restarts = 0, restarts_after_end = 0;
  int64_t failures_survived() const {
    return workers_replaced + rollbacks + chief_restarts + restarts_after_end;
  }
  // A chief restarted after the job had ended: the result (JSON) its predecessor saved beside
  // the checkpoints, with this restart counted; ToJson gives it as it is.
  std::string finished_before;
  std::string ToJson() const;
};

// Runs the whole job from the chief: starts MasterService, waits for every PS and worker to
// register, configures the PS with the job's consistency mode and its workers, then
//  - a built-in model (mlp, linear, wide_deep): opens the data, builds the model from the flags
//    and the data's shape, creates, partitions and places its dense variables and creates its
//    embedding tables on every PS, starts the workers on their data shards, and evaluates the
//    final parameters on the held-out examples;
//  - model "external": serves CreateVariable, CreateTable and Barrier to client programs;
// logs progress to stderr until every worker reported done, collects the PS counters, and finally
// tells every task to shut down, saying whether the job succeeded (also on failure, so nothing is
// left waiting). Errors name the task or file at fault. Variables over kMaxVariableBytes
// (8 GiB: the chief draws initial values in its memory) are refused.
absl::StatusOr<JobResult> RunJob(const MasterOptions& options);

// `pstrain checkpoint inspect`: what the checkpoint at `path` holds, read and checked as a
// restore reads it (a ckpt-<step> directory, or a root whose newest valid checkpoint is used).
// As JSON (`json`): {"path", "global_step", "num_ps", "ledger": {"tasks", "applied", "redone",
// "epochs", "rows", "task_rows"} or null, "variables": [{"name", "shape", "shards", "optimizer",
// "slots", "version", "update_count"}], "tables": [{"name", "dim", "rows", "optimizer",
// "version"}]}; else the same as a readable table. Errors as the restore's: the file and what is
// wrong with it (docs/checkpoints.md).
absl::StatusOr<std::string> InspectCheckpoint(const std::string& path, bool json);

// Ends every RunJob running in this process early, e.g. from the thread that handles SIGINT and
// SIGTERM: each shuts every task down with job_succeeded = false and returns
// Cancelled("stopped by <reason>"). Thread-safe and async-signal-unsafe (call it from a thread,
// not from a signal handler). A request made before RunJob starts is kept: a RunJob that starts
// later stops at once, since the process is ending. The first reason wins.
void RequestJobStop(const std::string& reason);

}  // namespace pstrain
