// The UCX transport (Debian's libucx): the data plane's bulk calls over UCP, which picks shared
// memory between processes of one host and TCP between hosts. Wire format, threads, deadlines,
// the fallback rule and TLS: docs/transport_ucx.md.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "transport/transport.h"

namespace pstrain {

// A DataChannel to the PS whose gRPC server is at `address`: asks it (the DataPlane RPC) for its
// UCX listener and connects to it. FailedPrecondition naming the PS if it serves no UCX;
// Unavailable naming UCX's error if UCX cannot start or connect (within 10 s). Calls' `done`
// run in order on a thread of the channel: do not destroy the channel in one.
// CallOptions::wait_for_ready has no effect: a lost connection is made again by the next call.
absl::StatusOr<std::unique_ptr<DataChannel>> MakeUcxDataChannel(const std::string& address);

// A UCX listener serving `handler`. Thread-safe.
class UcxServer {
 public:
  // Listens on `host` (a port chosen by the system); `handler` is not owned and must outlive
  // the server. Unavailable naming UCX's error if UCX cannot start.
  static absl::StatusOr<std::unique_ptr<UcxServer>> Start(DataHandler* handler,
                                                          const std::string& host);
  virtual ~UcxServer() = default;
  // host:port of the listener, for DataPlaneResponse.ucx_address.
  virtual std::string address() const = 0;
  // Stops listening and ends every connection; calls in flight end first. Idempotent.
  virtual void Stop() = 0;
};

}  // namespace pstrain
