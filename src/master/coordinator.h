// Internal to src/master: the chief's view of the cluster (who registered, how far each worker
// got) and the MasterService that feeds it.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "master.grpc.pb.h"

namespace pstrain {

struct WorkerProgress {
  int epoch = 0;
  int64_t nonfinite_skipped = 0;
  int64_t stale_dropped = 0;
  int64_t steps = 0;
  int64_t examples = 0;
  double loss = 0;
  bool done = false;
  std::string error;
  absl::Time last_report = absl::InfinitePast();
};

// Thread-safe. Filled by MasterService handlers, read by the job loop.
class Coordinator {
 public:
  Coordinator(int num_ps, int num_workers);

  // Registers a task; InvalidArgument for an unknown job or a task index outside the cluster.
  absl::Status Register(const RegisterRequest& req, RegisterResponse* resp);
  // The workers as they registered (with their incarnations), by task.
  std::vector<Sender> Workers() const;
  // The job's consistency mode, told to registering tasks.
  void SetMode(const std::string& mode);
  // Opens the "pstrain/start" barrier: the PS are configured.
  void SetReady();

  // Calls `done` once every worker reached barrier `name` (and, for "pstrain/start", the
  // cluster is ready), or with an error for a sender that is not a registered worker. `done` may
  // run inline or on the thread that completes the barrier.
  void Barrier(const BarrierRequest& req, std::function<void(absl::Status)> done);
  // Serves CreateVariable for client programs; unset = FailedPrecondition.
  using CreateVariableFn = std::function<absl::StatusOr<Placement>(const VariableSpec&)>;
  void SetCreateVariable(CreateVariableFn fn);
  absl::Status CreateVariable(const CreateVariableRequest& req, CreateVariableResponse* resp);
  // Records a worker's report; InvalidArgument from a task that is not a registered worker.
  // Sets *stop when the job is ending.
  absl::Status Report(const ProgressRequest& req, bool* stop);

  // Waits until every PS and worker registered. DeadlineExceeded lists the missing tasks.
  absl::Status WaitForRegistration(absl::Duration timeout);
  // Waits up to `timeout` for the next report (or for the job to end). Returns a snapshot.
  std::vector<WorkerProgress> WaitForReport(absl::Duration timeout);
  // Tells workers to stop at their next report.
  void RequestStop();

 private:
  bool IsWorker(const Sender& s) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseBarriers() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int num_ps_;
  const int num_workers_;
  mutable absl::Mutex mu_;
  std::vector<bool> ps_registered_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> worker_registered_ ABSL_GUARDED_BY(mu_);
  std::vector<Sender> workers_ ABSL_GUARDED_BY(mu_);
  std::string mode_ ABSL_GUARDED_BY(mu_) = "async";
  bool ready_ ABSL_GUARDED_BY(mu_) = false;
  struct BarrierState {
    std::vector<bool> arrived;
    std::vector<std::function<void(absl::Status)>> waiting;
  };
  std::map<std::string, BarrierState> barriers_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void(absl::Status)>> released_ ABSL_GUARDED_BY(mu_);
  CreateVariableFn create_variable_ ABSL_GUARDED_BY(mu_);
  std::vector<WorkerProgress> progress_ ABSL_GUARDED_BY(mu_);
  int64_t reports_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
};

// gRPC MasterService (callback API) over a Coordinator that must outlive it.
std::unique_ptr<grpc::Service> MakeMasterService(Coordinator* coordinator);

}  // namespace pstrain
