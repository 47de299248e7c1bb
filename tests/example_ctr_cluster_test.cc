// examples/ctr_embeddings as a user would run it: a chief in external mode, two PS and two client
// programs training a factorization machine whose rows live in embedding tables on the PS.
#include <cmath>
#include <filesystem>

#include "external_cluster.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing.h"

namespace pstrain {
namespace {

using namespace pstrain::testing;

// Built next to the pstrain binary (top-level CMakeLists.txt).
std::string ExampleBinary() {
  return (std::filesystem::path(PSTRAIN_BINARY).parent_path() / "ctr_embeddings").string();
}

class CtrExampleTest : public ::testing::TestWithParam<std::string> {};

// The clicks come from a hidden logistic model with pairwise interactions; its own AUC on the
// held-out clicks is the ceiling (about 0.85), and a model that learned nothing scores 0.5; the
// machine must come within 0.04 of the ceiling and cut the untrained model's log loss by 0.15.
TEST_P(CtrExampleTest, LearnsTheHiddenModelNearlyAsWellAsItScoresItself) {
  const std::string mode = GetParam();
  ASSERT_TRUE(std::filesystem::exists(ExampleBinary())) << "build the ctr_embeddings target";
  ExternalCluster cluster(std::to_string(getpid()) + "-ctr-" + mode, 2, 2);
  std::vector<Proc> workers;
  for (int i = 0; i < 2; ++i) {
    workers.push_back(Start({ExampleBinary(), "--timeout=60"}, cluster.Env("worker", i)));
  }
  std::vector<std::string> chief_flags = {"--mode", mode};
  if (mode == "ssp") chief_flags.insert(chief_flags.end(), {"--staleness", "2"});
  cluster.Start(chief_flags);

  std::vector<double> aucs;
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE("worker " + std::to_string(i));
    const Result r = Wait(workers[i], 180);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string line = LastJsonLine(r.out);
    ASSERT_FALSE(line.empty()) << r.out << r.err;
    const nlohmann::json j = nlohmann::json::parse(line);
    EXPECT_EQ(j["mode"], mode);
    EXPECT_EQ(j["steps"], 400);
    const double auc = j["auc"].get<double>(), ceiling = j["truth_auc"].get<double>();
    EXPECT_GT(ceiling, 0.8) << line;
    EXPECT_GT(auc, ceiling - 0.04) << line;
    // The untrained model's logits are all near 0, so its log loss is near log 2. (The first
    // batch's loss, "initial_logloss", is not the baseline: it is one batch, and in async mode
    // it may already see the other worker's updates.)
    EXPECT_LT(j["logloss"].get<double>(), std::log(2.0) - 0.15) << line;
    aucs.push_back(auc);
  }
  // After the final barrier both workers read the same rows.
  ASSERT_EQ(aucs.size(), 2u);
  EXPECT_EQ(aucs[0], aucs[1]);
  const Result c = cluster.Finish();
  EXPECT_EQ(c.exit_code, 0) << c.err;
  EXPECT_TRUE(cluster.AllEnded());
}

INSTANTIATE_TEST_SUITE_P(Modes, CtrExampleTest, ::testing::Values("async", "sync", "ssp"));

TEST(CtrExampleFlags, ExplainsABadFlag) {
  const Result r = testing::Run({ExampleBinary(), "--steps=x"}, {}, 30);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, ::testing::HasSubstr("ctr_embeddings: error: flag --steps: \"x\""));
}

}  // namespace
}  // namespace pstrain
