// The TCP transport: the data plane's bulk calls over plain TCP connections of their own, beside
// the gRPC control plane, between hosts and on one host. A PS listens on a port of its own (any
// free one, announced by the DataPlane RPC, which travels over gRPC behind the job token); a
// client opens connections to it as its calls need them, says hello with the job token on each,
// then sends its pushes from the gradients' memory and reads its pulls straight into their
// destinations. Wire format, threads, limits and TLS: docs/transport_tcp.md.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "transport/transport.h"

namespace pstrain {

// A DataChannel to the PS whose gRPC server is at `address`: asks it (the DataPlane RPC) for its
// TCP port and connects there, at the host of `address`. FailedPrecondition naming the PS if it
// serves no TCP data plane; DeadlineExceeded if its gRPC server does not answer within 10 s,
// Unavailable if its TCP port cannot be reached. Calls' `done` run
// on the channel's threads: do not destroy the channel in one. CallOptions::wait_for_ready has
// no effect: a lost connection is made again by the next call.
absl::StatusOr<std::unique_ptr<DataChannel>> MakeTcpDataChannel(const std::string& address);

// A TCP listener serving `handler` at a free port.
class TcpServer {
 public:
  // Listens on `host` (a name or address, "[::1]" as "::1"), or on every interface when it is
  // empty. `handler` is not owned and must outlive the server. Unavailable naming the system's
  // reason if the port cannot be opened.
  static absl::StatusOr<std::unique_ptr<TcpServer>> Start(DataHandler* handler,
                                                          const std::string& host = {});
  virtual ~TcpServer() = default;
  virtual int port() const = 0;
  // Stops listening and ends every connection at once (a call in flight ends UNAVAILABLE at its
  // client), after the handler's calls running on them return. Idempotent; from one thread.
  virtual void Stop() = 0;
};

}  // namespace pstrain
