// RunJob told to stop from another thread, as the runtime does on SIGINT or SIGTERM: it returns
// at once with the reason instead of waiting out its timeouts.
#include <thread>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/master.h"

namespace pstrain {
namespace {

TEST(RunJobTest, RequestJobStopEndsAJobWaitingForItsTasks) {
  MasterOptions options;
  options.listen_address = "127.0.0.1:0";
  options.ps_addresses = {"127.0.0.1:1"};  // nothing listens there: no task ever registers
  options.worker_addresses = {"127.0.0.1:1"};
  options.job.model = "external";
  options.job.register_timeout = absl::Hours(1);
  std::thread signal_thread([] {
    absl::SleepFor(absl::Milliseconds(200));  // either order must stop the job
    RequestJobStop("SIGTERM");
  });
  const absl::Time start = absl::Now();
  absl::StatusOr<JobResult> result = RunJob(options);
  signal_thread.join();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(result.status().message(), "stopped by SIGTERM");
  EXPECT_LT(absl::Now() - start, absl::Minutes(10));  // not the hour of register_timeout
  // A request is kept: a job started after it stops at once.
  EXPECT_EQ(RunJob(options).status().message(), "stopped by SIGTERM");
}

}  // namespace
}  // namespace pstrain
