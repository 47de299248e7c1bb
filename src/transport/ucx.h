// The UCX transport (Debian's libucx): the data plane's bulk calls over UCP between processes of
// one host, over shared memory only. No socket: a client gets the PS's UCP worker address from
// the DataPlane RPC (gRPC, behind the job token and TLS), so no byte from the network reaches
// UCX. Wire format, threads, deadlines, the fallback rule and TLS: docs/transport_ucx.md.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "transport/transport.h"

namespace pstrain {

// A DataChannel to the PS whose gRPC server is at `address`: asks it (the DataPlane RPC) for its
// UCP worker address and connects to it. FailedPrecondition naming the PS if it serves no UCX,
// or runs on another host (UCX here carries same-host traffic only); Unavailable naming UCX's
// error if UCX cannot start or connect (within 10 s). Calls' `done` run in order on a thread of
// the channel: do not destroy the channel in one.
// CallOptions::wait_for_ready has no effect: a lost connection is made again by the next call.
absl::StatusOr<std::unique_ptr<DataChannel>> MakeUcxDataChannel(const std::string& address);

// A UCP worker serving `handler` to the clients of this host that know its address. It opens
// no socket. Thread-safe.
class UcxServer {
 public:
  // `handler` is not owned and must outlive the server. Unavailable naming UCX's error if UCX
  // cannot start.
  static absl::StatusOr<std::unique_ptr<UcxServer>> Start(DataHandler* handler);
  virtual ~UcxServer() = default;
  // What the DataPlane RPC announces: the worker's address and this host's boot id.
  virtual DataPlaneResponse data_plane() const = 0;
  // Stops serving and ends every connection; calls in flight end first. Idempotent.
  virtual void Stop() = 0;
};

}  // namespace pstrain
