// Internal to src/worker: the training loop of one worker.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/rpc.h"
#include "data/data.h"
#include "master.pb.h"
#include "worker.pb.h"

namespace pstrain {

// Checks a spec against the cluster and the loaded data; InvalidArgument names the bad field.
absl::Status ValidateSpec(const TrainingSpec& spec, int num_ps, const Dataset& data);

struct TrainerOptions {
  int task = 0;
  std::vector<std::string> ps_addresses;
  // Sends a report to the chief; returns false when the worker should stop (job ending or chief
  // unreachable).
  std::function<bool(const ProgressRequest&)> report;
  const std::atomic<bool>* stop = nullptr;  // set from outside to stop at the next step
  CallCanceller* cancel = nullptr;          // ends the calls to the PS in flight, if set
};

// Trains for spec.epochs over this worker's shard of `data`: pull, forward and backward, push.
// Reports every spec.report_every steps and once at the end (done or error).
void Train(const TrainingSpec& spec, const Dataset& data, const TrainerOptions& options);

}  // namespace pstrain
