#include "ps/memory_release.h"

#include <malloc.h>
#include <unistd.h>

#include <cstdio>

namespace pstrain {
namespace {

// Resident bytes of this process (/proc/self/statm's second field), or -1.
int64_t ResidentBytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return -1;
  long size = 0, resident = 0;
  const int got = std::fscanf(f, "%ld %ld", &size, &resident);
  std::fclose(f);
  if (got != 2) return -1;
  return static_cast<int64_t>(resident) * sysconf(_SC_PAGESIZE);
}

}  // namespace

MemoryReleaser::MemoryReleaser(const Options& options)
    : options_(options), thread_([this] { Loop(); }) {}

MemoryReleaser::~MemoryReleaser() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

bool MemoryReleaser::MaybeTrim() {
  absl::MutexLock lock(&trim_mu_);
  const int64_t resident = ResidentBytes();
  // Cheap test first: mallinfo2 below walks every arena's free lists.
  if (resident < options_.threshold_bytes) return false;
  const struct mallinfo2 mi = mallinfo2();
  const int64_t excess = resident - static_cast<int64_t>(mi.uordblks + mi.hblkhd);
  if (excess < options_.threshold_bytes + kept_) return false;
  malloc_trim(0);
  // What a trim cannot give back (memory that is not malloc's) does not trigger the next one:
  // only a further threshold_bytes of it does.
  const int64_t after = ResidentBytes() - static_cast<int64_t>(mi.uordblks + mi.hblkhd);
  kept_ = after < options_.threshold_bytes ? 0 : after;
  return true;
}

void MemoryReleaser::Loop() {
  absl::MutexLock lock(&mu_);
  while (!mu_.AwaitWithTimeout(absl::Condition(&stop_), options_.period)) {
    mu_.Unlock();  // a trim may take a while; the destructor must not wait for the lock
    MaybeTrim();
    mu_.Lock();
  }
}

}  // namespace pstrain
