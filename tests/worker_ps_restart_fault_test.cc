// A PS that stops serving in the middle of a run and comes back on the same port (with its
// state, as a supervisor restarts a process that then restores) is retried through: the workers'
// pulls and tagged pushes that fail UNAVAILABLE are sent again with backoff, and the job ends
// with every task applied once in the ledger and every batch of every task on the PS. A real
// job of 2 PS and 2 workers on 127.0.0.1 (tests/worker_cluster.h). CTest label: fault.
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker_cluster.h"

namespace pstrain {
namespace {

using worker_cluster::Cluster;

class WorkerPsRestartTest : public testing::ProcessTest {};

TEST_F(WorkerPsRestartTest, APsStoppedAndServedAgainOnItsPortIsRetriedThrough) {
  Cluster c(dir_, {.mode = "async", .step_delay_ms = 20});
  ASSERT_NO_FATAL_FAILURE(c.SetUpJob());
  ASSERT_NO_FATAL_FAILURE(c.StartAll(1));
  for (int i = 0; i < 200 && c.log(1).pushes().size() < 10; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GE(c.log(1).pushes().size(), 10u);
  c.StopPs(1);
  const size_t before = c.log(1).pushes().size();
  std::this_thread::sleep_for(std::chrono::seconds(2));  // the workers keep trying meanwhile
  EXPECT_EQ(c.log(1).pushes().size(), before);
  ASSERT_NO_FATAL_FAILURE(c.ServePs(1));
  ASSERT_EQ(c.WaitForDone(absl::Seconds(60)), "");
  EXPECT_EQ(c.coordinator().LedgerCheck(), "");
  EXPECT_GT(c.log(1).pushes().size(), before);  // the job was still running at the stop
  for (int p = 0; p < Cluster::kPs; ++p) EXPECT_EQ(c.TagCounts(p), c.EveryBatch(1)) << "ps:" << p;
}

}  // namespace
}  // namespace pstrain
