#include "master/master.h"

namespace pstrain {

void JobMonitor::Update(const std::function<void(JobStatus*)>& change) {
  absl::MutexLock lock(&mu_);
  change(&status_);
}

JobStatus JobMonitor::Snapshot() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

}  // namespace pstrain
