// Internal to src/client: a thread that runs calls one after another in
// the order they were started, so a caller can overlap a blocking call (a pull, a push) with its
// own work while the calls made through one non-thread-safe client (PsClient) stay serial.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace pstrain {

class CallThread {
 public:
  // One started call and, once it returned, its status. Thread-safe.
  class Call {
   public:
    // The call's status once it returned; DeadlineExceeded if it has not by `deadline` (it
    // keeps running: Wait again).
    absl::Status Wait(absl::Time deadline);
    bool done() const;

   private:
    friend class CallThread;
    mutable absl::Mutex mu_;
    bool done_ = false;
    absl::Status status_;
    std::function<absl::Status()> fn_;  // cleared once run
  };

  CallThread();  // starts no thread: the first call queued does
  // Runs the calls already started, then joins; each call has its own deadline.
  ~CallThread();
  CallThread(const CallThread&) = delete;
  CallThread& operator=(const CallThread&) = delete;

  // Queues `fn` behind the calls started before it. What `fn` refers to must stay valid until
  // the returned call is done.
  std::shared_ptr<Call> Start(std::function<absl::Status()> fn);
  // A blocking call without a hand-off: when no call is queued or running here, runs `fn` on
  // the caller's thread (calls started meanwhile wait for it, so the calls stay serial) and
  // returns it done; otherwise queues it as Start does.
  std::shared_ptr<Call> RunHereOrStart(std::function<absl::Status()> fn);

 private:
  bool Ready() const { return stop_ || (!queue_.empty() && !busy_); }
  bool Idle() const { return !busy_; }
  std::shared_ptr<Call> Queue(std::function<absl::Status()> fn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Loop();
  static void Finish(Call* call, absl::Status s);

  absl::Mutex mu_;
  std::deque<std::shared_ptr<Call>> queue_;
  bool busy_ = false;  // a call is running, here or on the caller's thread
  bool stop_ = false;
  std::thread thread_;  // started by the first call queued, under mu_
};

}  // namespace pstrain
