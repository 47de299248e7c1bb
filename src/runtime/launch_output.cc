#include "runtime/launch_output.h"

#include <unistd.h>

#include <cstdio>
#include <thread>

namespace pstrain {

ChiefOutput::ChiefOutput() : tty_(isatty(STDERR_FILENO)), fds_{{-1, POLLIN, 0}, {-1, POLLIN, 0}} {}

ChiefOutput::~ChiefOutput() {
  Close(0);
  Close(1);
  if (log_ >= 0) close(log_);
}

void ChiefOutput::Attach(int out_fd, int err_fd) {
  Close(0);
  Close(1);
  fds_[0].fd = out_fd;
  fds_[1].fd = err_fd;
}

void ChiefOutput::SetLog(int fd) {
  if (log_ >= 0) close(log_);
  log_ = fd;
}

void ChiefOutput::WriteLog(const std::string& text) {
  if (log_ >= 0) (void)!write(log_, text.data(), text.size());
}

void ChiefOutput::Close(int k) {
  if (fds_[k].fd < 0) return;
  if (!bufs_[k].empty()) HandleLine(k == 0, bufs_[k]);  // a last line without its newline
  bufs_[k].clear();
  close(fds_[k].fd);
  fds_[k].fd = -1;
}

bool ChiefOutput::Forward() {
  if (fds_[0].fd < 0 && fds_[1].fd < 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return false;
  }
  if (poll(fds_, 2, 200) <= 0) return true;
  for (int k = 0; k < 2; ++k) {
    if (fds_[k].fd < 0 || !(fds_[k].revents & (POLLIN | POLLHUP))) continue;
    char buf[4096];
    const ssize_t n = read(fds_[k].fd, buf, sizeof(buf));
    if (n <= 0) {
      Close(k);
      continue;
    }
    bufs_[k].append(buf, n);
    for (size_t nl; (nl = bufs_[k].find('\n')) != std::string::npos;) {
      HandleLine(k == 0, bufs_[k].substr(0, nl));
      bufs_[k].erase(0, nl + 1);
    }
  }
  return fds_[0].fd >= 0 || fds_[1].fd >= 0;
}

void ChiefOutput::HandleLine(bool is_stdout, const std::string& line) {
  if (log_ >= 0) (void)!write(log_, (line + "\n").data(), line.size() + 1);
  const std::string prefix = "progress ";
  if (!is_stdout && line.rfind(prefix, 0) == 0) {
    const auto now = std::chrono::steady_clock::now();
    last_progress_ = line.substr(prefix.size());
    if (tty_) {
      std::fprintf(stderr, "\r\033[K%s", last_progress_.c_str());
      progress_shown_ = true;
    } else if (now - last_printed_ > std::chrono::seconds(5)) {
      std::fprintf(stderr, "%s\n", last_progress_.c_str());
      last_printed_ = now;
    }
    std::fflush(stderr);
    return;
  }
  EndProgress();
  std::fprintf(is_stdout ? stdout : stderr, "%s\n", line.c_str());
  std::fflush(is_stdout ? stdout : stderr);
}

void ChiefOutput::EndProgress() {
  if (progress_shown_)
    std::fprintf(stderr, "\n");
  else if (!tty_ && !last_progress_.empty())
    std::fprintf(stderr, "%s\n", last_progress_.c_str());
  progress_shown_ = false;
  last_progress_.clear();
}

}  // namespace pstrain
