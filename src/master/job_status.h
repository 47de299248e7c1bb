// Internal to src/master: keeps the JobStatus of a JobMonitor current while RunJob runs, from the
// coordinator (who registered, who reported what and when), the placer (where every shard went)
// and the job loop's progress.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "client/session.h"
#include "master/coordinator.h"
#include "master/master.h"
#include "master/progress.h"
#include "master/variables.h"

namespace pstrain {

// Points kept of the loss curve: beyond this the curve is thinned to every other point.
constexpr int kMaxLossPoints = 300;

// Thread-safe. With a null monitor every method does nothing.
class StatusTracker {
 public:
  // Publishes the job as "starting" and starts a thread that refreshes the task table and the
  // placement every `refresh` and asks every PS for its counters (Stats) every other time.
  // `coordinator` and `placer` must outlive the tracker.
  StatusTracker(JobMonitor* monitor, const MasterOptions& options, const Coordinator* coordinator,
                const VariablePlacer* placer, absl::Duration refresh = absl::Milliseconds(500));
  ~StatusTracker();  // Stop()
  StatusTracker(const StatusTracker&) = delete;
  StatusTracker& operator=(const StatusTracker&) = delete;

  // "running" or "evaluating"; published at once.
  void SetState(const std::string& state);
  // The job loop's numbers, each pass (at least once a second): epoch, global step, loss,
  // examples/s, elapsed, ETA, and a point of the loss curve when the step moved.
  void Progress(const ProgressView& view);
  // The job's end: "succeeded", or "failed" with the status's message. A last refresh, then the
  // thread stops; later calls change nothing.
  void Finish(const absl::Status& status);

 private:
  void Loop();
  void Refresh(bool ask_ps);
  void Stop();

  JobMonitor* const monitor_;
  const Coordinator* const coordinator_;
  const VariablePlacer* const placer_;
  const absl::Duration refresh_;
  const absl::Duration task_timeout_;
  std::unique_ptr<ParameterSession> ps_session_;  // used by the refresh thread only
  absl::Mutex mu_;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<absl::Time> ps_answered_ ABSL_GUARDED_BY(mu_);      // last Stats answer per PS
  std::vector<JobStatus::LossPoint> curve_ ABSL_GUARDED_BY(mu_);  // kept points
  int64_t curve_seen_ ABSL_GUARDED_BY(mu_) = 0;                   // points offered so far
  int64_t curve_stride_ ABSL_GUARDED_BY(mu_) = 1;                 // keep every stride-th
  JobStatus::LossPoint latest_ ABSL_GUARDED_BY(mu_);              // the newest point offered
  bool latest_kept_ ABSL_GUARDED_BY(mu_) = true;
  absl::Notification stop_;
  std::thread thread_;  // last: started once everything above is constructed
};

}  // namespace pstrain
