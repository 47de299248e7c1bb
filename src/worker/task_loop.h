// Internal to src/worker: the task queue's loop of a run (docs/recovery.md).
#pragma once

#include <cstdint>
#include <vector>

#include "worker/stepper.h"
#include "worker/trainer.h"

namespace pstrain {

// The rows of `data` a task's order of records trains on, in that order: a record that gave no
// row (a header, a bad line skipped: Examples::records) is left out.
std::vector<int64_t> RowsOfRecords(const std::vector<int64_t>& records, const Examples& data);

// Asks the chief for tasks and trains on each (TaskOf's order, in batches tagged {epoch, task,
// batch}) until FINISHED, then leaves and reports done. A task's rows are training records of
// spec.train_records(), read into `data` (all of them).
void TrainOnTasks(const TrainingSpec& spec, const Examples& data, const TrainerOptions& options,
                  Stepper* stepper);

}  // namespace pstrain
