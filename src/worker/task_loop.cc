#include "worker/task_loop.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace pstrain {
namespace {

// Sleeps `d`, waking early once `stopper` is stopped.
void SleepUnlessStopped(absl::Duration d, const Stepper& stepper) {
  for (const absl::Time end = absl::Now() + d; !stepper.stopped() && absl::Now() < end;) {
    absl::SleepFor(std::min(absl::Milliseconds(20), end - absl::Now()));
  }
}

}  // namespace

bool OtherGeneration(const absl::Status& s) {
  return absl::IsFailedPrecondition(s) && absl::StrContains(s.message(), "generation");
}

Task TaskOf(const TaskAssignment& t, int64_t batch_size) {
  return Task{.epoch = t.epoch(),
              .index = t.task(),
              .begin = t.begin(),
              .end = t.end(),
              .seed = t.seed(),
              .batch_size = batch_size};
}

std::vector<int64_t> RowsOfRecords(const std::vector<int64_t>& records, const Examples& data) {
  if (data.records.empty()) return records;  // row r is record r
  std::vector<int64_t> rows;
  rows.reserve(records.size());
  for (int64_t r : records) {
    const auto at = std::lower_bound(data.records.begin(), data.records.end(), r);
    if (at != data.records.end() && *at == r) rows.push_back(at - data.records.begin());
  }
  return rows;
}

void TrainOnTasks(const TrainingSpec& spec, const Examples& data, const TrainerOptions& options,
                  Stepper* stepper) {
  const int64_t records = spec.train_records();
  // Sync and ssp: a worker with no task must not hold back the others' steps or clocks.
  const bool pause_when_waiting = spec.mode() == "sync" || spec.mode() == "ssp";
  bool paused = false;
  while (!stepper->stopped()) {
    absl::StatusOr<NextTaskResponse> next = options.next_task();
    if (!next.ok()) return stepper->Fail(next.status());
    if (next->kind() == NextTaskResponse::FINISHED) return stepper->Finish();
    if (next->kind() != NextTaskResponse::TASK) {  // WAIT: every task is handed out
      if (pause_when_waiting && !paused) {
        if (absl::Status s = stepper->params().Leave(/*pause=*/true); !s.ok()) {
          return stepper->Fail(s);
        }
        paused = true;
      }
      SleepUnlessStopped(absl::Seconds(std::clamp(next->retry_after_s(), 0.01, 1.0)), *stepper);
      continue;
    }
    paused = false;  // the next push rejoins
    const TaskAssignment& t = next->task();
    if (t.begin() < 0 || t.end() <= t.begin() || t.end() > records) {
      return stepper->Fail(absl::InvalidArgumentError(
          absl::StrCat("the chief handed out rows [", t.begin(), ", ", t.end(), ") of task ",
                       t.task(), "; the data has ", records)));
    }
    const std::vector<int64_t> order = RowsOfRecords(TaskOf(t, spec.batch_size()).Rows(), data);
    const int64_t steps_before = stepper->steps();
    PushTag tag;
    tag.set_epoch(t.epoch());
    tag.set_task(t.task());
    for (size_t at = 0; at < order.size(); at += spec.batch_size()) {
      tag.set_batch(static_cast<int64_t>(at / spec.batch_size()));
      if (stepper->Step(order, at, t.epoch(), &tag) != Stepper::Outcome::kNext) return;
    }
    TaskDoneRequest done;
    *done.mutable_sender() = stepper->sender();
    done.set_epoch(t.epoch());
    done.set_task(t.task());
    done.set_steps(stepper->steps() - steps_before);
    done.set_examples(static_cast<int64_t>(order.size()));
    if (absl::Status s = options.task_done(done); !s.ok()) return stepper->Fail(s);
  }
}

}  // namespace pstrain
