// Internal to src/worker: the task queue's loop of a run (docs/recovery.md).
#pragma once

#include <cstdint>

#include "worker/stepper.h"
#include "worker/trainer.h"

namespace pstrain {

// Asks the chief for tasks and trains on each (TaskOrder, in batches tagged {epoch, task,
// batch}) until FINISHED, then leaves and reports done; `rows` is the number of training rows.
void TrainOnTasks(const TrainingSpec& spec, int64_t rows, const TrainerOptions& options,
                  Stepper* stepper);

}  // namespace pstrain
