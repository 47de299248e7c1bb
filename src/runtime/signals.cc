#include "runtime/signals.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>

#include "master/master.h"
#include "spdlog/spdlog.h"

namespace pstrain {

namespace {

std::atomic<int> g_caught{0};  // the first signal caught, or 0
std::atomic<int> g_write_fd{-1};

void OnSignal(int sig) {
  int expected = 0;
  g_caught.compare_exchange_strong(expected, sig);
  const int fd = g_write_fd.load();
  const char byte = static_cast<char>(sig);
  if (fd >= 0) (void)!write(fd, &byte, 1);
}

// Runs on the watcher thread, outside the signal handler, so it may lock and log.
void StopJob(int sig) {
  const std::string name = sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : strsignal(sig);
  spdlog::warn("chief got {}: stopping the job and every task", name);
  RequestJobStop(name);
}

}  // namespace

StopOnSignals::StopOnSignals() {
  if (pipe2(pipe_, O_CLOEXEC) != 0) {
    spdlog::warn("cannot watch for SIGINT/SIGTERM: pipe: {}", strerror(errno));
    return;
  }
  g_write_fd = pipe_[1];
  thread_ = std::thread([fd = pipe_[0]] {
    char byte = 0;
    // A zero byte (from the destructor) or a closed pipe ends the watch.
    while (read(fd, &byte, 1) == 1 && byte != 0) StopJob(byte);
  });
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

StopOnSignals::~StopOnSignals() {
  if (!thread_.joinable()) return;
  // A signal from now on must not find a pipe that is gone; it ends the process as usual.
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  g_write_fd = -1;
  const char stop = 0;
  (void)!write(pipe_[1], &stop, 1);
  thread_.join();
  close(pipe_[0]);
  close(pipe_[1]);
}

int ExitCode(const absl::Status& s) {
  if (const int sig = g_caught.load(); sig != 0) return 128 + sig;
  return s.ok() ? 0 : 1;
}

}  // namespace pstrain
