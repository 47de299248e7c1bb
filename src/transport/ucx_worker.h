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

// The transports every UCP context of pstrain uses, whatever UCX_TLS says: shared memory (and
// loopback within one worker), none of which opens a socket. UCX's tcp transport listens on a
// port per network device and parses whatever arrives there, before any token could be checked
// (16 bytes of 0xff trip an assertion in libuct that aborts the process), so pstrain's UCX
// serves the processes of one host only and lets no byte from the network reach UCX.
inline constexpr char kUcxTransports[] = "self,sysv,posix";

// This host's kernel boot id (/proc/sys/kernel/random/boot_id), by which UCX tells hosts apart
// for shared memory; empty if unreadable.
std::string HostBootId();

// DataPlaneResponse.ucx_address for a UCP worker address on the host of boot id `host`:
// "ucx-shm:<host>:<worker address in hex>".
std::string EncodeUcxAddress(const std::string& host, const std::string& worker);
// Splits what EncodeUcxAddress made; InvalidArgument for anything else.
absl::Status DecodeUcxAddress(const std::string& text, std::string* host, std::string* worker);

class UcxWorker {
 public:
  // A UCP context (kUcxTransports only) and worker with active messages and wakeup.
  // Unavailable naming UCX's reason if UCX cannot start. `name` is used in UCX's messages.
  static absl::StatusOr<std::unique_ptr<UcxWorker>> Create(const std::string& name);
  // Stops the thread (if running), then destroys the worker and context.
  ~UcxWorker();

  ucp_worker_h worker() const { return worker_; }
  // The largest active-message header this worker sends.
  size_t max_am_header() const { return max_am_header_; }
  // The worker's address (ucp_worker_get_address), which a peer connects to.
  const std::string& address() const { return address_; }

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
  std::string address_;
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
