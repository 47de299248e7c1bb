// Internal to src/runtime: the launcher's log file per task.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pstrain {

// A directory with one log file per task, named after the task: "worker:0" -> worker-0.log.
class TaskLogs {
 public:
  // Uses `dir` (created with its parents if missing), or, if `dir` is empty, a new directory
  // pstrain-launch-XXXXXX under $TMPDIR (or /tmp). The error names the directory.
  static absl::StatusOr<TaskLogs> Open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  // The file of task `name` ("ps:1").
  std::string PathOf(const std::string& name) const;
  // Creates (or truncates, unless `truncate` is false: a restarted task's) the file of task
  // `name`; a descriptor opened for appending with O_CLOEXEC, so only the process it is handed to
  // (through dup2) keeps it.
  absl::StatusOr<int> Create(const std::string& name, bool truncate = true) const;

 private:
  explicit TaskLogs(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

// The last `n` lines of the file at `path` (at most its last 64 KiB), without their newlines; a
// carriage return starts a line over, as a terminal shows it. Empty if it cannot be read.
std::vector<std::string> LastLines(const std::string& path, int n);

}  // namespace pstrain
