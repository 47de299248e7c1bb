// The CTR job on a generated 1,000,000-row file, about two minutes on two cores (run it alone:
// ctest -R CtrSlow): `pstrain launch --ps 2 --workers 2 --model wide_deep --data criteo:FILE`
// with the default flags prints the held-out AUC and log loss, and the AUC must be within 0.01
// of the ground truth's (0.857): issue 7's acceptance. Measured: 0.8486, 0.8485 and 0.8485
// against 0.8572 (log loss 0.398), under a minute of training. The defaults before the tables
// had optimizers of their own (every table Adagrad 0.1, embedding dim 8, constant dense rate)
// reached 0.839, which fails this test.
#include "ctr_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using namespace pstrain::testing;

constexpr double kMargin = 0.01;

class CtrSlowClusterTest : public ProcessTest {};

TEST_F(CtrSlowClusterTest, WideDeepOnAMillionRowsComesWithinAHundredthOfTheCeiling) {
  const GeneratedCriteo data = GenerateCriteo(dir_, 1000000);
  Result r = RunTagged(Launch({"--model", "wide_deep", "--data", "criteo:" + data.path}), {}, 1800);
  nlohmann::json j = ResultOf(r);
  ASSERT_TRUE(j.contains("auc")) << j;
  std::printf("held-out AUC %.4f, log loss %.4f, ground truth AUC %.4f, %.0f s of training\n",
              j["auc"].get<double>(), j["log_loss"].get<double>(), data.ground_truth_auc,
              j["seconds"].get<double>());
  EXPECT_GE(j["auc"].get<double>(), data.ground_truth_auc - kMargin) << j;
  EXPECT_LE(j["auc"].get<double>(), data.ground_truth_auc + 0.005) << j;
  EXPECT_GT(j["log_loss"].get<double>(), 0) << j;
  EXPECT_LT(j["log_loss"].get<double>(), 0.42) << j;
  EXPECT_EQ(j["test_examples"], 100000);
}

}  // namespace
}  // namespace pstrain
