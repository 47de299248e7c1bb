// `pstrain gen-criteo` as a user runs it: the file, the JSON line with the ceiling AUC, and its
// errors.
#include <filesystem>
#include <fstream>
#include <string>

#include "nlohmann/json.hpp"
#include "testing.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;
using namespace pstrain::testing;

TEST(GenCriteoCommandTest, WritesTheRowsAndPrintsTheCeiling) {
  const std::string path = TempDir() + "/c.tsv";
  Result r =
      testing::Run({PSTRAIN_BINARY, "gen-criteo", "--rows", "3000", "--out", path, "--seed", "7"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["rows"], 3000);
  EXPECT_EQ(j["path"], path);
  EXPECT_GT(j["ground_truth_auc"].get<double>(), 0.6);
  EXPECT_LT(j["ground_truth_auc"].get<double>(), 1.0);
  EXPECT_NEAR(j["click_rate"].get<double>(), 0.25, 0.05);
  std::ifstream in(path);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    ++lines;
    EXPECT_EQ(std::count(line.begin(), line.end(), '\t'), 39) << "line " << lines;
  }
  EXPECT_EQ(lines, 3000);
}

TEST(GenCriteoCommandTest, ErrorsNameWhatIsWrong) {
  Result r = testing::Run({PSTRAIN_BINARY, "gen-criteo", "--rows", "10"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--out"));
  r = testing::Run({PSTRAIN_BINARY, "gen-criteo", "--rows", "0", "--out", TempDir() + "/x.tsv"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--rows must be at least 1"));
  r = testing::Run(
      {PSTRAIN_BINARY, "gen-criteo", "--rows", "10", "--out", "/nonexistent-dir/x.tsv"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("/nonexistent-dir/x.tsv: cannot create"));
  r = testing::Run({PSTRAIN_BINARY, "gen-critero", "--rows", "10"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("did you mean gen-criteo"));
}

}  // namespace
}  // namespace pstrain
