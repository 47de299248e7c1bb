// ReadCsv, ReadLibSvm, ReadCriteo and the raw CSV records on small files written by the test:
// values, layout, and a message naming file and line for every kind of bad line.
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "data/data.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class TextReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("pstrain-text-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  std::string WriteGzip(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
    gzclose(f);
    return path;
  }
  static TextOptions Skip() {
    TextOptions o;
    o.bad_lines = TextOptions::BadLines::kSkip;
    return o;
  }

  std::filesystem::path dir_;
};

TEST_F(TextReaderTest, CsvWithHeaderAndLabelColumn) {
  const std::string path = Write("a.csv", "x,y,label\n1.5,2,0\n-3,4e1,1\r\n\n5,6,1\n");
  CsvOptions csv;
  csv.label_column = 2;
  absl::StatusOr<Examples> e = ReadCsv(path, csv, {});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->size(), 3);
  EXPECT_THAT(e->labels, ElementsAre(0, 1, 1));
  ASSERT_EQ(e->dense_dim, 2);
  EXPECT_FLOAT_EQ(e->dense_row(0)[0], 1.5f);
  EXPECT_FLOAT_EQ(e->dense_row(1)[1], 40.0f);
  EXPECT_FLOAT_EQ(e->dense_row(2)[0], 5.0f);
  EXPECT_THAT(e->sparse_offsets, ElementsAre(0, 0, 0, 0));
}

TEST_F(TextReaderTest, CsvWithoutHeaderReadsTheFirstLine) {
  const std::string path = WriteGzip("a.csv.gz", "1,0.5\n0,0.25\n");
  absl::StatusOr<Examples> e = ReadCsv(path, {}, {});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_THAT(e->labels, ElementsAre(1, 0));
  EXPECT_FLOAT_EQ(e->dense_row(1)[0], 0.25f);
}

// A byte order mark (a spreadsheet's) before the first record is no part of it, and a line of
// nothing else is blank: every reader and the count agree on the records.
TEST_F(TextReaderTest, AByteOrderMarkIsNotPartOfTheFirstRecord) {
  const std::string csv = Write("bom.csv",
                                "\xEF\xBB\xBF"
                                "1,0.5\n0,0.25\n");
  absl::StatusOr<Examples> e = ReadCsv(csv, {}, {});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_THAT(e->labels, ElementsAre(1, 0)) << "the first line is a row, not a header";
  const std::string svm = Write("bom.svm", "\xEF\xBB\xBF\n1 2:1\n0 3:1\n");
  EXPECT_EQ(*CountRecords(svm), 2);
  e = ReadLibSvm(svm, {});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_THAT(e->sparse_keys, ElementsAre(2, 3));
  TextOptions last;
  last.first_record = 1;
  e = ReadLibSvm(svm, last);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_THAT(e->sparse_keys, ElementsAre(3));
}

TEST_F(TextReaderTest, CsvBadLinesNameFileAndLine) {
  const std::string path = Write("bad.csv", "1,2,3\n4,5\n6,x,7\n8,nan,9\n1,1,1\n");
  absl::StatusOr<Examples> e = ReadCsv(path, {}, {});
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(std::string(e.status().message()), HasSubstr(path + ":2: expected 3 fields, got 2"));
  e = ReadCsv(path, {}, Skip());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->size(), 2);
  EXPECT_EQ(e->bad_lines_skipped, 3);
  EXPECT_THAT(e->labels, ElementsAre(1, 1));
  EXPECT_FLOAT_EQ(e->dense_row(0)[1], 3.0f);
  CsvOptions csv;
  csv.label_column = 5;
  EXPECT_THAT(std::string(ReadCsv(path, csv, {}).status().message()), HasSubstr("label column 5"));
}

TEST_F(TextReaderTest, LibSvmSparseRows) {
  const std::string path = Write("a.svm", "+1 1:0.5 7:2 # comment\n-1\n0 3:1.25\n");
  absl::StatusOr<Examples> e = ReadLibSvm(path, {});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_THAT(e->labels, ElementsAre(1, -1, 0));
  EXPECT_THAT(e->sparse_offsets, ElementsAre(0, 2, 2, 3));
  EXPECT_THAT(e->sparse_keys, ElementsAre(1, 7, 3));
  EXPECT_THAT(e->sparse_values, ElementsAre(0.5f, 2.0f, 1.25f));
  EXPECT_EQ(e->dense_dim, 0);
}

TEST_F(TextReaderTest, LibSvmBadLines) {
  struct Case {
    std::string line, message;
  };
  for (const Case& c :
       {Case{"1 3:1 2:1", "indices must be strictly increasing"},
        Case{"1 3:1 3:2", "indices must be strictly increasing"},
        Case{"1 a:1", "\"a:1\" is not index:value"}, Case{"1 4", "\"4\" is not index:value"},
        Case{"1 -2:1", "is not index:value"}, Case{"y 1:1", "label \"y\""},
        Case{"1 03:x", "feature \"03:x\": value \"x\" is not a finite number"}}) {
    const std::string path = Write("bad.svm", "0 1:1\n" + c.line + "\n");
    absl::StatusOr<Examples> e = ReadLibSvm(path, {});
    ASSERT_FALSE(e.ok()) << c.line;
    EXPECT_THAT(std::string(e.status().message()), HasSubstr(path + ":2: "));
    EXPECT_THAT(std::string(e.status().message()), HasSubstr(c.message)) << c.line;
    e = ReadLibSvm(path, Skip());
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(e->size(), 1);
    EXPECT_THAT(e->sparse_keys, ElementsAre(1)) << "a dropped line leaves no feature behind";
  }
}

std::string CriteoLine(const std::string& label, const std::string& i1, const std::string& c1) {
  std::string line = label + "\t" + i1;
  for (int i = 1; i < kCriteoDense; ++i) line += "\t" + std::to_string(i);
  line += "\t" + c1;
  for (int i = 1; i < kCriteoCategorical; ++i) line += "\t0000000" + std::to_string(i % 10);
  return line + "\n";
}

TEST_F(TextReaderTest, CriteoDenseAndCategorical) {
  const std::string path =
      Write("c.tsv", CriteoLine("1", "", "68fd1e64") + CriteoLine("0", "-2", "") +
                         CriteoLine("0", "9", "68fd1e64"));
  absl::StatusOr<Examples> e = ReadCriteo(path, {});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_THAT(e->labels, ElementsAre(1, 0, 0));
  ASSERT_EQ(e->dense_dim, kCriteoDense);
  EXPECT_FLOAT_EQ(e->dense_row(0)[0], 0.0f);  // missing
  EXPECT_FLOAT_EQ(e->dense_row(1)[0], 0.0f);  // negative
  EXPECT_FLOAT_EQ(e->dense_row(2)[0], std::log1p(9.0f));
  EXPECT_FLOAT_EQ(e->dense_row(0)[1], std::log1p(1.0f));
  EXPECT_THAT(e->sparse_offsets, ElementsAre(0, 26, 52, 78));
  EXPECT_EQ(e->sparse_keys[0], CategoricalKey(0, 0x68fd1e64, false));
  EXPECT_EQ(e->sparse_keys[0], e->sparse_keys[52]) << "the same value of a field, the same key";
  EXPECT_EQ(e->sparse_keys[26], CategoricalKey(0, 0, true));
  EXPECT_NE(CategoricalKey(0, 0, true), CategoricalKey(0, 0, false));
  EXPECT_NE(CategoricalKey(0, 5, false), CategoricalKey(1, 5, false))
      << "equal values of different fields are different features";
  EXPECT_EQ(e->sparse_fields[27], 1);
}

TEST_F(TextReaderTest, CriteoBadLines) {
  std::string short_line = CriteoLine("1", "3", "68fd1e64");
  short_line.erase(short_line.rfind('\t'));
  struct Case {
    std::string line, message;
  };
  for (const Case& c : {Case{short_line + "\n", "expected 40 tab-separated fields"},
                        Case{CriteoLine("2", "3", "68fd1e64"), "label \"2\" is not 0 or 1"},
                        Case{CriteoLine("1", "3.5", "68fd1e64"), "I1 \"3.5\" is not an integer"},
                        Case{CriteoLine("1", "3", "68fd1e6g"), "C1 \"68fd1e6g\" is not 8 hex"},
                        Case{CriteoLine("1", "3", "68fd1e6"), "C1 \"68fd1e6\" is not 8 hex"}}) {
    const std::string path = Write("bad.tsv", CriteoLine("0", "1", "00000001") + c.line);
    absl::StatusOr<Examples> e = ReadCriteo(path, {});
    ASSERT_FALSE(e.ok()) << c.line;
    EXPECT_THAT(std::string(e.status().message()), HasSubstr(path + ":2: "));
    EXPECT_THAT(std::string(e.status().message()), HasSubstr(c.message));
    e = ReadCriteo(path, Skip());
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(e->size(), 1);
    EXPECT_EQ(e->bad_lines_skipped, 1);
    EXPECT_EQ(e->sparse_keys.size(), 26u);
  }
}

TEST_F(TextReaderTest, MissingFileAndDirectoryAndRecordRanges) {
  EXPECT_TRUE(absl::IsNotFound(ReadCriteo((dir_ / "none.tsv").string(), {}).status()));
  EXPECT_THAT(std::string(ReadLibSvm(dir_.string(), {}).status().message()),
              HasSubstr("is a directory"));
  // Records are the non-blank lines; a bad line outside the range is not even parsed.
  const std::string path = Write("m.svm", "1 1:1\n\n0 2:1\nbad\n1 3:1\n0 4:1\n");
  EXPECT_EQ(*CountRecords(path), 5);
  TextOptions o;
  o.end_record = 2;
  absl::StatusOr<Examples> e = ReadLibSvm(path, o);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_THAT(e->sparse_keys, ElementsAre(1, 2));
  o.first_record = 3;
  o.end_record = -1;
  e = ReadLibSvm(path, o);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_THAT(e->sparse_keys, ElementsAre(3, 4));
  o.first_record = 2;
  o.end_record = 4;
  EXPECT_THAT(std::string(ReadLibSvm(path, o).status().message()), HasSubstr("m.svm:4: "));
}

std::vector<std::string> Split(absl::string_view line) {
  std::vector<std::string> fields;
  absl::Status s = SplitCsvRecord(line, ',', &fields);
  EXPECT_TRUE(s.ok()) << s;
  return fields;
}

TEST(CsvRecordTest, QuotedFieldsKeepTheirDelimitersAndQuotes) {
  EXPECT_THAT(Split("a,b,,c "), ElementsAre("a", "b", "", "c "));
  EXPECT_THAT(Split(R"(1,"Braund, Mr. Owen",male)"), ElementsAre("1", "Braund, Mr. Owen", "male"));
  EXPECT_THAT(Split(R"("say ""hi""", "x" ,"")"), ElementsAre(R"(say "hi")", "x", ""));
  EXPECT_THAT(Split(""), ElementsAre(""));
  EXPECT_THAT(Split("a,"), ElementsAre("a", ""));
  std::vector<std::string> fields;
  // With a space as the delimiter, spaces are never skipped around quotes.
  ASSERT_TRUE(SplitCsvRecord(R"("a b" "c" d)", ' ', &fields).ok());
  EXPECT_THAT(fields, ElementsAre("a b", "c", "d"));
  ASSERT_TRUE(SplitCsvRecord(R"( "b")", ' ', &fields).ok());
  EXPECT_THAT(fields, ElementsAre("", "b"));
  EXPECT_THAT(SplitCsvRecord(R"(1,"open)", ',', &fields).message(),
              HasSubstr("field 2: a quote that is not closed on this line"));
  EXPECT_THAT(SplitCsvRecord(R"("a"b,c)", ',', &fields).message(),
              HasSubstr("field 1: text after its closing quote"));
}

TEST_F(TextReaderTest, CsvRecordsOfAFileWithTheirLines) {
  const std::string path =
      WriteGzip("t.csv.gz", "\xEF\xBB\xBFname,sex\n\n\"A, B\",male\nC,female\n");
  std::vector<std::string> seen;
  ASSERT_TRUE(
      ForEachCsvRecord(path, ',', [&](const std::vector<absl::string_view>& f, int64_t line) {
        seen.push_back(absl::StrCat(line, ":", f[0], "|", f[1]));
        return absl::OkStatus();
      }).ok());
  EXPECT_THAT(seen, ElementsAre("1:name|sex", "3:A, B|male", "4:C|female"));
  const std::string bad = Write("bad.csv", "a,b\n\"x,y\n");
  absl::Status s = ForEachCsvRecord(
      bad, ',', [](const std::vector<absl::string_view>&, int64_t) { return absl::OkStatus(); });
  EXPECT_THAT(s.message(), HasSubstr(bad + ":2: field 1: a quote that is not closed"));
  absl::Status stop =
      ForEachCsvRecord(path, ',', [](const std::vector<absl::string_view>&, int64_t line) {
        return line == 3 ? absl::CancelledError("enough") : absl::OkStatus();
      });
  EXPECT_EQ(stop.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(ForEachCsvRecord(
                path, '"',
                [](const std::vector<absl::string_view>&, int64_t) { return absl::OkStatus(); })
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ForEachCsvRecord(
                (dir_ / "none.csv").string(), ',',
                [](const std::vector<absl::string_view>&, int64_t) { return absl::OkStatus(); })
                .code(),
            absl::StatusCode::kNotFound);
}

TEST_F(TextReaderTest, CsvRecordsOfARangeWithBadOnesSkippedAndCounted) {
  const std::string path = Write("r.csv", "h1,h2\na,1\n\n\"b,2\nc,x\nd,4\ne,5\n");
  // Records: 0 header, 1 a, 2 "b (unclosed), 3 c, 4 d, 5 e.
  std::vector<std::string> seen;
  auto fn = [&](const std::vector<absl::string_view>& f, int64_t line, int64_t record) {
    if (f[1] == "x") return absl::InvalidArgumentError("x is not a number");
    seen.push_back(absl::StrCat(record, "@", line, ":", f[0]));
    return absl::OkStatus();
  };
  TextOptions range;
  range.first_record = 1;
  range.end_record = 5;
  range.bad_lines = TextOptions::BadLines::kSkip;
  absl::StatusOr<int64_t> skipped = ForEachCsvRecord(path, ',', range, fn);
  ASSERT_TRUE(skipped.ok()) << skipped.status();
  EXPECT_EQ(*skipped, 2);  // the unclosed quote and the refused "x"
  EXPECT_THAT(seen, ElementsAre("1@2:a", "4@6:d"));
  // Under kStop the first bad record stops the read, naming its line.
  range.bad_lines = TextOptions::BadLines::kStop;
  seen.clear();
  EXPECT_THAT(ForEachCsvRecord(path, ',', range, fn).status().message(),
              HasSubstr(path + ":4: field 1: a quote that is not closed"));
  // Errors other than InvalidArgument stop even under kSkip.
  range.bad_lines = TextOptions::BadLines::kSkip;
  EXPECT_EQ(ForEachCsvRecord(path, ',', range,
                             [](const std::vector<absl::string_view>&, int64_t, int64_t) {
                               return absl::CancelledError("enough");
                             })
                .status()
                .code(),
            absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace pstrain
