// A PS killed under a UCX call: the call ends with UNAVAILABLE naming the PS instead of waiting
// out its deadline, and its buffer is left as it was.
#include <signal.h>

#include "gmock/gmock.h"
#include "transport_ucx_testing.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;
using namespace ucx_testing;  // NOLINT: the helpers of this test

TEST(UcxFault, APsKilledUnderAPullEndsItUnavailable) {
  ForkedPs ps("sync", {{"w", 3}});
  ASSERT_FALSE(ps.address().empty());
  absl::StatusOr<std::unique_ptr<DataChannel>> ch = MakeUcxDataChannel(ps.address());
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

}  // namespace
}  // namespace pstrain
