// Internal to src/ps: a PS's part of a checkpoint (docs/checkpoints.md). The chief freezes every
// PS (pushes wait at the PushGate), each copies its whole state in memory (a PartFile: every
// variable shard with its optimizer slots and version, every table's rows with their slots, step
// counts and last updates), the chief releases them all, and each writes its copy in the
// background. The methods of ParameterServerImpl that take and restore that state
// (Checkpoint, Import) live in snapshot.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/checkpoint_format.h"
#include "ps.pb.h"

namespace pstrain {

// The service runs every push (and Leave) through the gate. While it is closed, a push is queued
// instead of holding a thread (the release itself needs one), and runs on a thread of its own once
// the gate opens: at Open, or at the deadline of Close (a chief that froze the PS and died does
// not stop the job).
class PushGate {
 public:
  ~PushGate();  // opens the gate and waits for what it runs
  // Runs `fn` now if the gate is open, else once it opens.
  void Run(std::function<void()> fn) ABSL_LOCKS_EXCLUDED(mu_);
  // Closes the gate until `deadline` and waits for the pushes running to end.
  void Close(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);
  // Opens the gate; false if it was not closed any more (it opened itself at its deadline).
  bool Open() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Opens the gate and starts what waited, each on its own thread.
  void OpenLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void End() ABSL_LOCKS_EXCLUDED(mu_);

  absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t closes_ ABSL_GUARDED_BY(mu_) = 0;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::function<void()>> queued_ ABSL_GUARDED_BY(mu_);
  std::thread watchdog_;  // opens the gate at the deadline; joined by the next Close
};

// The state of one PS's checkpoints: at most one at a time, frozen (its copy held), then
// written in a background thread. Thread-safe.
class CheckpointSession {
 public:
  explicit CheckpointSession(int task);
  ~CheckpointSession();  // waits for a write in progress

  PushGate* gate() { return &gate_; }

  // FREEZE: closes the gate, then `copy` fills the part (called with the gate closed).
  // FailedPrecondition while another checkpoint is frozen or being written.
  template <typename CopyFn>
  absl::Status Freeze(const CheckpointRequest& req, CopyFn copy, CheckpointResponse* resp);
  // RELEASE: opens the gate and starts writing the copy to req.dir/ps-<task>.ckpt.
  // FailedPrecondition if checkpoint req.id is not frozen (or its freeze expired).
  absl::Status Release(const CheckpointRequest& req);
  // ABORT: opens the gate and drops the copy of checkpoint req.id (OK if there is none).
  absl::Status Abort(const CheckpointRequest& req);
  // WAIT: the written file of checkpoint req.id in `resp` once its write ended (waiting up to a
  // second), or the write's error; resp->path stays empty while it is still being written.
  absl::Status Wait(const CheckpointRequest& req, CheckpointResponse* resp);

 private:
  enum class State { kIdle, kFrozen, kWriting, kDone };
  absl::Status BeginFreeze(const CheckpointRequest& req) ABSL_LOCKS_EXCLUDED(mu_);
  void EndFreeze(const CheckpointRequest& req, const absl::Status& copied,
                 std::unique_ptr<PartFile> part, CheckpointResponse* resp) ABSL_LOCKS_EXCLUDED(mu_);
  void JoinWriter() ABSL_LOCKS_EXCLUDED(mu_);
  // The buffers of the last checkpoint written (or a new part): copying into memory that is
  // already mapped keeps page faults out of the pause.
  std::unique_ptr<PartFile> TakeSpare() ABSL_LOCKS_EXCLUDED(mu_);

  const int task_;
  PushGate gate_;
  absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kIdle;
  uint64_t id_ ABSL_GUARDED_BY(mu_) = 0;
  std::unique_ptr<PartFile> part_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<PartFile> spare_ ABSL_GUARDED_BY(mu_);
  std::string path_ ABSL_GUARDED_BY(mu_);
  absl::Status result_ ABSL_GUARDED_BY(mu_);
  WrittenFile written_ ABSL_GUARDED_BY(mu_);
  std::thread writer_;  // joined before a new write starts and at destruction
};

template <typename CopyFn>
absl::Status CheckpointSession::Freeze(const CheckpointRequest& req, CopyFn copy,
                                       CheckpointResponse* resp) {
  if (absl::Status s = BeginFreeze(req); !s.ok()) return s;
  std::unique_ptr<PartFile> part = TakeSpare();
  const absl::Time start = absl::Now();
  absl::Status copied = copy(part.get());
  resp->set_copy_seconds(absl::ToDoubleSeconds(absl::Now() - start));
  EndFreeze(req, copied, std::move(part), resp);
  return copied;
}

}  // namespace pstrain
