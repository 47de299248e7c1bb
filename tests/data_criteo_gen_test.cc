// GenerateCriteo: a file the Criteo reader accepts, Zipf-shaped categories, about a quarter
// clicks, a ground-truth AUC that a model can aim for, and the same file for the same seed.
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "data/data.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("pstrain-gen-" + std::to_string(::getpid()) + "-" + name))
      .string();
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(GenerateCriteoTest, ReadableSkewedAndDeterministic) {
  const std::string a = TempPath("a.tsv"), b = TempPath("b.tsv");
  CriteoGenOptions o;
  o.rows = 20000;
  o.seed = 3;
  absl::StatusOr<CriteoGenResult> r = GenerateCriteo(a, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->rows, 20000);
  EXPECT_NEAR(r->click_rate, 0.25, 0.03);
  // Informative but not trivial, as real click logs are.
  EXPECT_GT(r->ground_truth_auc, 0.7);
  EXPECT_LT(r->ground_truth_auc, 0.95);
  EXPECT_GT(r->ground_truth_log_loss, 0.2);

  absl::StatusOr<Examples> e = ReadCriteo(a, {});
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_EQ(e->size(), 20000);
  double clicks = 0;
  for (float l : e->labels) clicks += l;
  EXPECT_DOUBLE_EQ(clicks / 20000, r->click_rate);
  // Field C3 (50,000 values): the most frequent value is far more common than the median one,
  // and some fields are empty.
  std::map<uint64_t, int> counts;
  int missing = 0;
  for (int64_t row = 0; row < e->size(); ++row) {
    const uint64_t key = e->sparse_keys[e->sparse_offsets[row] + 2];
    if (key == CategoricalKey(2, 0, true)) ++missing;
    ++counts[key];
  }
  int top = 0;
  for (const auto& [key, n] : counts) top = std::max(top, n);
  EXPECT_GT(top, 1000);
  EXPECT_GT(counts.size(), 2000u);
  EXPECT_NEAR(missing / 20000.0, 0.02, 0.01);

  o.rows = 2000;
  ASSERT_TRUE(GenerateCriteo(b, o).ok());
  const std::string full = Slurp(a), part = Slurp(b);
  EXPECT_EQ(full.substr(0, part.size()), part) << "the same seed gives the same rows";
  o.seed = 4;
  ASSERT_TRUE(GenerateCriteo(b, o).ok());
  EXPECT_NE(full.substr(0, part.size()), Slurp(b));
  std::filesystem::remove(a);
  std::filesystem::remove(b);
}

TEST(GenerateCriteoTest, BadOptionsAndUnwritablePath) {
  CriteoGenOptions o;
  EXPECT_THAT(std::string(GenerateCriteo(TempPath("x"), o).status().message()),
              HasSubstr("--rows must be at least 1"));
  o.rows = 10;
  o.missing_rate = 1.5;
  EXPECT_THAT(std::string(GenerateCriteo(TempPath("x"), o).status().message()),
              HasSubstr("missing rate"));
  o.missing_rate = 0;
  absl::Status s = GenerateCriteo("/nonexistent-dir/x.tsv", o).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("/nonexistent-dir/x.tsv: cannot create"));
}

}  // namespace
}  // namespace pstrain
