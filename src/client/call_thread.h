// Internal to pstrain (src/client, src/worker): a thread that runs calls one after another in
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

  CallThread();
  // Runs the calls already started, then joins; each call has its own deadline.
  ~CallThread();
  CallThread(const CallThread&) = delete;
  CallThread& operator=(const CallThread&) = delete;

  // Queues `fn` behind the calls started before it. What `fn` refers to must stay valid until
  // the returned call is done.
  std::shared_ptr<Call> Start(std::function<absl::Status()> fn);

 private:
  bool Ready() const { return stop_ || !queue_.empty(); }
  void Loop();

  absl::Mutex mu_;
  std::deque<std::shared_ptr<Call>> queue_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the fields above are set
};

}  // namespace pstrain
