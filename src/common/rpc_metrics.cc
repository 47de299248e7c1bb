#include "common/rpc_metrics.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <string>
#include <vector>

#include "absl/base/const_init.h"
#include "absl/synchronization/mutex.h"

namespace pstrain {
namespace {

constexpr int kCodes = 17;  // absl::StatusCode 0 (OK) .. 16 (UNAUTHENTICATED)
// Bucket bounds in nanoseconds: 50us .. 10s, about three per decade.
constexpr std::array<int64_t, 17> kBoundsNs = {
    50'000,      100'000,       250'000,       500'000,       1'000'000,     2'500'000,
    5'000'000,   10'000'000,    25'000'000,    50'000'000,    100'000'000,   250'000'000,
    500'000'000, 1'000'000'000, 2'500'000'000, 5'000'000'000, 10'000'000'000};
// Slots of the method table; methods are the services' names, a few dozen at most. Past half
// full, new names share one entry, so that a probe always ends quickly.
constexpr size_t kSlots = 256;
constexpr size_t kMaxMethods = kSlots / 2;
constexpr char kOverflowMethod[] = "other";

struct MethodStats {
  explicit MethodStats(std::string n) : name(std::move(n)) {}
  const std::string name;
  std::atomic<uint64_t> calls[kCodes] = {};
  std::atomic<uint64_t> buckets[kBoundsNs.size() + 1] = {};
  std::atomic<uint64_t> latency_ns{0};
  std::atomic<uint64_t> received{0};
  std::atomic<uint64_t> sent{0};
};

// Open addressing by the name's hash; entries are added under `g_insert` and never removed
// (they live as long as the process), so readers need no lock.
constinit std::atomic<MethodStats*> g_slots[kSlots] = {};
constinit std::atomic<bool> g_enabled{true};
constinit absl::Mutex g_insert(absl::kConstInit);
size_t g_methods ABSL_GUARDED_BY(g_insert) = 0;

size_t Hash(absl::string_view s) {  // FNV-1a
  uint64_t h = 1469598103934665603ull;
  for (const char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return static_cast<size_t>(h ^ (h >> 32));
}

// The entry of `method`, or null if it was never seen (and `create` is false).
MethodStats* Find(absl::string_view method, bool create) {
  const size_t h = Hash(method);
  for (size_t i = 0; i < kSlots; ++i) {
    std::atomic<MethodStats*>& slot = g_slots[(h + i) % kSlots];
    MethodStats* m = slot.load(std::memory_order_acquire);
    if (m == nullptr) {
      if (!create) return nullptr;
      bool full = false;
      {
        absl::MutexLock lock(&g_insert);
        m = slot.load(std::memory_order_acquire);
        if (m == nullptr) {  // still free: nobody added a name here meanwhile
          full = g_methods >= kMaxMethods && method != kOverflowMethod;
          if (!full) {
            m = new MethodStats(std::string(method));
            ++g_methods;
            slot.store(m, std::memory_order_release);
            return m;
          }
        }
      }
      if (full) return Find(kOverflowMethod, true);
    }
    if (m->name == method) return m;
  }
  return nullptr;  // unreachable: the table is never more than half full
}

}  // namespace

void ObserveServedRpc(absl::string_view method, absl::StatusCode code, size_t request_bytes,
                      size_t response_bytes, absl::Duration latency) {
  if (!g_enabled.load(std::memory_order_relaxed)) return;
  MethodStats* m = Find(method, /*create=*/true);
  if (m == nullptr) return;
  const int c = static_cast<int>(code);
  m->calls[c >= 0 && c < kCodes ? c : static_cast<int>(absl::StatusCode::kUnknown)].fetch_add(
      1, std::memory_order_relaxed);
  const int64_t ns = std::max<int64_t>(0, absl::ToInt64Nanoseconds(latency));
  const size_t b = std::lower_bound(kBoundsNs.begin(), kBoundsNs.end(), ns) - kBoundsNs.begin();
  m->buckets[b].fetch_add(1, std::memory_order_relaxed);
  m->latency_ns.fetch_add(static_cast<uint64_t>(ns), std::memory_order_relaxed);
  m->received.fetch_add(request_bytes, std::memory_order_relaxed);
  m->sent.fetch_add(response_bytes, std::memory_order_relaxed);
}

void SetRpcMetricsEnabled(bool enabled) { g_enabled.store(enabled); }

const std::vector<double>& RpcLatencyBounds() {
  static const std::vector<double>* const bounds = [] {
    auto* b = new std::vector<double>;
    for (const int64_t ns : kBoundsNs) b->push_back(static_cast<double>(ns) / 1e9);
    return b;
  }();
  return *bounds;
}

uint64_t ServedRpcCount(absl::string_view method, absl::StatusCode code) {
  const MethodStats* m = Find(method, /*create=*/false);
  const int c = static_cast<int>(code);
  if (m == nullptr || c < 0 || c >= kCodes) return 0;
  return m->calls[c].load(std::memory_order_relaxed);
}

void WriteRpcMetrics(PrometheusText* out) {
  std::vector<const MethodStats*> methods;
  for (const std::atomic<MethodStats*>& slot : g_slots) {
    if (const MethodStats* m = slot.load(std::memory_order_acquire)) methods.push_back(m);
  }
  std::sort(methods.begin(), methods.end(),
            [](const MethodStats* a, const MethodStats* b) { return a->name < b->name; });

  out->Begin("pstrain_rpc_requests_total", MetricType::kCounter,
             "RPCs served by this task, by method and status code.");
  for (const MethodStats* m : methods) {
    for (int c = 0; c < kCodes; ++c) {
      const uint64_t n = m->calls[c].load(std::memory_order_relaxed);
      if (n == 0) continue;
      const std::string code = absl::StatusCodeToString(static_cast<absl::StatusCode>(c));
      out->Sample({{"method", m->name}, {"code", code}}, static_cast<double>(n));
    }
  }
  out->Begin("pstrain_rpc_latency_seconds", MetricType::kHistogram,
             "Time from an RPC's arrival to its answer, by method.");
  for (const MethodStats* m : methods) {
    HistogramData h;
    h.upper_bounds = RpcLatencyBounds();
    for (const std::atomic<uint64_t>& b : m->buckets) {
      h.counts.push_back(b.load(std::memory_order_relaxed));
    }
    h.sum = static_cast<double>(m->latency_ns.load(std::memory_order_relaxed)) / 1e9;
    out->Histogram({{"method", m->name}}, h);
  }
  out->Begin("pstrain_rpc_received_bytes_total", MetricType::kCounter,
             "Bytes of the requests of RPCs served, by method.");
  for (const MethodStats* m : methods) {
    out->Sample({{"method", m->name}},
                static_cast<double>(m->received.load(std::memory_order_relaxed)));
  }
  out->Begin("pstrain_rpc_sent_bytes_total", MetricType::kCounter,
             "Bytes of the responses of RPCs served, by method.");
  for (const MethodStats* m : methods) {
    out->Sample({{"method", m->name}},
                static_cast<double>(m->sent.load(std::memory_order_relaxed)));
  }
}

}  // namespace pstrain
