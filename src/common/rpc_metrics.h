// What the services report about every call they serve, for the task's /metrics.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/prometheus.h"

namespace pstrain {

// One call of `method` served: its outcome, the bytes of its request and response (0 when none
// was sent) and the time from its arrival to its finish. Thread-safe and cheap: every call of
// every service reports here (raw_call.h). Once a method has been seen, a call is a hash of its
// name, a probe of a fixed table and a few relaxed atomic adds; no lock, no allocation.
void ObserveServedRpc(absl::string_view method, absl::StatusCode code, size_t request_bytes,
                      size_t response_bytes, absl::Duration latency);

// Whether ObserveServedRpc records anything (default true); for measuring its cost.
void SetRpcMetricsEnabled(bool enabled);

// The upper bounds of pstrain_rpc_latency_seconds's buckets, in seconds: 50us to 10s.
const std::vector<double>& RpcLatencyBounds();

// Calls of `method` served so far with `code`; 0 for a method never seen.
uint64_t ServedRpcCount(absl::string_view method, absl::StatusCode code);

// Writes pstrain_rpc_requests_total{method,code}, pstrain_rpc_latency_seconds{method},
// pstrain_rpc_received_bytes_total{method} and pstrain_rpc_sent_bytes_total{method} for every
// method served so far in this process, sorted by method.
void WriteRpcMetrics(PrometheusText* out);

}  // namespace pstrain
