// Internal to src/ps: the job-wide side of a parameter server — its consistency configuration,
// which workers count (announced, active, paused at a barrier, left), worker clocks (ssp), the
// pulls waiting for a step or a clock, and the counters.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ps.pb.h"

namespace pstrain {

enum class Mode { kAsync, kSync, kSsp };

struct Counters {
  std::atomic<int64_t> pushes_applied{0}, updates_applied{0}, stale_dropped{0},
      nonfinite_rejected{0}, max_clock_gap{0}, pulls_waited{0}, duplicates_dropped{0};
};

// Who sent the gradients accumulated for one sync step: (worker task, incarnation).
using Contributors = std::vector<std::pair<int, uint64_t>>;

// Thread-safe. Lock order: Consistency's lock before any variable's lock, never the reverse.
// StepThreshold and Lacking take no lock, so they may be called under a variable's lock.
//
// A worker counts while it is active: announced by the chief (every worker slot, if the chief
// announced none), not paused at a barrier and not left. Sync steps need
// min(replicas_to_aggregate, counting workers) gradients; ssp waits only for counting workers.
class Consistency {
 public:
  Consistency();
  ~Consistency();  // stops the deadline thread; call Stop() first to end waiting pulls

  // Validates the whole request (ranges, announced workers) before changing anything.
  absl::Status Configure(const ConfigureRequest& req);
  Mode mode() const;
  // The recovery generation the chief configured (0: none, nothing is generation-checked).
  uint64_t generation() const;
  // Back to the state of a server just started (async, any sender, no generation): every wait
  // ends with Aborted (`why` says why), and the per-worker tables are dropped. The counters
  // keep counting.
  void Reset(const std::string& why);

  // OK for an announced worker with its announced incarnation, or for any sender while the chief
  // announced no worker; PermissionDenied naming the sender and `method` otherwise.
  absl::Status CheckWorker(const Sender& s, absl::string_view method) const;
  // Async mode: worker slot `w.task()` is from now on incarnation `w.incarnation()`, active.
  // FailedPrecondition in sync and ssp or while no worker is announced; InvalidArgument for a
  // sender that is no worker of the job.
  absl::Status ReplaceWorker(const Sender& w);
  // CheckWorker("push"), and FailedPrecondition for a worker that left for good.
  absl::Status CheckPusher(const Sender& s) const;
  // Slot of a worker task in the per-worker tables, or -1.
  int WorkerSlot(const Sender& s) const;

  // sync: gradients a step with these contributors needs before it applies:
  // min(replicas_to_aggregate, counting workers + contributors that stopped counting), at least
  // 1. A worker that contributed and then paused or left still counts for that step.
  int StepThreshold(const Contributors& contributors) const;
  // sync: the counting workers missing from `contributors`, as "worker:1, worker:3".
  std::string Lacking(const Contributors& contributors) const;

  // A pull that may have to wait. `ready` says whether its condition holds now (called under the
  // lock, may take variable locks), `describe` says what it waits for (for the timeout error),
  // `serve` fills the response and calls done (called outside the lock, exactly once).
  struct Wait {
    std::function<bool()> ready;
    std::function<std::string()> describe;
    std::function<void(absl::Status)> serve;
  };
  // Serves `w` now if ready, else queues it until Notify finds it ready or it times out
  // (ResourceExhausted once kMaxWaitingPulls wait). For ssp, first records `clock` as the
  // sender's clock.
  void PullOrWait(const Sender& sender, int64_t clock, Wait w);
  // Something changed (a step applied, a clock moved): serve the waits that are now ready.
  void Notify();
  // ssp: whether a worker at `clock` may proceed; records the largest gap granted.
  bool ClockAllows(int64_t clock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string ClockWaitReason(const Sender& s, int64_t clock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Worker `s` waits at a barrier (`pause`) or is gone for good. Returns whether it stopped
  // counting, so that sync steps may now have enough gradients. Serves the pulls this releases
  // only on Notify.
  bool Leave(const Sender& s, bool pause);
  // A paused worker pushes again: it counts again (its clock is the one its pulls recorded).
  void Rejoin(const Sender& s);
  void Stop();
  void FillStats(StatsResponse* resp) const;
  void CountPush(int slot, bool dropped);

  Counters counters;

 private:
  enum class WorkerState : uint8_t { kActive, kPaused, kLeft };
  struct Pending {
    Wait wait;
    absl::Time deadline;
  };
  int SlotLocked(const Sender& s) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool CountsLocked(int slot) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Publishes which slots count to the lock-free view (counted_, counting_).
  void PublishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ServeReady(std::vector<Pending>* ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ExpireLoop();

  mutable absl::Mutex mu_;
  Mode mode_ ABSL_GUARDED_BY(mu_) = Mode::kAsync;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int num_workers_ ABSL_GUARDED_BY(mu_) = 0;
  int staleness_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration wait_timeout_ ABSL_GUARDED_BY(mu_) = absl::Seconds(60);
  std::vector<bool> announced_ ABSL_GUARDED_BY(mu_);         // by worker task; empty = anyone
  std::vector<uint64_t> incarnations_ ABSL_GUARDED_BY(mu_);  // of the announced workers
  std::vector<WorkerState> states_ ABSL_GUARDED_BY(mu_);     // by worker task
  std::vector<int64_t> clocks_ ABSL_GUARDED_BY(mu_);         // ssp
  std::vector<int64_t> pushes_by_worker_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> dropped_by_worker_ ABSL_GUARDED_BY(mu_);
  std::vector<Pending> pending_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  bool exit_ ABSL_GUARDED_BY(mu_) = false;

  // Lock-free view for callers under a variable's lock, written under mu_ only. A reader may see
  // a change half-published; the order of the writes (see PublishLocked) makes such a reader
  // overestimate a step's threshold, never underestimate it, and Leave's caller re-checks every
  // step after the change.
  std::atomic<int> replicas_{0};
  std::atomic<int> counting_{0};                  // number of slots that count
  std::unique_ptr<std::atomic<bool>[]> counted_;  // kMaxTasks slots

  std::thread expirer_;
};

}  // namespace pstrain
