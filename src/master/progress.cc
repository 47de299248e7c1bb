#include "master/progress.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/rpc.h"

namespace pstrain {

std::string WholeSeconds(absl::Duration d) {
  if (d < absl::Seconds(1)) return "0s";
  return absl::FormatDuration(absl::Trunc(d, absl::Seconds(1)));
}

ProgressView ViewOf(const std::vector<WorkerProgress>& progress, const JobResult& result,
                    int epochs, absl::Duration elapsed) {
  ProgressView view;
  if (epochs > 0) {
    view.epoch = epochs;
    for (const WorkerProgress& p : progress) {
      view.epoch = std::min(view.epoch, p.done ? epochs : p.epoch + 1);
    }
    view.epochs = epochs;
  }
  view.step = result.global_step;
  view.total = result.total_steps;
  view.loss = result.final_loss;
  view.has_loss = result.loss_reported;
  view.elapsed = elapsed;
  view.examples_per_sec = result.examples / std::max(absl::ToDoubleSeconds(elapsed), 1e-9);
  return view;
}

double EtaSeconds(const ProgressView& v) {
  if (v.total <= 0 || v.step <= 0) return -1;
  const int64_t left = v.total > v.step ? v.total - v.step : 0;
  return absl::ToDoubleSeconds(v.elapsed) / static_cast<double>(v.step) * left;
}

std::string ProgressLine(const ProgressView& v) {
  std::string line = "progress ";
  if (v.epochs > 0) absl::StrAppend(&line, "epoch ", v.epoch, "/", v.epochs, " ");
  absl::StrAppend(&line, "step ", v.step);
  if (v.total > 0) absl::StrAppend(&line, "/", v.total);
  if (v.has_loss) absl::StrAppendFormat(&line, " loss %.4g", v.loss);
  absl::StrAppendFormat(&line, " examples/s %.0f elapsed %s", v.examples_per_sec,
                        WholeSeconds(v.elapsed));
  if (const double eta = EtaSeconds(v); eta >= 0) {
    absl::StrAppend(&line, " eta ", WholeSeconds(absl::Seconds(eta)));
  }
  return line;
}

absl::Status CheckWorkers(const std::vector<WorkerProgress>& progress,
                          const std::vector<absl::Time>& alive, absl::Time now,
                          absl::Duration task_timeout) {
  for (size_t t = 0; t < progress.size(); ++t) {
    if (!progress[t].error.empty()) {
      return absl::AbortedError(
          absl::StrCat(TaskName("worker", t), " failed: ", progress[t].error));
    }
  }
  for (size_t t = 0; t < progress.size(); ++t) {
    const WorkerProgress& p = progress[t];
    if (p.done || !p.barrier.empty()) continue;
    if (now - std::max(p.last_report, alive[t]) <= task_timeout) continue;
    std::string msg =
        absl::StrCat(TaskName("worker", t), " sent no progress for ", WholeSeconds(task_timeout));
    for (size_t o = 0; o < progress.size(); ++o) {
      if (!progress[o].barrier.empty()) {
        absl::StrAppend(&msg, "; ", TaskName("worker", o), " waits at barrier \"",
                        progress[o].barrier, "\"");
      }
    }
    return absl::DeadlineExceededError(msg);
  }
  return absl::OkStatus();
}

}  // namespace pstrain
