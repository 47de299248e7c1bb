// What every part needs to talk gRPC: status conversion (the only place absl::Status and
// grpc::Status meet), channels, deadlines, and retry with backoff.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/limits.h"
#include "grpcpp/grpcpp.h"
#include "tensor.pb.h"

namespace pstrain {

grpc::Status ToGrpcStatus(const absl::Status& s);
absl::Status FromGrpcStatus(const grpc::Status& s);
// Adds "while calling <what> at <address>: " so the message says which peer failed.
absl::Status FromGrpcStatus(const grpc::Status& s, const std::string& what,
                            const std::string& address);

// A channel to host:port with this process's security (security.h: TLS, and the job token on
// every call) and pstrain's message size limits. It reconnects quickly
// (100 ms growing to 1 s) and gives each connection attempt gRPC's default 20 s. The first
// channel or server routes gRPC's own log lines to spdlog at debug level.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address);

// Builds a server on `address` with this process's security (TLS) and pstrain's limits;
// SO_REUSEPORT is off so a port already in use is an error instead of a silent second listener.
// Returns the error naming the address. `bound_port`, if given, receives the port listened on (the
// one picked for port 0).
absl::StatusOr<std::unique_ptr<grpc::Server>> StartGrpcServer(
    const std::string& address, const std::vector<grpc::Service*>& services,
    int* bound_port = nullptr);

// A client context whose deadline is `timeout` from now. With `wait_for_ready` the call waits
// (within the deadline) for a channel that is still connecting instead of failing at once with
// UNAVAILABLE; use it for calls to a peer that may not be up yet.
std::unique_ptr<grpc::ClientContext> ContextWithTimeout(absl::Duration timeout,
                                                        bool wait_for_ready = false);

// Calls `attempt` until it returns OK or a non-retryable error, sleeping with exponential backoff
// (50 ms doubling to 2 s) between tries; UNAVAILABLE and DEADLINE_EXCEEDED are retried until
// `deadline` has passed. The final error says what was waited for for how long.
absl::Status RetryUntil(absl::Duration deadline, const std::string& what,
                        const std::function<absl::Status()>& attempt);

// Cancels the client calls registered with it: those in flight when Cancel is called, and at
// once any registered after. Lets a process that is stopping end calls that would otherwise wait
// out their deadline (a pull waiting for a PS that is gone). Thread-safe.
class CallCanceller {
 public:
  void Cancel();
  bool cancelled() const;
  // Registers `ctx` for a call about to start or in flight; a later Cancel cancels it. If Cancel
  // already ran, cancels `ctx` now. Remove it before `ctx` is destroyed.
  void Add(grpc::ClientContext* ctx);
  void Remove(grpc::ClientContext* ctx);

 private:
  mutable absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<grpc::ClientContext*> active_ ABSL_GUARDED_BY(mu_);
};

// Identity of this process in requests. The incarnation is random per process.
Sender MakeSender(const std::string& job, int task);
// "ps:1"
std::string TaskName(const std::string& job, int task);

}  // namespace pstrain
