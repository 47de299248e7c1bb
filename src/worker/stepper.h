// Internal to src/worker: one training step of a worker (read the parameters, forward and
// backward, push the gradients) and the progress reports of a run, shared by the shard loop
// (trainer.cc) and the task queue's loop (task_loop.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/session.h"
#include "common/examples.h"
#include "model/model.h"
#include "worker/trainer.h"

namespace pstrain {

// The model's variables with their shards as the spec places them, and its tables as the spec
// names them, in the model's order; InvalidArgument naming what does not match.
absl::StatusOr<std::vector<VariableRef>> VariablesOf(const TrainingSpec& spec, const Model& model,
                                                     int num_ps);
absl::StatusOr<std::vector<TableRef>> TablesOf(const TrainingSpec& spec, const Model& model);

// Not thread-safe: one per run.
class Stepper {
 public:
  enum class Outcome { kNext, kReachedTotal, kStop };
  // ValidateSpec accepted `spec`; `data` and `options` outlive the Stepper.
  Stepper(const TrainingSpec& spec, const Examples& data, const TrainerOptions& options);
  ~Stepper();

  // One step on the rows order[at, at + batch_size) of the data, in epoch `epoch`, its push
  // tagged with `tag` (may be null). kReachedTotal: sync without the task queue, the global
  // step reached total_steps (nothing pushed). kStop: stopped, or failed (reported).
  Outcome Step(const std::vector<int64_t>& order, size_t at, int epoch, const PushTag* tag);
  // Ends the run with `s`: reported to the chief as its error, unless the run was stopped from
  // outside or `s` refuses this run's generation (the run was superseded: it ends quietly).
  void Fail(const absl::Status& s);
  // Sends the progress so far; false when the worker should stop.
  bool Send();
  // Leaves every PS for good and reports done.
  void Finish();
  bool stopped() const { return options_.stop->load(); }

  ParameterSession& params() { return *params_; }
  int64_t steps() const { return report_.steps(); }
  const Sender& sender() const { return options_.sender; }

 private:
  // `call()`, again with backoff within the rpc timeout while it fails NotFound in a run with a
  // generation (recovery on): a PS that restarted holds nothing until the chief rolls back,
  // whose refusal of this generation then ends the run quietly.
  absl::Status UntilRestored(const std::function<absl::Status()>& call);

  const TrainingSpec& spec_;
  const Examples& data_;
  const TrainerOptions& options_;
  const bool sync_, ssp_;
  const int64_t steps_per_epoch_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<ParameterSession> params_;
  ProgressRequest report_;
  double loss_sum_ = 0;
  int loss_count_ = 0;
  uint64_t next_step_ = 0;  // sync: the global step this worker waits for
  Examples batch_;
  ModelInputs inputs_;
  ModelGrads grads_;
};

}  // namespace pstrain
