// A worker's shard of a table read through the chief's schema (worker/trainer.h ReadShard): a
// LibSVM file opened with the columns the chief found, and a spec whose columns cannot be the
// chief's refused.
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "features/features.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/shard_cache.h"
#include "worker/trainer.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ReadShardTest, ALibSvmTableTakesTheChiefsColumnsAndRefusesOthers) {
  const std::string path = ::testing::TempDir() + "/read_shard.svm";
  std::ofstream(path) << "1 1:0.5 3:2\n0 2:1\n1 1:1 3:4\n0 4:9\n";
  const absl::Cleanup remove = [&path] { std::remove(path.c_str()); };
  DataSpec data;
  data.format = DataSpec::Format::kLibSvm;
  data.path = path;
  absl::StatusOr<CsvLayout> layout = TableLayout(data);
  ASSERT_TRUE(layout.ok()) << layout.status();
  absl::StatusOr<CsvTable> table = OpenCsvTable(path, *layout);
  ASSERT_TRUE(table.ok()) << table.status();
  absl::StatusOr<Schema> schema = Schema::FromJson(R"({"label": "label", "columns": [
      {"name": "f1", "type": "numeric", "normalizer": "none"},
      {"name": "f3", "type": "numeric", "normalizer": "none"}]})",
                                                   "schema.json");
  ASSERT_TRUE(schema.ok()) << schema.status();
  absl::StatusOr<FeatureStats> stats = ComputeCsvStats(*schema, *table, TextOptions{});
  ASSERT_TRUE(stats.ok()) << stats.status();

  TrainingSpec spec;
  spec.set_data(absl::StrCat("libsvm:", path));
  spec.set_train_records(4);
  spec.set_num_shards(1);
  spec.set_schema(schema->ToJson());
  spec.set_feature_stats(stats->ToJson());
  spec.set_libsvm_features(4);
  spec.set_libsvm_first_index(1);
  absl::StatusOr<Examples> e = ReadShard(spec);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_THAT(e->labels, ElementsAre(1, 0, 1, 0));
  EXPECT_THAT(e->dense, ElementsAre(0.5, 2, 0, 0, 1, 4, 0, 0));
  // A later run's spec through another schema reads the shard again; the same spec does not.
  ShardCache cache;
  absl::StatusOr<std::shared_ptr<const Examples>> kept = cache.Get(spec);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(*cache.Get(spec), *kept);
  TrainingSpec standardized = spec;
  absl::StatusOr<Schema> other = Schema::FromJson(
      R"({"label": "label", "columns": [{"name": "f1", "type": "numeric"}]})", "other.json");
  ASSERT_TRUE(other.ok()) << other.status();
  absl::StatusOr<FeatureStats> other_stats = ComputeCsvStats(*other, *table, TextOptions{});
  ASSERT_TRUE(other_stats.ok()) << other_stats.status();
  standardized.set_schema(other->ToJson());
  standardized.set_feature_stats(other_stats->ToJson());
  absl::StatusOr<std::shared_ptr<const Examples>> reread = cache.Get(standardized);
  ASSERT_TRUE(reread.ok()) << reread.status();
  EXPECT_EQ((*reread)->dense_dim, 1);
  // The chief's columns are the worker's, not the file's: two columns leave out the schema's f3.
  spec.set_libsvm_features(2);
  EXPECT_THAT(ReadShard(spec).status().message(), HasSubstr("f3"));
  // A count or a first index the chief never sends is refused before anything is read.
  for (const auto& [features, first] :
       {std::pair<int64_t, uint64_t>{-1, 1}, {kMaxLibSvmColumns + 1, 1}, {4, 7}}) {
    spec.set_libsvm_features(features);
    spec.set_libsvm_first_index(first);
    const absl::Status s = ReadShard(spec).status();
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr("the job's LibSVM table")) << features << " " << first;
  }
}

}  // namespace
}  // namespace pstrain
