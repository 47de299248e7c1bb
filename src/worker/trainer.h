// Internal to src/worker: the training loop of one worker, for any model behind model/model.h.
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/examples.h"
#include "common/rpc.h"
#include "master.pb.h"
#include "model/model.h"
#include "worker.pb.h"

namespace pstrain {

// The model a spec describes.
ModelConfig ModelConfigOf(const ModelSpec& spec);

// Checks a spec against the cluster before any data is read: the data spec, the shard, the
// model, its placement and tables, the mode and the loop's settings. InvalidArgument names the
// bad field.
absl::Status ValidateSpec(const TrainingSpec& spec, int num_ps);

// This worker's shard of the training records (TrainingSpec.train_records), read from the data.
absl::StatusOr<Examples> ReadShard(const TrainingSpec& spec);

// Checks the shard against the model: its dense features, and for a classifier that every label
// is one of its classes. InvalidArgument naming the data and the example otherwise.
absl::Status CheckShard(const TrainingSpec& spec, const Examples& data);

struct TrainerOptions {
  int task = 0;
  std::vector<std::string> ps_addresses;
  // Sends a report to the chief; returns false when the worker should stop (job ending or chief
  // unreachable).
  std::function<bool(const ProgressRequest&)> report;
  // With spec.task_queue: the next task from the chief (nullopt: none is left), and the report
  // that a task is done; an error ends training (reported).
  std::function<absl::StatusOr<std::optional<TaskAssignment>>()> next_task;
  std::function<absl::Status(const TaskDoneRequest&)> task_done;
  const std::atomic<bool>* stop = nullptr;  // set from outside to stop at the next step
  CallCanceller* cancel = nullptr;          // ends the calls to the PS in flight, if set
};

// With spec.task_queue, trains on the tasks options.next_task hands out (rows of `data`) until
// none is left, reporting each one done. Otherwise trains for spec.epochs over `data` (this
// worker's shard, checked by ValidateSpec and CheckShard): per step the keys the batch touches, a
// pull of the dense parameters and a lookup of the table rows (in parallel), forward and backward,
// a push of both gradients. Reports every spec.report_every steps and once at the end (done or
// error).
void Train(const TrainingSpec& spec, const Examples& data, const TrainerOptions& options);

}  // namespace pstrain
