// The dataset interface on small files written by the test: data specs, shapes, record counts,
// the held-out split, record ranges of a shard, and bad lines.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "data/data.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class DatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("pstrain-dataset-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  // A LibSVM file of `n` records, record i "i%2 i+1:1".
  std::string LibSvm(const std::string& name, int n) {
    std::string text;
    for (int i = 0; i < n; ++i)
      text += std::to_string(i % 2) + " " + std::to_string(i + 1) + ":1\n";
    return Write(name, text);
  }
  static std::vector<uint64_t> Keys(const Examples& e) { return e.sparse_keys; }

  fs::path dir_;
};

TEST(DataSpecTest, ParsesFormatsAndBarePaths) {
  struct Case {
    const char* text;
    DataSpec::Format format;
    const char* path;
  };
  for (const Case& c : {Case{"criteo:/d/train.tsv", DataSpec::Format::kCriteo, "/d/train.tsv"},
                        Case{"csv:a.csv", DataSpec::Format::kCsv, "a.csv"},
                        Case{"libsvm:x:y.svm", DataSpec::Format::kLibSvm, "x:y.svm"},
                        Case{"idx:data/mnist", DataSpec::Format::kIdx, "data/mnist"},
                        Case{"mnist:data/mnist", DataSpec::Format::kIdx, "data/mnist"},
                        Case{"data/mnist", DataSpec::Format::kIdx, "data/mnist"}}) {
    SCOPED_TRACE(c.text);
    absl::StatusOr<DataSpec> s = DataSpec::Parse(c.text);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->format, c.format);
    EXPECT_EQ(s->path, c.path);
    EXPECT_EQ(DataSpec::Parse(s->ToString())->path, c.path);
  }
  EXPECT_THAT(std::string(DataSpec::Parse("parquet:x").status().message()),
              HasSubstr("unknown format \"parquet\" (known: idx or mnist, csv, libsvm, criteo"));
  EXPECT_THAT(std::string(DataSpec::Parse("csv:").status().message()),
              HasSubstr("the path is empty"));
  EXPECT_FALSE(DataSpec::Parse("").ok());
}

TEST_F(DatasetTest, ShapesComeFromTheFormatOrTheFirstLine) {
  const DataShape criteo = *ShapeOf(*DataSpec::Parse("criteo:" + Write("c.tsv", "")));
  EXPECT_EQ(criteo.dense_features, 13);
  EXPECT_EQ(criteo.categorical_fields, 26);
  const DataShape csv = *ShapeOf(*DataSpec::Parse("csv:" + Write("h.csv", "y,a,b,c\n1,2,3,4\n")));
  EXPECT_EQ(csv.dense_features, 3);
  EXPECT_EQ(csv.num_classes, 0);
  EXPECT_EQ(ShapeOf(*DataSpec::Parse("libsvm:" + LibSvm("s.svm", 2)))->dense_features, 0);
  EXPECT_TRUE(absl::IsNotFound(ShapeOf(*DataSpec::Parse("csv:/nonexistent.csv")).status()));
}

TEST_F(DatasetTest, HoldsOutTheLastRecordsAndReadsShards) {
  const DataSpec spec = *DataSpec::Parse("libsvm:" + LibSvm("d.svm", 20));
  Dataset::Options o;
  o.holdout = 0.25;
  absl::StatusOr<Dataset> d = Dataset::Open(spec, o);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->train_records(), 15);
  absl::StatusOr<Examples> test = d->ReadTest();
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_THAT(Keys(*test), ElementsAre(16, 17, 18, 19, 20));
  // Two shards of the training records, as two workers read them.
  EXPECT_THAT(Keys(*ReadTrainingRecords(spec, 0, 7, TextOptions::BadLines::kStop)),
              ElementsAre(1, 2, 3, 4, 5, 6, 7));
  EXPECT_THAT(Keys(*d->ReadTrain(7, 100)), ElementsAre(8, 9, 10, 11, 12, 13, 14, 15));
}

TEST_F(DatasetTest, TestDataFromAnotherFile) {
  const DataSpec train = *DataSpec::Parse("libsvm:" + LibSvm("train.svm", 6));
  Dataset::Options o;
  o.test = *DataSpec::Parse("libsvm:" + LibSvm("test.svm", 3));
  absl::StatusOr<Dataset> d = Dataset::Open(train, o);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->train_records(), 6);
  EXPECT_THAT(Keys(*d->ReadTest()), ElementsAre(1, 2, 3));

  // Held-out data of another shape is refused.
  o.test = *DataSpec::Parse("csv:" + Write("t.csv", "1,2\n0,3\n"));
  EXPECT_THAT(std::string(Dataset::Open(train, o).status().message()),
              HasSubstr("has 1 dense features and 0 categorical fields"));
}

TEST_F(DatasetTest, RefusesSplitsThatLeaveNothing) {
  const DataSpec spec = *DataSpec::Parse("libsvm:" + LibSvm("small.svm", 3));
  Dataset::Options o;
  o.holdout = 0.1;  // 0.3 records
  EXPECT_THAT(std::string(Dataset::Open(spec, o).status().message()),
              AllOf(HasSubstr("small.svm has 3 records"), HasSubstr("none for evaluation")));
  o.holdout = 0.9;
  EXPECT_THAT(std::string(Dataset::Open(spec, o).status().message()),
              HasSubstr("none for training"));
  o.holdout = 1.5;
  EXPECT_THAT(std::string(Dataset::Open(spec, o).status().message()),
              HasSubstr("--holdout 1.5 must be in (0, 1)"));
}

TEST_F(DatasetTest, BadLinesStopWithFileAndLineOrAreCounted) {
  const std::string path = Write("bad.svm", "1 1:1\n0 2:1\nbroken\n1 3:1\n0 x:1\n1 4:1\n");
  const DataSpec spec = *DataSpec::Parse("libsvm:" + path);
  EXPECT_THAT(
      std::string(ReadTrainingRecords(spec, 0, 6, TextOptions::BadLines::kStop).status().message()),
      HasSubstr(path + ":3: "));
  // A shard that does not hold the bad line reads fine.
  EXPECT_TRUE(ReadTrainingRecords(spec, 0, 2, TextOptions::BadLines::kStop).ok());
  absl::StatusOr<Examples> e = ReadTrainingRecords(spec, 0, 6, TextOptions::BadLines::kSkip);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->bad_lines_skipped, 2);
  EXPECT_THAT(Keys(*e), ElementsAre(1, 2, 3, 4));
}

TEST_F(DatasetTest, CsvHeaderIsARecordOfTheFirstShard) {
  const DataSpec spec = *DataSpec::Parse("csv:" + Write("h.csv", "y,x\n1,0.5\n0,1.5\n1,2.5\n"));
  EXPECT_EQ(*CountTrainingRecords(spec), 4);
  EXPECT_THAT(ReadTrainingRecords(spec, 0, 2, TextOptions::BadLines::kStop)->dense,
              ElementsAre(0.5f));
  EXPECT_THAT(ReadTrainingRecords(spec, 2, 4, TextOptions::BadLines::kStop)->dense,
              ElementsAre(1.5f, 2.5f));
}

}  // namespace
}  // namespace pstrain
