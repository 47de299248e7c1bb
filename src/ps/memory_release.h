// Giving freed memory back to the operating system (internal to src/ps).
//
// glibc keeps what a process frees in its arenas: a refused 600 MiB push, which gRPC received
// whole before it saw the size, leaves the PS's resident memory at its peak although nothing
// holds it any more (its dynamic mmap threshold makes later large buffers arena memory too).
// A MemoryReleaser watches, from a thread of its own, how much resident memory the process holds
// beyond what malloc has in use, and calls malloc_trim(0), which returns every free page of every
// arena, when that passes a threshold. It needs no hook in any request path, so it also covers
// memory that gRPC frees on its own after refusing a message.
#pragma once

#include <cstdint>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace pstrain {

class MemoryReleaser {
 public:
  struct Options {
    // Resident bytes beyond malloc's bytes in use that trigger a trim. The PS's code, stacks and
    // libraries stay resident and count here too; they are far below this.
    int64_t threshold_bytes = int64_t{64} << 20;
    // How often the thread looks: a trim comes at most this long after the memory was freed.
    absl::Duration period = absl::Milliseconds(200);
  };
  explicit MemoryReleaser(const Options& options);
  // Stops the thread (waits at most one period).
  ~MemoryReleaser();
  MemoryReleaser(const MemoryReleaser&) = delete;
  MemoryReleaser& operator=(const MemoryReleaser&) = delete;

  // Trims now if the process holds more than threshold_bytes of freed memory; returns whether it
  // trimmed. Thread-safe (the thread calls it every period).
  bool MaybeTrim();

 private:
  void Loop();

  // Constant after construction.
  const Options options_;

  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Mutex trim_mu_;
  // Excess resident memory the last trim left (0 if it went under the threshold).
  int64_t kept_ ABSL_GUARDED_BY(trim_mu_) = 0;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace pstrain
