// A PS killed under a call of a carrier of its own (UCX, TCP): the call ends with UNAVAILABLE
// naming the PS instead of waiting out its deadline, and its buffer is left as it was; over TCP,
// a PS killed in the middle of a large pull's bytes, and a client killed in the middle of a
// push's bytes, which the PS does not apply.
#include <signal.h>

#include <thread>

#include "gmock/gmock.h"
#include "transport/tcp.h"
#include "transport_ucx_testing.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;
using namespace ucx_testing;  // NOLINT: the helpers of this test

absl::StatusOr<std::unique_ptr<DataChannel>> Channel(const std::string& transport,
                                                     const std::string& address) {
  return transport == "tcp" ? MakeTcpDataChannel(address) : MakeUcxDataChannel(address);
}

class CarrierFault : public ::testing::TestWithParam<std::string> {};

TEST_P(CarrierFault, APsKilledUnderAPullEndsItUnavailable) {
  ForkedPs ps("sync", {{"w", 3}}, GetParam());
  ASSERT_FALSE(ps.address().empty());
  absl::StatusOr<std::unique_ptr<DataChannel>> ch = Channel(GetParam(), ps.address());
  ASSERT_TRUE(ch.ok()) << ch.status();
  std::vector<float> v(3, 7.0f);
  PullResponse p;
  absl::Notification done;
  absl::Status result;
  std::thread pull([&] {
    // Sync mode: waits for a version no push brings.
    result = PullFloats(ch->get(), {"w"}, {&v}, &p, Within(absl::Seconds(120)), 5);
    done.Notify();
  });
  absl::SleepFor(absl::Milliseconds(300));
  ASSERT_EQ(kill(ps.pid(), SIGKILL), 0);
  // Reaped: UCX tells a dead peer on shared memory by its process, and a zombie still is one.
  ps.Stop();
  EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(90)));
  pull.join();
  EXPECT_EQ(result.code(), absl::StatusCode::kUnavailable) << result;
  EXPECT_THAT(result.message(), HasSubstr(ps.address()));
  EXPECT_EQ(v, std::vector<float>(3, 7.0f));
  ps.Stop();
}

INSTANTIATE_TEST_SUITE_P(Carriers, CarrierFault, ::testing::Values("ucx", "tcp"),
                         [](const auto& info) { return info.param; });

// 256 MB pulled over and over while the PS is killed: whichever byte the kill lands on, the
// pull in flight ends UNAVAILABLE naming the PS, within its deadline.
TEST(TcpFault, APsKilledInTheMiddleOfAPullsBytesEndsItUnavailable) {
  constexpr int64_t kFloats = int64_t{64} << 20;
  ForkedPs ps("async", {{"w", kFloats}}, "tcp");
  ASSERT_FALSE(ps.address().empty());
  absl::StatusOr<std::unique_ptr<DataChannel>> ch = MakeTcpDataChannel(ps.address());
  ASSERT_TRUE(ch.ok()) << ch.status();
  std::vector<float> v(kFloats);
  PullResponse p;
  ASSERT_TRUE(PullFloats(ch->get(), {"w"}, {&v}, &p, Within(absl::Seconds(60)), 0).ok());
  std::atomic<int> pulls{0};
  absl::Status last;
  std::thread puller([&] {
    while (last.ok()) {
      last = PullFloats(ch->get(), {"w"}, {&v}, &p, Within(absl::Seconds(60)), 0);
      ++pulls;
    }
  });
  while (pulls < 2) absl::SleepFor(absl::Milliseconds(1));  // pulls in a loop: one is in flight
  ASSERT_EQ(kill(ps.pid(), SIGKILL), 0);
  ps.Stop();
  puller.join();
  EXPECT_EQ(last.code(), absl::StatusCode::kUnavailable) << last;
  EXPECT_THAT(last.message(), HasSubstr(ps.address()));
}

}  // namespace
}  // namespace pstrain
