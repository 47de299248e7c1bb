// The client API: what a user's own training program calls to train through pstrain, in the
// role of TensorFlow's ParameterServerStrategy. Public header of src/client, installed as
// <prefix>/include/pstrain/client/client.h with common/tensor.h; it needs only Abseil's
// status and time headers (find_package(pstrain) and pkg-config pstrain provide them).
//
// A program runs as worker task `task` of a cluster whose chief was started with
// `pstrain server --job chief --model external`. It connects, creates its variables and
// embedding tables (every worker may create the same ones: creation is get-or-create), then
// loops Pull and Lookup -> compute gradients -> Push and PushSparse, and finally calls Done():
//
//   absl::StatusOr<ClientOptions> o = ClientOptions::FromTfConfig();  // or {.chief = "h:p", ...}
//   auto c = Client::Connect(*o);
//   int w = *(*c)->CreateVariable({.name = "w", .shape = {10, 1}});
//   int e = *(*c)->CreateTable({.name = "emb", .dim = 8});  // optional: sparse rows by key
//   std::vector<const float*> values, rows;
//   for (...) {
//     (*c)->Pull(&values);
//     (*c)->Lookup({batch_ids}, &rows);  // the batch's distinct ids of each table
//     ...compute grads...;
//     (*c)->Push(grads);
//     (*c)->PushSparse({batch_ids}, {id_grads});
//   }
//   (*c)->Barrier("trained");  // optional: wait for the others, then a final Pull
//   (*c)->Done();
//
// A step is the reads (Pull, Lookup) followed by the pushes (Push, PushSparse) of one batch; a
// program may use variables only, tables only, or both.
//
// The PS addresses come from the chief when the client registers, in the chief's task order, so
// a client cannot address the wrong PS.
// Threads: a Client is used by one thread at a time (it keeps per-call buffers); several
// threads of one process need a Client each (and distinct tasks). PullAsync and PushAsync
// (below) run their calls on the Client's own threads, so pulls and pushes overlap with the
// caller's computation.
// Errors: every call returns a status; none throws. Each RPC has ClientOptions::timeout as its
// deadline; errors name the peer and the call ("Pull at ps:1 127.0.0.1:2222: ..."). Cancelled
// from Pull or Push means the chief is ending the job: stop training and call Done().
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/tensor.h"

namespace pstrain {

struct ClientOptions {
  std::string chief = {};  // host:port of the chief's MasterService
  int task = 0;            // this program's index in the cluster's "worker" job
  // Longest wait to reach the chief and for the start barrier, and the deadline of every call
  // (a sync Pull waiting for slower workers, a Barrier).
  absl::Duration timeout = absl::Seconds(60);
  // The element type dense gradients travel in from Push: "float32", or "float16" or
  // "bfloat16" for half the bytes (rounded to nearest even; the PS widen them back and keep
  // float32 variables). Push still takes float32 gradients. Sparse pushes stay float32.
  std::string push_dtype = "float32";
  // The data plane to the PS (docs/transport_tcp.md, transport_ucx.md): "grpc", "tcp", "ucx"
  // or "auto" (UCX where the PS serves it, else gRPC). Empty: the environment variable
  // PSTRAIN_TRANSPORT, which `pstrain launch` sets to its --transport for the programs it runs,
  // else "grpc". With TLS, "tcp" and "ucx" are refused (their traffic is not encrypted) and "auto"
  // means "grpc".
  std::string transport = {};

  // The options of the worker that the environment variable TF_CONFIG (TensorFlow's JSON
  // cluster format) describes: chief = cluster.chief[0], task = task.index, which must have
  // task.type "worker" (and be below the length of cluster.worker when that is given). timeout
  // keeps its default. InvalidArgument saying what is missing or wrong (for bad JSON, where).
  static absl::StatusOr<ClientOptions> FromTfConfig();
  // The same from TF_CONFIG's text.
  static absl::StatusOr<ClientOptions> FromTfConfigJson(std::string_view json);
};

// How the chief fills a new variable (the values are drawn once, seeded, on the chief). The
// fields that `kind` does not use are ignored.
struct InitializerOptions {
  // "zeros" (also ""), "constant" (value), "uniform" (low, high), "normal" and
  // "truncated_normal" (mean, stddev; truncated at 2 stddev), "glorot_uniform" (fan-in and
  // fan-out from the shape).
  std::string kind = "zeros";
  double value = 0;
  double low = 0, high = 0;
  double mean = 0, stddev = 0;
  uint64_t seed = 0;
};

// Learning rate as a function of the variable's update count (the global step in sync mode).
struct ScheduleOptions {
  std::string kind = "constant";  // "constant", "step" or "cosine"
  // step: lr * decay_rate ^ floor(step / step_size)
  int64_t step_size = 0;
  double decay_rate = 0;
  // cosine: linear warm-up from 0 to lr over warmup_steps, then cosine decay from lr to min_lr
  // at total_steps (and min_lr after it); total_steps must exceed warmup_steps.
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;
  double min_lr = 0;
};

// The optimizer the PS apply to every gradient pushed for a variable. Unset optional fields take
// the defaults shown (PyTorch's, and McMahan et al. 2013's for FTRL); the PS refuse values out of
// range with InvalidArgument naming the field.
struct OptimizerOptions {
  std::string name = "sgd";  // sgd, momentum, adagrad, adam, rmsprop, ftrl
  double learning_rate = 0.01;
  std::optional<double> beta1 = {};      // adam, default 0.9
  std::optional<double> beta2 = {};      // adam, default 0.999
  std::optional<double> epsilon = {};    // adam 1e-8, rmsprop 1e-8, adagrad 1e-10
  double momentum = 0;                   // momentum (and rmsprop)
  bool nesterov = false;                 // momentum
  double initial_accumulator_value = 0;  // adagrad (0 is its default); ftrl (0 means 0.1)
  std::optional<double> rho = {};        // rmsprop's smoothing constant (torch's alpha), 0.99
  double l1 = 0, l2 = 0;                 // ftrl
  std::optional<double> learning_rate_power = {};  // ftrl, default -0.5
  double clip_norm = 0;  // > 0: a gradient whose L2 norm exceeds it is scaled down to it
  ScheduleOptions schedule = {};
};

struct VariableOptions {
  std::string name = {};                // unique in the job
  std::vector<int64_t> shape = {};      // dims >= 0; [] is a scalar
  InitializerOptions initializer = {};  // zeros unless set
  // Applied on the PS to every pushed gradient; unset: the chief's optimizer (its --optimizer,
  // --lr and related flags).
  std::optional<OptimizerOptions> optimizer = {};
  // "none", "fixed:N", "min_bytes:B" or "max_bytes:B"; empty = the chief's --partitioner
  std::string partitioner = {};
};

// An embedding table: rows of `dim` floats keyed by uint64 ids (hashed feature ids), spread
// over the PS tasks by a hash of the key. A key's row is created on the PS that holds it when
// the key is first looked up (admitted), drawn from `initializer` seeded by (initializer.seed,
// key), so a key starts from the same row whatever the number of PS. The PS refuse bad values
// with InvalidArgument naming the field.
struct TableOptions {
  std::string name = {};  // unique among the job's tables
  int dim = 0;            // floats per row: 1 to 65536
  // zeros (the default), constant, uniform, normal or truncated_normal, as for variables;
  // glorot_uniform is refused (a row has no fan-in).
  InitializerOptions initializer = {};
  // sgd, adagrad, adam (each row keeps its own step count: lazy Adam, torch's SparseAdam) or
  // ftrl; momentum and rmsprop are refused. Unset: adagrad with learning rate 0.05, not the
  // chief's optimizer, which may be one that tables do not take.
  std::optional<OptimizerOptions> optimizer = {};
  // Admission: a key gets a trainable row once it was looked up admit_after times (0 and 1: at
  // once). Until then a lookup reads zeros (unadmitted_zeros) or the row the key would get, and
  // its gradients are dropped (and counted by the PS).
  int admit_after = 0;
  bool unadmitted_zeros = false;
  // Eviction: a row not updated for evict_after_steps of the table's steps is removed (0:
  // never); past max_rows_per_ps rows or max_bytes_per_ps bytes on one PS task (0: no cap) the
  // least recently updated rows are removed first. A removed key starts again as a new one.
  int64_t evict_after_steps = 0;
  int64_t max_rows_per_ps = 0;
  int64_t max_bytes_per_ps = 0;
};

// A task of the chief's task queue (a job whose chief has --rows N, docs/recovery.md): rows
// [begin, end) of the programs' data, to train on in epoch `epoch`, in batches of the size
// NextTask was given. Batch k is the same rows whoever trains the task; that is what makes each
// batch apply once when a task is handed out again after a failure.
struct Task {
  int epoch = 0;
  int64_t index = 0;  // within the epoch, from 0
  int64_t begin = 0, end = 0;
  uint64_t seed = 0;       // the order of the rows is drawn from it
  int64_t batch_size = 0;  // as NextTask was given

  // The rows in the task's order: [begin, end) shuffled by `seed`.
  std::vector<int64_t> Rows() const;
  int64_t num_batches() const;
  // Rows()[k * batch_size, (k + 1) * batch_size), the last batch shorter.
  std::vector<int64_t> Batch(int64_t k) const;
};

// A PullAsync or PushAsync in flight: its call runs on a thread of the Client while the caller
// works. Movable, not copyable; it must not outlive its Client, and is used from the thread that
// uses the Client.
class PendingCall {
 public:
  PendingCall(PendingCall&&) noexcept;
  PendingCall& operator=(PendingCall&&) noexcept;
  // Waits for a call not yet waited for (it has the client's timeout as its deadline) and
  // applies its result, which is then lost.
  ~PendingCall();

  // Waits until the call returned, at most until `deadline`, and returns what Pull or Push
  // would have returned; the same again on later calls. DeadlineExceeded if it has not
  // returned by then: it keeps running, and Wait may be called again.
  absl::Status Wait(absl::Time deadline);
  absl::Status Wait(absl::Duration timeout) { return Wait(absl::Now() + timeout); }
  // Whether the call returned (Wait will not block).
  bool done() const;

  // Internal: made by the Client.
  struct State;
  explicit PendingCall(std::shared_ptr<State> state);

 private:
  void Finish();  // waits for an unfinished call, then applies it
  std::shared_ptr<State> state_;
};

class Client {
 public:
  // Registers as worker `task` with the chief (retried with backoff until `timeout` while the
  // chief is unreachable), learns the PS addresses from it, then waits at the barrier
  // "pstrain/start", which the chief releases once every task registered and the PS are
  // configured. InvalidArgument for bad options; DeadlineExceeded naming the chief when it
  // cannot be reached in time; the chief's error when it refuses this worker.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& options);

  // Not copyable. Destroying a Client without Done() leaves the chief waiting for this worker
  // until it declares it lost.
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  ~Client();

  // Gets or creates the variable (MasterService.CreateVariable): a variable of that name that
  // already exists is returned if its shape matches (else InvalidArgument from the chief), and
  // its stored initializer and optimizer are kept. Returns the variable's index among those this
  // client created, in order; Pull and Push use that order. Creating a variable invalidates the
  // pointers of the last Pull, and a Pull must follow before the next Push. Create every
  // variable before training: in sync mode a new variable starts at step 0.
  absl::StatusOr<int> CreateVariable(const VariableOptions& v);

  // Pulls every variable created so far. On success (*values)[i] points at variable i's floats
  // (row-major, as many as its shape holds), owned by the Client and valid until the next Pull,
  // CreateVariable or Done. Sync mode: waits until the global step after this client's last
  // push is applied (step 0 before the first push). Ssp mode: waits while this client, at
  // clock = its number of pushes, is more than the staleness ahead of the slowest worker that is
  // still training. The first Pull after a Barrier does not wait for a sync step (it reads the
  // step that is there, the same on every PS). A PS still connecting is waited for, and a
  // request that meets a broken connection is sent again, within the deadline. Cancelled once
  // the chief ended the job; FailedPrecondition after Done or with no variables.
  absl::Status Pull(std::vector<const float*>* values);

  // Pushes grads[i] for variable i (same order and shapes as created), tagged with the versions
  // the last Pull read. The PS apply them with each variable's optimizer (sync: average them per
  // step). `examples` (the batch size) and `loss` (of this step) only feed the progress reports
  // sent to the chief every 20 steps. InvalidArgument for a wrong count or shape (nothing is
  // sent); FailedPrecondition without a Pull since the last CreateVariable; Cancelled once the
  // chief ended the job (the push that learns of it still succeeds: it was applied). A failed
  // progress report is returned as this push's error although its gradient was applied. A push
  // is never sent twice: after an error it is unknown whether it was applied.
  absl::Status Push(const std::vector<Tensor>& grads, int64_t examples = 0,
                    std::optional<double> loss = std::nullopt);
  // The same from views of the caller's memory, which must hold the floats until it returns.
  absl::Status Push(const std::vector<TensorView>& grads, int64_t examples = 0,
                    std::optional<double> loss = std::nullopt);

  // Overlap of communication with computation: PullAsync and PushAsync start Pull and Push on
  // the Client's own threads and return at once; one pull and one push may be in flight at a
  // time, both at once, e.g. the pull of step t+1 while step t computes and pushes:
  //
  //   c->Pull(&values);
  //   for (...) {
  //     PendingCall next = c->PullAsync(&next_values);  // step t+1's values, in flight
  //     ...compute grads from values...;
  //     c->PushAsync(grads).Wait(timeout);  // or keep it and wait later
  //     next.Wait(timeout);  // then values = next_values
  //   }
  //
  // Values so pulled miss the gradients pushed while the pull was in flight: async and ssp
  // training then computes each step's gradients from values one step staler. In sync mode a
  // pull reads the step the last push completes, so PullAsync with a PushAsync not yet waited
  // for is FailedPrecondition there. Pulled values are those of a Pull; *values is set when
  // Wait returns OK; `values` must stay valid until then, and the floats it points at are valid
  // until the next pull's Wait returns (the pull in flight writes other buffers), or
  // CreateVariable or Done. A push is tagged with the versions of the last pull whose Wait
  // returned OK, so it belongs with values in hand, not with a pull in flight. PushAsync reads
  // the floats of `grads` while in flight: they must stay valid and unchanged until its Wait
  // returns. An error of the call, or a refused start (FailedPrecondition for a second pull or
  // push in flight, or as Pull and Push refuse), is Wait's result. CreateVariable, Barrier and
  // Done are FailedPrecondition while a call is in flight (not yet waited for).
  PendingCall PullAsync(std::vector<const float*>* values);
  PendingCall PushAsync(const std::vector<TensorView>& grads, int64_t examples = 0,
                        std::optional<double> loss = std::nullopt);

  // Gets or creates the table on every PS (MasterService.CreateTable): a table of that name
  // that exists is returned if its definition is the same, else InvalidArgument from the chief
  // naming the field that differs, so every worker must pass the same options. Returns the
  // table's index among those this client created, in order; Lookup and PushSparse use that
  // order. Creating a table invalidates the rows of the last Lookup, and a Lookup must follow
  // before the next PushSparse. Create every table before training: in sync mode a new table
  // starts at step 0.
  absl::StatusOr<int> CreateTable(const TableOptions& t);

  // Looks up rows: keys[i] holds distinct keys of table i (any order; none is fine). On success
  // (*rows)[i] points at keys[i].size() * dim floats, the row of keys[i][j] at j * dim, owned by
  // the Client and valid until the next Lookup, CreateTable or Done. One request goes to each
  // PS that holds some of the keys (carrying every table), all in flight at once. Waits as Pull
  // does: sync mode, until the step after this client's last PushSparse is applied on every PS
  // (step 0 before the first; not after a Barrier); ssp mode, at clock = pushes(). A PS still
  // connecting is waited for and a broken connection retried, within the deadline.
  // InvalidArgument naming the table and key for a repeated key, or for keys of a wrong number
  // of tables (nothing is sent); FailedPrecondition with no tables or after Done; Cancelled
  // once the chief ended the job.
  absl::Status Lookup(const std::vector<std::vector<uint64_t>>& keys,
                      std::vector<const float*>* rows);

  // Pushes gradient rows: grads[i] holds keys[i].size() * dim floats, the gradient of keys[i][j]
  // at j * dim. A key may repeat (the ids of a batch): its rows are summed before sending. The
  // rows are tagged with the versions the last Lookup read, and the PS apply them with the
  // table's optimizer (sync: the sum over the workers of a step divided by their number, as
  // Push averages). Push keys that the last Lookup returned: the PS refuse a key they hold no
  // row for (InvalidArgument naming table and key), unless admission or eviction explains it,
  // and then drop its gradient. Sync mode: every worker calls it every step, with no keys if it
  // touched none, since a step is applied once every worker's gradient arrived. InvalidArgument
  // for a wrong number of tables or of floats (nothing is sent); FailedPrecondition without a
  // Lookup since the last CreateTable; otherwise as Push (each PS applies its part of the push
  // whole or not at all, so after an error some PS may hold theirs), which it also matches in
  // counting the step and reporting progress (`examples`, `loss`: give them in one of the two
  // calls).
  absl::Status PushSparse(const std::vector<std::vector<uint64_t>>& keys,
                          const std::vector<std::vector<float>>& grads, int64_t examples = 0,
                          std::optional<double> loss = std::nullopt);

  // The task queue (a chief started with --rows N). NextTask returns the next task to train on
  // in batches of `batch_size` rows (waiting while every task is handed out and some are in
  // flight; in sync and ssp jobs this worker leaves the step meanwhile, as at a barrier), the
  // same task again while the one in hand is not finished, or nullopt once every task of every
  // epoch is applied (then call Done). Every Push and PushSparse made while a task is in hand is
  // tagged with (epoch, task, batch) by the client, the batch counted as pushes() counts steps;
  // a PS drops a batch it applied already, so a task handed out again applies each batch once.
  // TaskDone finishes the task in hand: InvalidArgument naming both counts unless exactly
  // num_batches() steps were pushed in it (nothing is reported then). In a job with tasks, a
  // push outside a task is FailedPrecondition, and so is a push past the task's last batch.
  // FailedPrecondition for NextTask or TaskDone in a job without tasks.
  absl::StatusOr<std::optional<Task>> NextTask(int64_t batch_size);
  absl::Status TaskDone();
  // Whether the job has a task queue.
  bool has_tasks() const;
  // After a rollback (a PS died, or in sync and ssp a worker; docs/recovery.md): the job went
  // back to its latest checkpoint and the task in hand is abandoned. No call fails for it: from
  // the call that learnt of it until the next NextTask, Push and PushSparse are dropped, Pull
  // gives the values in hand and Lookup zeros, and TaskDone reports nothing. A loop over the
  // task's batches may stop early when this is true; NextTask then hands out a task of the
  // restored job. A chief that died and was restarted is the same to a program: the client
  // registers with the new chief, which resumes from the job's latest checkpoint, and creates
  // the program's variables and tables again there (in its order) before the next task. A
  // rollback met outside any task (a Pull, Lookup or Barrier after the task loop) is taken at
  // once: the call reads, or waits on, the restored job.
  bool task_abandoned() const;

  // The smallest variable version read by the last Pull: the global step in sync mode, the
  // number of updates applied in async and ssp mode. 0 before the first Pull.
  int64_t global_step() const;
  // Steps pushed by this client: each Push or PushSparse counts one, except one that pairs with
  // a push of the other kind made since the last Pull or Lookup (both push one step).
  int64_t pushes() const;

  // Blocks until every worker that has not called Done() reached the barrier `name`
  // (MasterService.Barrier); a barrier name is used once per job. While it waits, this worker
  // does not hold back the others: it first tells every PS that it pauses, so in sync and ssp
  // jobs the workers still training step on without it (sync steps aggregate the gradients of
  // the workers not paused), and its next Push rejoins it. So workers may take different numbers
  // of steps and then meet here. DeadlineExceeded after `timeout`, with the chief's account of
  // which workers have not arrived. In a job with tasks, a chief restarted (or a rollback)
  // meanwhile is waited for and its barrier joined, unless a task is in hand (then the error
  // is returned, and NextTask takes the new generation).
  absl::Status Barrier(const std::string& name);

  // Call once at the end: tells every PS this worker left (so sync steps and ssp clocks stop
  // counting it), then reports to the chief that it is done (steps = pushes). With a non-OK
  // `outcome` reports that this worker failed with that error instead, which ends the job.
  // In a job with tasks it then waits until the chief ends the job (reporting again to a chief
  // restarted meanwhile), so that a restarted chief finds every program; DeadlineExceeded if
  // the chief is silent for `timeout`. Later calls other than mode() and global_step() return
  // FailedPrecondition.
  absl::Status Done(const absl::Status& outcome = absl::OkStatus());

  // The job's consistency mode, from the chief: "async", "sync" or "ssp".
  const std::string& mode() const;
  // Per PS task, the transport its data channel took ("grpc", "tcp" or "ucx"); "" before the first
  // Pull or Push made it (and after a CreateVariable, until the next).
  std::vector<std::string> data_plane() const;
  // The number of PS tasks, from the chief.
  int num_ps() const;
  // The number of worker tasks in the cluster, from the chief; this program is worker
  // `ClientOptions::task` of them. A program that reads its own share of the data reads the
  // rows whose index modulo num_workers() is its task.
  int num_workers() const;

 private:
  class Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  const std::unique_ptr<Impl> impl_;
};

// Reading a checkpoint outside a job (docs/checkpoints.md), as pstrain.load_checkpoint does in
// Python: a checkpoint's trained parameters, with the checks of a restore.
struct CheckpointParameters {
  std::string path;  // the ckpt-<step> directory read
  int64_t global_step = 0;
  struct Variable {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float> values;  // the whole variable, its shards reassembled, row-major
  };
  struct Table {
    std::string name;
    int dim = 0;
    std::vector<uint64_t> keys;
    std::vector<float> rows;  // keys.size() * dim: the row of keys[i] at i * dim (no slots)
  };
  std::vector<Variable> variables;  // in the checkpoint's order
  std::vector<Table> tables;
};

// Reads the checkpoint at `path`: a ckpt-<step> directory, or a --checkpoint_dir whose newest
// valid checkpoint is read. NotFound for a path that does not exist or holds no checkpoint;
// DataLoss naming the file and what is wrong with it for a damaged one (every part is checked
// against the manifest's sizes and checksums); ResourceExhausted if it does not fit in memory.
absl::StatusOr<CheckpointParameters> ReadCheckpoint(const std::string& path);

}  // namespace pstrain
