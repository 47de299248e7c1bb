// The parameter server: variables, their optimizers, and the gRPC service that carries them.
// Public header of src/ps.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "ps.grpc.pb.h"

namespace pstrain {

// Variables held by one PS task, independent of transport. All methods are thread-safe and
// validate the whole request before changing anything: a request that returns an error has
// changed nothing. Pushes to one variable are serialised by that variable's lock, so concurrent
// pushes are never lost; pushes to different variables run in parallel.
class ParameterServer {
 public:
  struct Options {
    int task = 0;  // this PS's index in the "ps" job, used in messages
  };
  static absl::StatusOr<std::unique_ptr<ParameterServer>> Create(const Options& options);
  virtual ~ParameterServer() = default;

  // Creates each variable with its initial value and optimizer. AlreadyExists if a name is taken
  // (or repeated in the request); InvalidArgument for an empty name, a bad tensor, an unknown
  // optimizer or bad hyper-parameters.
  virtual absl::Status CreateVariables(const CreateVariablesRequest& req,
                                       CreateVariablesResponse* resp) = 0;
  // Sets how pushes combine (async, sync k-of-n, ssp) and which workers may push. Call before
  // variables exist; without it the server runs async and accepts any sender.
  virtual absl::Status Configure(const ConfigureRequest& req, ConfigureResponse* resp) = 0;

  // Values and versions of the named variables, in request order. NotFound names an unknown one.
  // In sync mode the pull waits until every named variable reached req.min_version; in ssp mode
  // it waits while req.clock runs more than `staleness` ahead of the slowest worker. `done` is
  // called exactly once, inline or later from another thread; `resp` must stay valid until then.
  // A wait longer than the configured wait timeout ends with DeadlineExceeded saying what it
  // waited for.
  virtual void PullAsync(const PullRequest& req, PullResponse* resp,
                         std::function<void(absl::Status)> done) = 0;
  // PullAsync, waiting for `done`.
  absl::Status Pull(const PullRequest& req, PullResponse* resp);

  // Applies each gradient with its variable's optimizer and bumps the version. Rejects the whole
  // push (NotFound / InvalidArgument / PermissionDenied) for an unknown variable, a shape
  // mismatch, a non-finite value (counted), a repeated name, a read_version newer than the
  // variable, or a worker the chief did not announce. In sync mode a gradient is accumulated for
  // the step it was read at; the k-th one applies their average. A gradient for an older step is
  // dropped and counted (resp->stale_dropped), not an error.
  virtual absl::Status Push(const PushRequest& req, PushResponse* resp) = 0;

  // The worker finished: it no longer holds back ssp clocks.
  virtual absl::Status Leave(const LeaveRequest& req, LeaveResponse* resp) = 0;
  virtual absl::Status Stats(const StatsRequest& req, StatsResponse* resp) = 0;
  // Ends every waiting pull with Unavailable and refuses new waits; called before the server
  // stops so no call is left open.
  virtual void Stop() = 0;
};

// Called once when the chief ends the job: why, and whether the job succeeded.
using ShutdownFn = std::function<void(const std::string& reason, bool job_succeeded)>;

// The gRPC ParameterServerService (callback API) over `ps`, which must outlive it. A Shutdown
// RPC calls `on_shutdown` once and returns; the caller stops the server.
std::unique_ptr<grpc::Service> MakeParameterServerService(ParameterServer* ps,
                                                          ShutdownFn on_shutdown);

}  // namespace pstrain
