// A PS that stops serving in the middle of a run, dropping the calls in flight, and comes back
// on the same port (with its state, as a supervisor restarts a process that then restores) is
// retried through: the workers' pulls and tagged pushes that fail UNAVAILABLE are sent again
// with backoff (a push applied whose answer was lost arrives again with the same tag, for the
// PS to drop), and the job ends with every task applied once in the ledger and every batch of
// every task on the PS. A real
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
  // Pushes applied but not yet answered when the PS goes: their workers see them fail.
  c.ps_service(1).set_answer_delay(absl::Milliseconds(500));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  c.StopPs(1, absl::ZeroDuration());
  const size_t before = c.log(1).pushes().size();
  std::this_thread::sleep_for(std::chrono::seconds(2));  // the workers keep trying meanwhile
  EXPECT_EQ(c.log(1).pushes().size(), before);
  ASSERT_NO_FATAL_FAILURE(c.ServePs(1));
  ASSERT_EQ(c.WaitForDone(absl::Seconds(60)), "");
  EXPECT_EQ(c.coordinator().LedgerCheck(), "");
  EXPECT_GT(c.log(1).pushes().size(), before);  // the job was still running at the stop
  EXPECT_EQ(c.TagCounts(0), c.EveryBatch(1));
  // On ps:1 every batch arrived; those whose answer was lost, twice (the same tag again).
  const auto counts = c.TagCounts(1);
  EXPECT_EQ(counts.size(), c.EveryBatch(1).size());
  int resent = 0;
  for (const auto& [batch, n] : counts) {
    EXPECT_LE(n, 2);
    resent += n - 1;
  }
  EXPECT_GE(resent, 1) << "no push was in flight when ps:1 stopped";
  EXPECT_EQ(c.DuplicatesDropped(1), resent);
  EXPECT_EQ(c.DuplicatesDropped(0), 0);
  c.ExpectEveryBatchAppliedOnce();
}

}  // namespace
}  // namespace pstrain
