#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "transport/grpc_data_channel.h"
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

absl::StatusOr<std::unique_ptr<DataChannel>> MakeDataChannel(const std::string& transport,
                                                             const std::string& address) {
  if (transport == "ucx") return MakeUcxDataChannel(address);
  if (transport == "grpc") return MakeGrpcDataChannel(address);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown transport \"", transport, "\": grpc or ucx"));
}

}  // namespace pstrain
