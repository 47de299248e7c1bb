// Throughput of the UCX transport between two processes of this host (a PS in a child process,
// the client here): one push + one pull of a 16 MB and a 64 MB variable, next to memcpy of the
// same bytes (twice: the push's and the pull's) in the same run, interleaved. A measurement, not
// a test: disabled, run with
//   transport_ucx_bench_test --gtest_also_run_disabled_tests --gtest_filter='*Bench*'
// and it asserts only that the calls succeed.
#include <sys/wait.h>
#include <unistd.h>

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

// The child: a PS holding one variable per size, serving until the parent closes `stop`.
[[noreturn]] void ServePs(int port_out, int stop) {
  LocalPs ps;
  for (int64_t mb : kMegabytes) {
    ps.Create(Name(mb), Tensor(std::vector<int64_t>{(mb << 20) / 4}, 0.0f), 1.0);
  }
  const int port = ps.status.ok() ? std::stoi(ps.address.substr(ps.address.rfind(':') + 1)) : 0;
  if (write(port_out, &port, sizeof(port)) != sizeof(port)) _exit(1);
  char c;
  while (read(stop, &c, 1) > 0) {
  }
  _exit(0);
}

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
  int to_parent[2], to_child[2];
  ASSERT_EQ(pipe(to_parent), 0);
  ASSERT_EQ(pipe(to_child), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(to_child[1]);
    ServePs(to_parent[1], to_child[0]);
  }
  close(to_child[0]);
  int port = 0;
  ASSERT_EQ(read(to_parent[0], &port, sizeof(port)), static_cast<ssize_t>(sizeof(port)));
  ASSERT_NE(port, 0);
  absl::StatusOr<std::unique_ptr<DataChannel>> ch =
      MakeUcxDataChannel(absl::StrCat("127.0.0.1:", port));
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
  ch->reset();
  close(to_child[1]);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace pstrain
