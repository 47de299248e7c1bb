// Internal to src/runtime: the chief's output as `pstrain launch` shows it.
#pragma once

#include <poll.h>

#include <chrono>
#include <string>

namespace pstrain {

// Passes on what the chief writes to its stdout and stderr, line by line (and to its log file if
// it has one); its progress lines are redrawn in place on a terminal, else printed at most every
// 5 s.
class ChiefOutput {
 public:
  ChiefOutput();
  ~ChiefOutput();
  ChiefOutput(const ChiefOutput&) = delete;
  ChiefOutput& operator=(const ChiefOutput&) = delete;

  // The read ends of the pipes of a chief (started again: the new chief's); takes them over.
  void Attach(int out_fd, int err_fd);
  // The file the chief's lines are also written to (taken over), or -1.
  void SetLog(int fd);
  // Appends `text` to that file.
  void WriteLog(const std::string& text);
  // Reads what the chief wrote (waiting up to 200 ms) and passes it on; false once both of its
  // outputs are closed.
  bool Forward();
  // Ends a progress line being shown, so that another message starts on a line of its own.
  void EndProgress();

 private:
  void HandleLine(bool is_stdout, const std::string& line);
  void Close(int k);

  const bool tty_;
  pollfd fds_[2];
  std::string bufs_[2];  // the chief's stdout and stderr, not yet a whole line
  int log_ = -1;
  std::string last_progress_;
  bool progress_shown_ = false;
  std::chrono::steady_clock::time_point last_printed_{};
};

}  // namespace pstrain
