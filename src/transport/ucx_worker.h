// One UCP worker and the thread that drives it (the UCX transport's machinery, ucx.h). UCP
// objects of a worker are touched only by its progress thread, so the worker runs in UCX's
// single-thread mode without locks inside UCX; other threads hand work to it with Post.
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace pstrain {

// "<what>: <UCX's reason>", as an Unavailable status.
absl::Status UcxError(const std::string& what, ucs_status_t status);

// Splits "host:port" (host may be "[v6]"); InvalidArgument naming `address` otherwise.
absl::Status ParseHostPort(const std::string& address, std::string* host, int* port);

class UcxWorker {
 public:
  // A UCP context and worker with active messages and wakeup. Unavailable naming UCX's reason
  // if UCX cannot start. `name` is used in the thread's messages.
  static absl::StatusOr<std::unique_ptr<UcxWorker>> Create(const std::string& name);
  // Stops the thread (if running), then destroys the worker and context.
  ~UcxWorker();

  ucp_worker_h worker() const { return worker_; }
  // The largest active-message header this worker sends.
  size_t max_am_header() const { return max_am_header_; }

  // Starts the progress thread; `tick` runs on it about every millisecond (deadlines, cleanup).
  // While `busy` (called on the thread) says calls are outstanding, the thread polls instead of
  // waiting for UCX's events.
  void Start(std::function<void()> tick, std::function<bool()> busy);
  // Runs `fn` on the progress thread, soon. Thread-safe. Dropped once the thread has stopped.
  void Post(std::function<void()> fn);
  // Runs `fn` on the progress thread and waits for it (inline when called on that thread).
  void Run(const std::function<void()>& fn);
  // Ends the thread after running what was posted; idempotent. Not from the thread itself.
  void Stop();
  bool OnThread() const { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  UcxWorker() = default;
  void Loop();
  bool RunPosted();

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  size_t max_am_header_ = 0;
  int efd_ = -1;
  std::function<void()> tick_;
  std::function<bool()> busy_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  absl::Mutex mu_;
  std::deque<std::function<void()>> posted_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> has_posted_{false};
  std::deque<std::function<void()>> running_;  // the thread's batch of posted work
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace pstrain
