// The /metrics of a task, in Prometheus's text format: what every task serves (RPCs, bytes,
// memory) and what its role adds. Internal to src/runtime.
#pragma once

#include <string>

#include "master/master.h"
#include "runtime/http_listener.h"

namespace pstrain {

class ParameterServer;
class Worker;

// What a task's metrics are read from; the pointers not null for its role, and valid while the
// listener serves.
struct MetricsSource {
  std::string task;  // "ps:0"
  ParameterServer* ps = nullptr;
  Worker* worker = nullptr;
  const JobMonitor* monitor = nullptr;  // the chief's
};

// The task's metrics page (docs/metrics.md lists every metric): the process's (build, task,
// memory, CPU), the RPCs it served (common/rpc_metrics.h), and its role's.
std::string MetricsPage(const MetricsSource& source);

// Adds /metrics (the page) and /healthz (200 "ok" while the listener serves) to `listener`,
// both open, without the token.
void ServeMetrics(HttpListener* listener, const MetricsSource& source);

}  // namespace pstrain
