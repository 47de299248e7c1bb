// The client API: what a user's own training program calls to train through pstrain, in the
// role of TensorFlow's ParameterServerStrategy. Public header of src/client.
//
// A program runs as worker task `task` of a cluster whose chief was started with
// `pstrain server --job chief --model external`. It connects, creates its variables (every worker
// may create the same ones: creation is get-or-create), then loops Pull -> compute gradients ->
// Push, and finally calls Done():
//
//   auto c = Client::Connect({.chief = "h:p", .ps = {...}, .task = i});
//   int w = *(*c)->CreateVariable({.name = "w", .shape = {10, 1}});
//   std::vector<const float*> values;
//   for (...) { (*c)->Pull(&values); ...compute grads...; (*c)->Push(grads); }
//   (*c)->Done();
//
// Threads: a Client is used by one thread at a time (it keeps per-call buffers); several
// threads of one process need a Client each (and distinct tasks).
// Errors: every call returns a status; none throws. Each RPC has ClientOptions::timeout as its
// deadline; errors name the peer and the call ("Pull at ps:1 127.0.0.1:2222: ..."). Cancelled
// from Pull or Push means the chief is ending the job: stop training and call Done().
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/ps_client.h"  // the low-level sharded pull/push, used by pstrain's own trainer
#include "common/tensor.h"
#include "master.grpc.pb.h"

namespace pstrain {

struct ClientOptions {
  std::string chief = {};            // host:port of the chief's MasterService
  std::vector<std::string> ps = {};  // host:port of every PS task, by task index
  int task = 0;                      // this program's index in the cluster's "worker" job
  // Longest wait to reach the chief and for the start barrier, and the deadline of every call
  // (a sync Pull waiting for slower workers, a Barrier).
  absl::Duration timeout = absl::Seconds(60);
};

struct VariableOptions {
  std::string name = {};            // unique in the job
  std::vector<int64_t> shape = {};  // dims >= 0; [] is a scalar
  InitializerDef initializer = {};  // drawn once by the chief; kind "" means zeros
  OptimizerConfig optimizer = {};   // applied on the PS to every pushed gradient
  // "none", "fixed:N", "min_bytes:B" or "max_bytes:B"; empty = the chief's --partitioner
  std::string partitioner = {};
};

class Client {
 public:
  // Registers as worker `task` with the chief (retried with backoff until `timeout` while the
  // chief is unreachable), then waits at the barrier "pstrain/start", which the chief releases
  // once every task registered and the PS are configured. InvalidArgument for bad options;
  // DeadlineExceeded naming the chief when it cannot be reached in time.
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
  // clock = its number of pushes, is more than the staleness ahead of the slowest worker.
  // Cancelled once the chief ended the job; FailedPrecondition after Done or with no variables.
  absl::Status Pull(std::vector<const float*>* values);

  // Pushes grads[i] for variable i (same order and shapes as created), tagged with the versions
  // the last Pull read. The PS apply them with each variable's optimizer (sync: average them per
  // step). `examples` (the batch size) and `loss` (of this step) only feed the progress reports
  // sent to the chief every 20 pushes. InvalidArgument for a wrong count or shape (nothing is
  // sent); FailedPrecondition without a Pull since the last CreateVariable; Cancelled once the
  // chief ended the job (the push that learns of it still succeeds: it was applied). A failed
  // progress report is returned as this push's error although its gradient was applied.
  absl::Status Push(const std::vector<Tensor>& grads, int64_t examples = 0,
                    std::optional<double> loss = std::nullopt);

  // The smallest variable version read by the last Pull: the global step in sync mode, the
  // number of updates applied in async and ssp mode. 0 before the first Pull.
  int64_t global_step() const { return global_step_; }
  // Pushes done by this client.
  int64_t pushes() const { return pushes_; }

  // Blocks until every worker reached the barrier `name` (MasterService.Barrier); a barrier
  // name is used once per job.
  absl::Status Barrier(const std::string& name);

  // Call once at the end: tells every PS this worker left (so sync steps and ssp clocks stop
  // counting it), then reports to the chief that it is done (steps = pushes). With a non-OK
  // `outcome` reports that this worker failed with that error instead, which ends the job.
  // Later calls other than mode() and global_step() return FailedPrecondition.
  absl::Status Done(const absl::Status& outcome = absl::OkStatus());

  // The job's consistency mode, from the chief: "async", "sync" or "ssp".
  const std::string& mode() const { return mode_; }

 private:
  Client(const ClientOptions& options, std::unique_ptr<MasterService::Stub> master);
  absl::Status CheckUsable() const;
  absl::Status Report(bool done, const std::string& error);
  void RebuildPsClient();

  // Constant after Connect.
  const ClientOptions options_;
  const Sender sender_;
  const std::unique_ptr<MasterService::Stub> master_;
  std::string mode_;

  std::vector<VariableRef> variables_;  // in creation order
  std::unique_ptr<PsClient> ps_;        // over variables_; rebuilt by CreateVariable
  bool pulled_ = false;                 // a Pull since the last CreateVariable
  uint64_t next_min_version_ = 0;       // sync: the step the next Pull waits for
  int64_t global_step_ = 0;
  int64_t pushes_ = 0;
  int64_t examples_ = 0;
  int64_t stale_dropped_ = 0;
  double loss_sum_ = 0;  // since the last progress report
  int loss_count_ = 0;
  double last_loss_ = 0;
  bool stopping_ = false;  // the chief said the job is ending
  bool done_ = false;
};

}  // namespace pstrain
