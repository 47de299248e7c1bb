// The parameter server: variables, their optimizers, and the gRPC service that carries them.
// Public header of src/ps.
#pragma once

#include <functional>
#include <memory>
#include <string>

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
  // Values and versions of the named variables, in request order. NotFound names an unknown one.
  virtual absl::Status Pull(const PullRequest& req, PullResponse* resp) = 0;
  // Applies each gradient with its variable's optimizer and bumps the version. Rejects the whole
  // push (NotFound / InvalidArgument) for an unknown variable, a shape mismatch, a non-finite
  // value, a repeated name, or a read_version newer than the variable.
  virtual absl::Status Push(const PushRequest& req, PushResponse* resp) = 0;
};

// The gRPC ParameterServerService (callback API) over `ps`, which must outlive it. A Shutdown
// RPC calls `on_shutdown(reason)` once and returns; the caller stops the server.
std::unique_ptr<grpc::Service> MakeParameterServerService(
    ParameterServer* ps, std::function<void(const std::string&)> on_shutdown);

}  // namespace pstrain
