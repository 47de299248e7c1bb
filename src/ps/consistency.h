// Internal to src/ps: the job-wide side of a parameter server — its consistency configuration,
// worker clocks (ssp), the pulls waiting for a step or a clock, and the counters.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ps.pb.h"

namespace pstrain {

enum class Mode { kAsync, kSync, kSsp };

struct Counters {
  std::atomic<int64_t> pushes_applied{0}, updates_applied{0}, stale_dropped{0},
      nonfinite_rejected{0}, max_clock_gap{0}, pulls_waited{0};
};

// Thread-safe. Lock order: Consistency's lock before any variable's lock, never the reverse.
class Consistency {
 public:
  Consistency();
  ~Consistency();  // stops the deadline thread; call Stop() first to end waiting pulls

  absl::Status Configure(const ConfigureRequest& req);
  Mode mode() const;
  int replicas_to_aggregate() const;

  // PermissionDenied if the chief announced its workers and `s` is not one of them.
  absl::Status CheckPusher(const Sender& s) const;
  // Slot of a worker task in the per-worker tables, or -1.
  int WorkerSlot(const Sender& s) const;

  // A pull that may have to wait. `ready` says whether its condition holds now (called under the
  // lock, may take variable locks), `describe` says what it waits for (for the timeout error),
  // `serve` fills the response and calls done (called outside the lock, exactly once).
  struct Wait {
    std::function<bool()> ready;
    std::function<std::string()> describe;
    std::function<void(absl::Status)> serve;
  };
  // Serves `w` now if ready, else queues it until Notify finds it ready or it times out. For
  // ssp, first records `clock` as the sender's clock.
  void PullOrWait(const Sender& sender, int64_t clock, Wait w);
  // Something changed (a step applied, a clock moved): serve the waits that are now ready.
  void Notify();
  // ssp: whether a worker at `clock` may proceed; records the largest gap granted.
  bool ClockAllows(int64_t clock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string ClockWaitReason(const Sender& s, int64_t clock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Leave(const Sender& s);
  void Stop();
  void FillStats(StatsResponse* resp) const;
  void CountPush(int slot, bool dropped);

  Counters counters;

 private:
  struct Pending {
    Wait wait;
    absl::Time deadline;
  };
  void ServeReady(std::vector<Pending>* ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ExpireLoop();

  mutable absl::Mutex mu_;
  Mode mode_ ABSL_GUARDED_BY(mu_) = Mode::kAsync;
  int num_workers_ ABSL_GUARDED_BY(mu_) = 0;
  int replicas_ ABSL_GUARDED_BY(mu_) = 0;
  int staleness_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration wait_timeout_ ABSL_GUARDED_BY(mu_) = absl::Seconds(60);
  std::vector<uint64_t> incarnations_ ABSL_GUARDED_BY(mu_);  // by worker task; empty = anyone
  std::vector<int64_t> clocks_ ABSL_GUARDED_BY(mu_);         // ssp; INT64_MAX once left
  std::vector<int64_t> pushes_by_worker_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> dropped_by_worker_ ABSL_GUARDED_BY(mu_);
  std::vector<Pending> pending_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  bool exit_ ABSL_GUARDED_BY(mu_) = false;
  std::thread expirer_;
};

}  // namespace pstrain
