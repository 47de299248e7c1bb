// Internal to src/worker: the training loop of one worker, for any model behind model/model.h.
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/client.h"
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
  // On every request of this run, to the PS and the chief: this worker with the run's
  // generation (docs/recovery.md).
  Sender sender;
  // Sends a report to the chief; returns false when the worker should stop (job ending or chief
  // unreachable).
  std::function<bool(const ProgressRequest&)> report;
  // With spec.task_queue: the chief's answer to NextTask (TASK, WAIT or FINISHED), and the report
  // that a task is done; an error ends training (reported, unless it refuses this generation).
  std::function<absl::StatusOr<NextTaskResponse>()> next_task;
  std::function<absl::Status(const TaskDoneRequest&)> task_done;
  const std::atomic<bool>* stop = nullptr;  // set from outside to stop at the next step
  CallCanceller* cancel = nullptr;          // ends the calls to the PS in flight, if set
};

// Whether `s` refuses work of another generation (FAILED_PRECONDITION naming the generation,
// from a PS or the chief): the run was superseded by a rollback and ends quietly.
bool OtherGeneration(const absl::Status& s);

// Task `t` of the chief's queue as client programs get it (client/client.h), in batches of
// `batch_size`: its rows in the order Task::Rows draws from the seed the chief gave it, so the
// built-in trainer and a program cut the same batch k of a task, whoever trains or redoes it.
Task TaskOf(const TaskAssignment& t, int64_t batch_size);

// With spec.task_queue, trains on the tasks options.next_task hands out (rows of `data`) until
// the chief says FINISHED, reporting each one done; every push carries PushTag{epoch, task,
// batch}. In sync mode each batch is one step and a worker told WAIT leaves the step barrier
// (Leave with pause) until its next push; in ssp mode likewise for the clocks. Otherwise trains
// for spec.epochs over `data` (this worker's shard, checked by ValidateSpec and CheckShard) or,
// in sync mode, until the global step reaches spec.total_steps: per step the keys the batch
// touches, a pull of the dense parameters and a lookup of the table rows (in parallel), forward
// and backward, a push of both gradients (dense ones as spec.push_dtype). With
// spec.overlap_pull (async and ssp) the dense pull of step t+1 is in flight while step t
// computes and pushes, so gradients are computed from values one step staler than in that order.
// Reports every spec.report_every steps and once at the end (done or error).
void Train(const TrainingSpec& spec, const Examples& data, const TrainerOptions& options);

}  // namespace pstrain
