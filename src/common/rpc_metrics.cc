#include "common/rpc_metrics.h"

namespace pstrain {

void ObserveServedRpc(absl::string_view method, absl::StatusCode code, size_t request_bytes,
                      size_t response_bytes, absl::Duration latency) {}

}  // namespace pstrain
