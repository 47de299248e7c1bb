#include "transport/ucx_worker.h"

#include <poll.h>

#include <cstdlib>
#include <fstream>
#include <mutex>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "spdlog/spdlog.h"

namespace pstrain {
namespace {

// After activity the thread polls UCX without sleeping this long before it waits on the
// worker's event fd: a reply that follows a request within it costs no wakeup.
constexpr absl::Duration kSpin = absl::Microseconds(100);
// While calls are outstanding the thread does not rely on the event fd (shared memory raises
// no event for every step of a rendezvous): it yields between polls, after kBusyYield without
// progress sleeps briefly instead, and after kBusyLong (a sync pull waiting for its step) longer.
constexpr absl::Duration kBusyYield = absl::Milliseconds(10);
constexpr absl::Duration kBusySleep = absl::Microseconds(50);
constexpr absl::Duration kBusyLong = absl::Milliseconds(200);
constexpr absl::Duration kBusyLongSleep = absl::Microseconds(500);
constexpr int kIdleWaitMs = 2;
constexpr absl::string_view kAddressScheme = "ucx-shm:";
constexpr char kKeepalive[] = "1s";

}  // namespace

absl::Status UcxError(const std::string& what, ucs_status_t status) {
  return absl::UnavailableError(absl::StrCat(what, ": ", ucs_status_string(status)));
}

std::string HostBootId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return std::string(absl::StripAsciiWhitespace(id));
}

std::string EncodeUcxAddress(const std::string& host, const std::string& worker) {
  return absl::StrCat(kAddressScheme, host, ":", absl::BytesToHexString(worker));
}

absl::Status DecodeUcxAddress(const std::string& text, std::string* host, std::string* worker) {
  const size_t colon = text.rfind(':');
  const absl::string_view hex =
      colon == std::string::npos ? absl::string_view() : absl::string_view(text).substr(colon + 1);
  if (!absl::StartsWith(text, kAddressScheme) || colon < kAddressScheme.size() || hex.empty() ||
      hex.size() % 2 != 0 || !absl::c_all_of(hex, absl::ascii_isxdigit)) {
    return absl::InvalidArgumentError(absl::StrCat("\"", absl::CEscape(text.substr(0, 80)),
                                                   "\" is not ", kAddressScheme,
                                                   "<host>:<worker address in hex>"));
  }
  *host = text.substr(kAddressScheme.size(), colon - kAddressScheme.size());
  *worker = absl::HexStringToBytes(hex);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<UcxWorker>> UcxWorker::Create(const std::string& name) {
  // Connections report a dead peer (UCP_ERR_HANDLING_MODE_PEER: a worker that dies must end its
  // calls, not the PS), and UCX then uses only transports that detect one; posix and sysv shared
  // memory do once asked to, so ask, unless the environment says otherwise. These are settings
  // of UCX's transports, which read them from the environment only; set once, before any
  // context exists.
  static std::once_flag shm_errors;
  std::call_once(shm_errors, [] {
    setenv("UCX_POSIX_ERROR_HANDLING", "y", /*overwrite=*/0);
    setenv("UCX_SYSV_ERROR_HANDLING", "y", /*overwrite=*/0);
  });
  std::unique_ptr<UcxWorker> w(new UcxWorker);
  ucp_config_t* config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK) return UcxError("UCX could not read its configuration", s);
  static std::once_flag told;
  const char* asked = std::getenv("UCX_TLS");
  if (asked != nullptr && absl::string_view(asked) != kUcxTransports) {
    std::call_once(told, [asked] {
      spdlog::warn("UCX_TLS={} is not used: pstrain's UCX carries same-host traffic only, over {}",
                   asked, kUcxTransports);
    });
  }
  s = ucp_config_modify(config, "TLS", kUcxTransports);
  // Shared memory tells a dead peer only by UCX's keepalive rounds (is its process still
  // there?), 20 s apart by default; a call waiting on a dead PS should not wait that long.
  if (s == UCS_OK && std::getenv("UCX_KEEPALIVE_INTERVAL") == nullptr) {
    s = ucp_config_modify(config, "KEEPALIVE_INTERVAL", kKeepalive);
  }
  if (s != UCS_OK) {
    ucp_config_release(config);
    return UcxError("UCX cannot be limited to shared memory", s);
  }
  ucp_params_t params = {};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.name = name.c_str();
  s = ucp_init(&params, config, &w->context_);
  ucp_config_release(config);
  if (s != UCS_OK) return UcxError("UCX could not start (ucp_init)", s);
  ucp_worker_params_t wp = {};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  s = ucp_worker_create(w->context_, &wp, &w->worker_);
  if (s != UCS_OK) return UcxError("UCX could not create a worker", s);
  s = ucp_worker_get_efd(w->worker_, &w->efd_);
  if (s != UCS_OK) return UcxError("UCX gave no event fd for its worker", s);
  ucp_worker_attr_t attr = {};
  attr.field_mask = UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER;
  s = ucp_worker_query(w->worker_, &attr);
  if (s != UCS_OK) return UcxError("UCX could not query its worker", s);
  w->max_am_header_ = attr.max_am_header;
  ucp_address_t* address = nullptr;
  size_t length = 0;
  s = ucp_worker_get_address(w->worker_, &address, &length);
  if (s != UCS_OK) return UcxError("UCX gave no address for its worker", s);
  w->address_.assign(reinterpret_cast<const char*>(address), length);
  ucp_worker_release_address(w->worker_, address);
  return w;
}

UcxWorker::~UcxWorker() {
  Stop();
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
  if (context_ != nullptr) ucp_cleanup(context_);
}

void UcxWorker::Start(std::function<void()> tick, std::function<bool()> busy) {
  tick_ = std::move(tick);
  busy_ = std::move(busy);
  thread_ = std::thread([this] { Loop(); });
}

void UcxWorker::Post(std::function<void()> fn) {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    posted_.push_back(std::move(fn));
    has_posted_.store(true, std::memory_order_release);
  }
  ucp_worker_signal(worker_);  // thread-safe: wakes the thread from its wait
}

void UcxWorker::Run(const std::function<void()>& fn) {
  if (!thread_.joinable() || OnThread()) {
    fn();
    return;
  }
  absl::Notification ran;
  Post([&] {
    fn();
    ran.Notify();
  });
  ran.WaitForNotification();
}

void UcxWorker::Stop() {
  if (!thread_.joinable()) return;
  stop_ = true;
  ucp_worker_signal(worker_);
  thread_.join();
  absl::MutexLock lock(&mu_);
  stopped_ = true;
}

bool UcxWorker::RunPosted() {
  if (!has_posted_.load(std::memory_order_acquire)) return false;
  {
    absl::MutexLock lock(&mu_);
    running_.swap(posted_);
    has_posted_ = false;
  }
  for (auto& fn : running_) fn();
  running_.clear();
  return true;
}

void UcxWorker::Loop() {
  absl::Time last_active = absl::Now();
  absl::Time last_tick = last_active;
  while (!stop_) {
    bool active = RunPosted();
    while (ucp_worker_progress(worker_) != 0) active = true;
    const absl::Time now = absl::Now();
    if (now - last_tick >= absl::Milliseconds(1)) {
      tick_();
      last_tick = now;
    }
    if (active) {
      last_active = now;
      continue;
    }
    if (now - last_active < kSpin) continue;
    if (busy_()) {
      const absl::Duration idle = now - last_active;
      if (idle < kBusyYield) {
        std::this_thread::yield();
      } else {
        absl::SleepFor(idle < kBusyLong ? kBusySleep : kBusyLongSleep);
      }
      continue;
    }
    // UCS_ERR_BUSY: events are pending, progress again before sleeping.
    if (ucp_worker_arm(worker_) == UCS_ERR_BUSY) continue;
    pollfd p = {efd_, POLLIN, 0};
    poll(&p, 1, kIdleWaitMs);
    last_active = absl::Now() - kSpin;  // woken: progress, then arm again at once if idle
  }
  RunPosted();
  while (ucp_worker_progress(worker_) != 0) {
  }
  tick_();
}

}  // namespace pstrain
