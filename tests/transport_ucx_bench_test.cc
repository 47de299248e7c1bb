// Throughput of the UCX transport between two processes of this host (a PS in a child process,
// the client here): one push + one pull of a 16 MB and a 64 MB variable, next to memcpy of the
// same bytes (twice: the push's and the pull's) in the same run, interleaved. A measurement, not
// a test (it also prints a 4 KB pull's round trip): disabled, run with
//   transport_ucx_bench_test --gtest_also_run_disabled_tests --gtest_filter='*Bench*'
// and it asserts only that the calls succeed.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "transport_ucx_testing.h"

namespace pstrain {
namespace {

using namespace ucx_testing;  // NOLINT: the helpers of this test

const std::vector<int64_t> kMegabytes = {16, 64};
constexpr int kReps = 7;

std::string Name(int64_t mb) { return absl::StrCat("v", mb); }

double Seconds(const std::function<void()>& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

TEST(UcxTransportBench, DISABLED_PushPullAgainstMemcpy) {
  std::vector<std::pair<std::string, int64_t>> variables;
  for (int64_t mb : kMegabytes) variables.emplace_back(Name(mb), (mb << 20) / 4);
  variables.emplace_back("v4k", 1024);
  ForkedPs ps("async", variables);
  ASSERT_FALSE(ps.address().empty());
  absl::StatusOr<std::unique_ptr<DataChannel>> ch = MakeUcxDataChannel(ps.address());
  ASSERT_TRUE(ch.ok()) << ch.status();
  for (int64_t mb : kMegabytes) {
    const int64_t n = (mb << 20) / 4;
    std::vector<float> grad(n, 0.0f), dest(n, 1.0f), copy(n, 2.0f);
    std::vector<double> ucx, memcpy_s, push_s;
    for (int rep = 0; rep < kReps + 1; ++rep) {  // the first of each is a warm-up
      absl::Status s;
      const double t = Seconds([&] {
        PushResponse pushed;
        PullResponse pulled;
        push_s.push_back(Seconds([&] { s = PushFloats(ch->get(), {Name(mb)}, {&grad}, &pushed); }));
        if (s.ok()) s = PullFloats(ch->get(), {Name(mb)}, {&dest}, &pulled);
      });
      ASSERT_TRUE(s.ok()) << s;
      const double m = Seconds([&] {
        std::memcpy(copy.data(), grad.data(), n * 4);
        std::memcpy(dest.data(), copy.data(), n * 4);
      });
      if (rep == 0) continue;
      ucx.push_back(t);
      memcpy_s.push_back(m);
    }
    const double bytes = 2.0 * n * 4;
    const double ucx_gbs = bytes / Median(ucx) / 1e9, memcpy_gbs = bytes / Median(memcpy_s) / 1e9;
    std::printf(
        "%3lld MB push+pull over UCX: %6.2f GB/s   memcpy of the same bytes: %6.2f GB/s"
        "   ratio %.2f   (median push %.1f ms, push+pull %.1f ms)\n",
        static_cast<long long>(mb), ucx_gbs, memcpy_gbs, ucx_gbs / memcpy_gbs, Median(push_s) * 1e3,
        Median(ucx) * 1e3);
  }
  // The round trip of a small pull, against which nothing here compares: see `pstrain bench`.
  std::vector<float> small(1024);
  std::vector<double> rtt;
  for (int rep = 0; rep < 201; ++rep) {
    absl::Status s;
    PullResponse pulled;
    const double t = Seconds([&] { s = PullFloats(ch->get(), {"v4k"}, {&small}, &pulled); });
    ASSERT_TRUE(s.ok()) << s;
    if (rep > 0) rtt.push_back(t);
  }
  std::sort(rtt.begin(), rtt.end());
  std::printf("  4 KB pull over UCX: p50 %.0f us, p99 %.0f us\n", rtt[rtt.size() / 2] * 1e6,
              rtt[rtt.size() * 99 / 100] * 1e6);
  ch->reset();
  EXPECT_TRUE(ps.Stop());
}

}  // namespace
}  // namespace pstrain
