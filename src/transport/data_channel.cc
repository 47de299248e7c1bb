#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/security.h"
#include "spdlog/spdlog.h"
#include "transport/grpc_data_channel.h"
#include "transport/tcp.h"
#include "transport/transport.h"
#include "transport/ucx.h"

namespace pstrain {
namespace {

absl::Mutex options_mu;
TransportOptions& Options() ABSL_EXCLUSIVE_LOCKS_REQUIRED(options_mu) {
  static TransportOptions* options = new TransportOptions;
  return *options;
}

}  // namespace

void SetTransportOptions(TransportOptions options) {
  absl::MutexLock lock(&options_mu);
  Options() = std::move(options);
}

TransportOptions GetTransportOptions() {
  absl::MutexLock lock(&options_mu);
  return Options();
}

absl::StatusOr<std::string> TransportUnderSecurity(const std::string& asked,
                                                   const std::string& source) {
  if (asked != "grpc" && asked != "ucx" && asked != "auto" && asked != "tcp") {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": unknown transport \"", asked, "\": grpc, tcp, ucx or auto"));
  }
  if (asked == "tcp" && GetSecurity()->tls()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, " tcp cannot be used with TLS: the TCP data plane is not encrypted (use grpc)"));
  }
  if (asked == "grpc" || !GetSecurity()->tls()) return asked;
  if (asked == "auto") return std::string("grpc");
  return absl::InvalidArgumentError(
      absl::StrCat(source,
                   " ucx cannot be used with TLS: UCX traffic is not encrypted (use grpc, or auto, "
                   "which then picks grpc)"));
}

absl::StatusOr<std::unique_ptr<DataChannel>> MakeDataChannel(const std::string& transport,
                                                             const std::string& address) {
  if (transport == "ucx") return MakeUcxDataChannel(address);
  if (transport == "tcp") return MakeTcpDataChannel(address);
  if (transport == "auto") {  // UCX where it works, else gRPC (docs/transport_ucx.md)
    absl::StatusOr<std::unique_ptr<DataChannel>> ucx = MakeUcxDataChannel(address);
    if (ucx.ok()) return ucx;
    static std::once_flag warned;
    std::call_once(warned, [&] {
      spdlog::warn("the data plane falls back to gRPC: {}", ucx.status().ToString());
    });
    return MakeDataChannel("grpc", address);
  }
  if (transport == "grpc") return MakeGrpcDataChannel(address);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown transport \"", transport, "\": grpc, tcp, ucx or auto"));
}

}  // namespace pstrain
