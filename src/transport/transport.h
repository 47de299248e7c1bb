// The data plane: how the bulk calls between a worker and a PS (Pull and Push, whose tensors are
// most of the bytes of a job) travel, apart from the gRPC control plane (registration,
// configuration, barriers, every other call). A transport has two ends:
//   DataChannel  the client end of one PS task: Pull and Push with the tensors' bytes out of the
//                messages, written straight into the caller's buffers and sent from them;
//   DataHandler  what a transport's server calls for the requests it receives (the PS, over
//                ParameterServer: ps/ps.h MakeDataHandler).
// Implementations: "grpc" (grpc_data_channel.h: the tensors as gRPC slices over their own memory,
// chunked streams past one message), "tcp" (tcp.h: TCP connections of their own) and "ucx"
// (ucx.h: UCX, shared memory between processes of one host only). MakeDataChannel picks one by
// name; DataPlaneServer starts a PS's server ends.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/rpc.h"
#include "ps.pb.h"

namespace pstrain {

// Bytes of one tensor, not owned.
struct ConstBytes {
  const void* data = nullptr;
  int64_t size = 0;
};
struct MutableBytes {
  void* data = nullptr;
  int64_t size = 0;
};

// One call's deadline and cancellation.
struct CallOptions {
  absl::Time deadline = absl::InfiniteFuture();
  // Wait for a PS that is still connecting (or reconnecting) instead of failing at once.
  bool wait_for_ready = true;
  // Not owned; once cancelled, the call ends with Cancelled. Null: not cancellable.
  CallCanceller* canceller = nullptr;
};

// Called exactly once with a call's outcome, inline or later from any thread.
using DoneFn = std::function<void(absl::Status)>;

// The client end of the bulk calls to one PS task. Thread-safe: calls may overlap. Errors name
// the call and the peer as FromGrpcStatus does ("Pull at ps:1 127.0.0.1:2222: ..."), with the
// status code the PS answered (UNAVAILABLE when it cannot be reached, which callers may retry).
class DataChannel {
 public:
  virtual ~DataChannel() = default;
  // Sends `head`, whose gradient i has name, read_version, dtype and shape and no data: its bytes
  // are grads[i] (as many as dtype and shape need). `head` and every grads[i] stay valid and
  // unchanged until `done` runs; `resp` is filled before it.
  virtual void Push(const CallOptions& options, const PushRequest& head,
                    std::vector<ConstBytes> grads, PushResponse* resp, DoneFn done) = 0;
  // Sends `req`; value i's float32 bytes are written into dest[i], which must be exactly as large
  // as that value's shape needs (InvalidArgument naming the variable otherwise, with dest
  // unspecified). resp's values carry name, version, dtype and shape and no data. `req` and
  // every dest[i] stay valid until `done` runs.
  virtual void Pull(const CallOptions& options, const PullRequest& req,
                    std::vector<MutableBytes> dest, PullResponse* resp, DoneFn done) = 0;
  // "grpc", "tcp" or "ucx".
  virtual const char* name() const = 0;
};

// The server end: a transport's server checks the job token (security.h TokenMatches), parses
// each request, and calls these. Thread-safe.
class DataHandler {
 public:
  virtual ~DataHandler() = default;
  // As ParameterServer::Push with its gradients' bytes out of line. `head`, `grads` and `resp`
  // stay valid until `done`.
  virtual void Push(const PushRequest& head, absl::Span<const ConstBytes> grads, PushResponse* resp,
                    DoneFn done) = 0;
  // As ParameterServer::PullAsync with a sink: sink(i, values, count, keep) receives value i's
  // floats under its variable's lock, and resp's values carry no data. The floats stay valid and
  // unchanged for as long as a copy of `keep` lives (an update meanwhile writes a copy of the
  // variable), so a sink may send straight from them, after the lock, by holding `keep`; holding
  // it costs an update to that variable a copy of it, so a sink lets go once the bytes are sent.
  using PullSink = std::function<absl::Status(int index, const float* values, int64_t count,
                                              const std::shared_ptr<const void>& keep)>;
  virtual void Pull(const PullRequest& req, PullResponse* resp, PullSink sink, DoneFn done) = 0;
  // Bytes of the named variable's float32 values (NotFound naming it otherwise): what a streamed
  // push's head is checked against before its bytes are taken, so a head's claim cannot make the
  // server allocate more than the variable holds.
  virtual absl::StatusOr<int64_t> VariableBytes(const std::string& name) = 0;
};

// The data plane's server end of one PS task over `handler` (not owned; it outlives the server):
// the services to register on the PS's gRPC server beside ParameterServerService (the tensor
// streams) and, for "ucx" or "auto", a UCX server for the workers of this host.
class DataPlaneServer {
 public:
  // `transport` as --transport: "grpc"; "tcp" (a TCP listener on `listen_host`, or on every
  // interface when it is empty, tcp.h; an error naming why if it cannot listen); "ucx" (an
  // error naming UCX's reason if it cannot start); "auto" (UCX if it starts, else one warning
  // naming `task` and gRPC only). InvalidArgument for another name.
  static absl::StatusOr<std::unique_ptr<DataPlaneServer>> Start(
      DataHandler* handler, const std::string& transport, const std::string& task,
      const std::string& listen_host = {});
  // Stops (see Stop).
  virtual ~DataPlaneServer() = default;
  // Owned here; the gRPC server they are registered on is shut down before this is destroyed.
  virtual std::vector<grpc::Service*> services() const = 0;
  // What the PS's DataPlane RPC announces: the UCX server's address or the TCP port, or nothing
  // on gRPC only.
  virtual DataPlaneResponse data_plane() const = 0;
  // Stops serving the carriers of its own (TCP, UCX); calls in flight end first. Idempotent.
  virtual void Stop() = 0;
};

// Which transport the channels of this process use, and its settings. Set once at start from
// the task's flags (`--transport`), before any channel is made; read by MakeDataChannel.
struct TransportOptions {
  std::string transport = "grpc";  // "grpc", "tcp" or "ucx"
};
void SetTransportOptions(TransportOptions options);
TransportOptions GetTransportOptions();

// The transport a task asked for as `asked` ("grpc", "tcp", "ucx" or "auto") under this
// process's security (common/security.h): TCP and UCX traffic is not encrypted, so with TLS
// "tcp" and "ucx" are refused and "auto" means "grpc". InvalidArgument naming `source` (the flag or
// variable it came from) for an unknown name and for "ucx" with TLS.
absl::StatusOr<std::string> TransportUnderSecurity(const std::string& asked,
                                                   const std::string& source);

// A channel to the PS at `address` (host:port of its gRPC server) over `transport` ("grpc",
// "tcp" or "ucx"). InvalidArgument for an unknown name; for "tcp" and "ucx", what tcp.h and ucx.h
// say when the PS serves no such data plane or it cannot be reached.
absl::StatusOr<std::unique_ptr<DataChannel>> MakeDataChannel(const std::string& transport,
                                                             const std::string& address);

}  // namespace pstrain
