// Internal to src/runtime: what a chief does on SIGINT and SIGTERM, and the exit code of a task.
#pragma once

#include <thread>

#include "absl/status/status.h"

namespace pstrain {

// While alive, SIGINT and SIGTERM ask the running job to stop (RequestJobStop): the chief then
// shuts every task down, tells them the job failed, and returns. Not reentrant: one at a time.
class StopOnSignals {
 public:
  StopOnSignals();
  ~StopOnSignals();
  StopOnSignals(const StopOnSignals&) = delete;
  StopOnSignals& operator=(const StopOnSignals&) = delete;

 private:
  int pipe_[2] = {-1, -1};  // the handler writes the signal number; thread_ reads it
  std::thread thread_;
};

// The process's exit code after `s`: 128 + the signal's number if a StopOnSignals caught one
// (130 for SIGINT, 143 for SIGTERM), else 0 for OK and 1 for an error.
int ExitCode(const absl::Status& s);

}  // namespace pstrain
