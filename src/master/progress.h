// Internal to src/master: how the job loop judges and shows the workers' progress.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "master/coordinator.h"
#include "master/master.h"

namespace pstrain {

struct ProgressView {
  int epoch = 0;  // from 1; 0 = not shown (external jobs)
  int epochs = 0;
  int64_t step = 0;   // the global step so far
  int64_t total = 0;  // the job's length in global steps; 0 = not known (no ETA)
  double loss = 0;
  bool has_loss = true;  // false: no worker reported a loss, and the line shows none
  double examples_per_sec = 0;
  absl::Duration elapsed;
};

// What the progress line and the status page show of the job so far: the sums of `result`
// (JobResult's steps, examples and loss over `progress`) and the slowest worker's epoch of
// `epochs` (0 = not known: external jobs).
ProgressView ViewOf(const std::vector<WorkerProgress>& progress, const JobResult& result,
                    int epochs, absl::Duration elapsed);

// Seconds left at the pace so far; -1 when not known (no total or no step yet).
double EtaSeconds(const ProgressView& v);

// "progress epoch 2/3 step 1200/2814 loss 0.1234 examples/s 13500 elapsed 8s eta 12s", without
// the parts that are not known. The leading "progress " lets the launcher show it in place.
std::string ProgressLine(const ProgressView& v);

// "8s", "2m5s", "1h0m3s": whole seconds.
std::string WholeSeconds(absl::Duration d);

// Aborted naming the first worker that reported an error; else DeadlineExceeded for the first
// worker that is neither done nor waiting at a barrier and whose last report and `alive[t]`
// (when it was last known not to be silent) are both more than `task_timeout` before `now`,
// naming the barriers the others wait at ("worker:1 sent no progress for 2m; worker:0 waits at
// barrier "end""). OK otherwise.
absl::Status CheckWorkers(const std::vector<WorkerProgress>& progress,
                          const std::vector<absl::Time>& alive, absl::Time now,
                          absl::Duration task_timeout);

}  // namespace pstrain
