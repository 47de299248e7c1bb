// What the services report about every call they serve, for the task's /metrics.
#pragma once

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace pstrain {

// One call of `method` served: its outcome, the bytes of its request and response (0 when none
// was sent) and the time from its arrival to its finish. Thread-safe and cheap: every call of
// every service reports here (raw_call.h).
void ObserveServedRpc(absl::string_view method, absl::StatusCode code, size_t request_bytes,
                      size_t response_bytes, absl::Duration latency);

}  // namespace pstrain
