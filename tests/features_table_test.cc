// A table read through a schema: a CSV file with or without a header, Criteo's TSV and a LibSVM
// file, their statistics, schemas inferred from them, and the rows of a range through their
// transform.
#include <cstdio>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/data.h"
#include "features/features.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A file under the test's temporary directory holding `text`, removed at the end of the scope.
struct TempFile {
  TempFile(const std::string& name, const std::string& text)
      : path(::testing::TempDir() + "/" + name) {
    std::ofstream(path, std::ios::binary) << text;
  }
  ~TempFile() { std::remove(path.c_str()); }
  const std::string path;
};

Schema SchemaOf(absl::string_view json) {
  absl::StatusOr<Schema> s = Schema::FromJson(json, "schema.json");
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : Schema{};
}

// A table's statistics under `schema` over the rows of `training`, and their transform.
struct Fitted {
  FeatureStats stats;
  Transform transform;
};
std::optional<Fitted> Fit(const CsvTable& table, const Schema& schema,
                          const TextOptions& training) {
  absl::StatusOr<FeatureStats> stats = ComputeCsvStats(schema, table, training);
  EXPECT_TRUE(stats.ok()) << stats.status();
  if (!stats.ok()) return std::nullopt;
  absl::StatusOr<Transform> t = CsvTransform(schema, *stats, table);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return std::nullopt;
  return Fitted{*stats, *std::move(t)};
}

// The message of ComputeCsvStats's refusal of a schema that names `column`, labelled `label`.
std::string RefusalOfColumn(const CsvTable& table, absl::string_view label,
                            absl::string_view column) {
  const Schema schema =
      SchemaOf(absl::StrCat(R"({"label": ")", label, R"(", "columns": [{"name": ")", column,
                            R"(", "type": "numeric"}]})"));
  return std::string(ComputeCsvStats(schema, table, TextOptions{}).status().message());
}

TEST(FeatureTableTest, ACsvFileThroughItsSchemaGivesTheRowsOfARange) {
  const TempFile file("feature_table.csv",
                      "y,x,color\nyes,1,red\nno,3,blue\n\nyes,oops,red\nno,5,red\nyes,7,green\n");
  const std::string& path = file.path;
  absl::StatusOr<CsvTable> table = OpenCsvTable(path, ',');
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_THAT(table->header.names, ElementsAre("y", "x", "color"));
  EXPECT_TRUE(table->header.in_file);
  const Schema schema = SchemaOf(R"({"label": "y", "columns": [
      {"name": "x", "type": "numeric", "normalizer": "none"},
      {"name": "color", "type": "categorical"}]})");
  // Statistics over the training records [1, 5): record 3 ("oops") stops the pass, or is
  // skipped and counted nowhere.
  TextOptions training;
  training.end_record = 5;
  EXPECT_THAT(ComputeCsvStats(schema, *table, training).status().message(),
              HasSubstr(path + ":5: column \"x\""));
  training.bad_lines = TextOptions::BadLines::kSkip;
  std::optional<Fitted> fit = Fit(*table, schema, training);
  ASSERT_TRUE(fit.has_value());
  EXPECT_EQ(fit->stats.rows, 3);
  EXPECT_DOUBLE_EQ(fit->stats.columns[0].mean, 3.0);  // 1, 3, 5
  EXPECT_THAT(fit->stats.classes, ElementsAre("no", "yes"));
  // Records [2, 6): 2 (no,3), 3 skipped, 4 (no,5), 5 (yes,7; green unseen: id 0).
  TextOptions range = training;
  range.first_record = 2;
  range.end_record = 6;
  absl::StatusOr<Examples> e = ReadCsvThrough(fit->transform, *table, range);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_THAT(e->labels, ElementsAre(0, 0, 1));
  EXPECT_THAT(e->dense, ElementsAre(3, 5, 7));
  EXPECT_THAT(e->records, ElementsAre(2, 4, 5));
  EXPECT_EQ(e->bad_lines_skipped, 1);
  EXPECT_EQ(e->sparse_keys[2], CategoricalKey(0, 0, false));
  // From record 0 the header gives no row; an inferred schema sees the same rows.
  range.first_record = 0;
  absl::StatusOr<Examples> from0 = ReadCsvThrough(fit->transform, *table, range);
  ASSERT_TRUE(from0.ok()) << from0.status();
  EXPECT_THAT(from0->records, ElementsAre(1, 2, 4, 5));
  absl::StatusOr<InferredSchema> inferred = InferCsvSchema(*table, "y", training);
  ASSERT_TRUE(inferred.ok()) << inferred.status();
  EXPECT_EQ(inferred->schema.label, "y");
  // A schema naming a column the header lacks is refused naming the file and the column.
  EXPECT_THAT(RefusalOfColumn(*table, "y", "z"), AllOf(HasSubstr(path + ": "), HasSubstr("z")));
  EXPECT_FALSE(OpenCsvTable(::testing::TempDir() + "/none.csv", ',').ok());
  const TempFile empty("feature_table_empty.csv", "");
  EXPECT_THAT(OpenCsvTable(empty.path, ',').status().message(), HasSubstr("empty file"));
}

TEST(FeatureTableTest, CriteosTsvHasNoHeaderAndItsOwnColumnNames) {
  DataSpec spec;
  spec.format = DataSpec::Format::kCriteo;
  absl::StatusOr<CsvLayout> layout = TableLayout(spec);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->delimiter, '\t');
  ASSERT_EQ(layout->names.size(), 40u);
  EXPECT_EQ(layout->names[0], "label");
  EXPECT_EQ(layout->names[1], "I1");
  EXPECT_EQ(layout->names[13], "I13");
  EXPECT_EQ(layout->names[14], "C1");
  EXPECT_EQ(layout->names[39], "C26");
  spec.format = DataSpec::Format::kIdx;
  spec.path = "mnist";
  EXPECT_THAT(TableLayout(spec).status().message(), HasSubstr("not idx:mnist"));
  // Five rows: I1 counts (a missing one), I2 always 7, C1 ids of 8 hex digits, the rest empty.
  std::string text;
  const char* ids[] = {"05db9164", "68fd1e64", "05db9164", "8cf07265", "68fd1e64"};
  for (int r = 0; r < 5; ++r) {
    absl::StrAppend(&text, r % 2, "\t", r == 2 ? "" : absl::StrCat(r * 3), "\t7");
    for (int i = 2; i < 13; ++i) absl::StrAppend(&text, "\t");
    absl::StrAppend(&text, "\t", ids[r]);
    for (int i = 1; i < 26; ++i) absl::StrAppend(&text, "\t");
    absl::StrAppend(&text, "\n");
  }
  const TempFile file("criteo.tsv", text);
  absl::StatusOr<CsvTable> table = OpenCsvTable(file.path, *layout);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_FALSE(table->header.in_file);  // record 0 is a row, whatever it holds
  EXPECT_EQ(table->header.names, layout->names);
  absl::StatusOr<InferredSchema> inferred = InferCsvSchema(*table, "", TextOptions{});
  ASSERT_TRUE(inferred.ok()) << inferred.status();
  EXPECT_EQ(inferred->schema.label, "label");
  std::set<std::string> columns;
  for (const ColumnSpec& c : inferred->schema.columns) columns.insert(c.name);
  EXPECT_TRUE(columns.contains("I1") && columns.contains("C1")) << inferred->schema.ToJson();
  EXPECT_FALSE(columns.contains("C2"));  // every value missing: left out
  const Schema schema = SchemaOf(R"({"label": "label", "columns": [
      {"name": "I1", "type": "numeric", "normalizer": "none"},
      {"name": "C1", "type": "categorical"}]})");
  std::optional<Fitted> fit = Fit(*table, schema, TextOptions{});
  ASSERT_TRUE(fit.has_value());
  EXPECT_EQ(fit->stats.rows, 5);
  absl::StatusOr<Examples> e = ReadCsvThrough(fit->transform, *table, TextOptions{});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_THAT(e->records, ElementsAre(0, 1, 2, 3, 4));
  EXPECT_THAT(e->labels, ElementsAre(0, 1, 0, 1, 0));
  EXPECT_THAT(RefusalOfColumn(*table, "label", "I14"),
              AllOf(HasSubstr("I14"), HasSubstr("columns label, I1, ... C26")));
}

TEST(FeatureTableTest, AFileWhoseFirstLineIsAllNumbersHasNoHeaderAndColumnsC1ToCn) {
  // Record 0 is a row: numbers and a missing value. Categories are integer codes.
  const TempFile file("feature_table_headerless.csv",
                      "1,2.5,NA,7\n0,3.5,1,7\n1,4.5,2,8\n0,5.5,1,8\n1,6.5,3,9\n");
  absl::StatusOr<CsvTable> table = OpenCsvTable(file.path, ',');
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_THAT(table->header.names, ElementsAre("c1", "c2", "c3", "c4"));
  EXPECT_FALSE(table->header.in_file);
  absl::StatusOr<InferredSchema> inferred = InferCsvSchema(*table, "", TextOptions{});
  ASSERT_TRUE(inferred.ok()) << inferred.status();
  EXPECT_EQ(inferred->schema.label, "c1");  // the first column, as --data csv: labels
  const Schema schema = SchemaOf(R"({"label": "c1", "columns": [
      {"name": "c2", "type": "numeric", "normalizer": "none"}]})");
  std::optional<Fitted> fit = Fit(*table, schema, TextOptions{});
  ASSERT_TRUE(fit.has_value());
  EXPECT_EQ(fit->stats.rows, 5);  // record 0 included
  EXPECT_DOUBLE_EQ(fit->stats.columns[0].mean, 4.5);
  TextOptions range;
  range.end_record = 2;
  absl::StatusOr<Examples> e = ReadCsvThrough(fit->transform, *table, range);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_THAT(e->records, ElementsAre(0, 1));
  EXPECT_THAT(e->dense, ElementsAre(2.5, 3.5));
  EXPECT_THAT(e->labels, ElementsAre(1, 0));
  range.first_record = 3;  // a later range: the same rows as any other
  range.end_record = 5;
  e = ReadCsvThrough(fit->transform, *table, range);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_THAT(e->records, ElementsAre(3, 4));
  // A name the file cannot have says why the columns are c1 to c4.
  EXPECT_THAT(RefusalOfColumn(*table, "y", "c2"),
              AllOf(HasSubstr("\"y\""), HasSubstr("no header"), HasSubstr("c1 to c4")));
}

TEST(FeatureTableTest, ALibSvmFileIsATableOfColumnsByFeatureIndex) {
  DataSpec spec;
  spec.format = DataSpec::Format::kLibSvm;
  absl::StatusOr<CsvLayout> layout = TableLayout(spec);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_TRUE(layout->libsvm);
  // Indices 1 to 4 (2 on no line but within them), tabs or spaces, a comment (a quote in it is
  // text), a byte order mark; absent is 0.
  const TempFile file("feature_table.svm",
                      "\xEF\xBB\xBF+1 1:0.5 3:2\n-1\t4:1 #\t\"four\n\n+1 1:1.5\t3:4\n-1 1:y 3:2\n");
  absl::StatusOr<CsvTable> table = OpenCsvTable(file.path, *layout);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_THAT(table->header.names, ElementsAre("label", "f1", "f2", "f3", "f4"));
  EXPECT_FALSE(table->header.in_file);
  const Schema schema = SchemaOf(R"({"label": "label", "columns": [
      {"name": "f1", "type": "numeric", "normalizer": "none"},
      {"name": "f2", "type": "numeric", "normalizer": "none"},
      {"name": "f4", "type": "numeric", "normalizer": "none"}]})");
  TextOptions training;
  training.end_record = 3;  // the rows before "1:y"
  std::optional<Fitted> fit = Fit(*table, schema, training);
  ASSERT_TRUE(fit.has_value());
  EXPECT_EQ(fit->stats.rows, 3);
  EXPECT_THAT(fit->stats.classes, ElementsAre("-1", "+1"));  // numbers, in numeric order
  EXPECT_DOUBLE_EQ(fit->stats.columns[0].mean, 2.0 / 3);     // 0.5, 0, 1.5
  absl::StatusOr<Examples> e = ReadCsvThrough(fit->transform, *table, training);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_THAT(e->labels, ElementsAre(1, 0, 1));
  EXPECT_THAT(e->dense, ElementsAre(0.5, 0, 0, 0, 0, 1, 1.5, 0, 0));
  // A bad value is named by file, line and column; a bad token by file and line.
  EXPECT_THAT(ReadCsvThrough(fit->transform, *table, TextOptions{}).status().message(),
              AllOf(HasSubstr(file.path + ":5"), HasSubstr("f1")));
  const TempFile bad("feature_table_bad.svm", "1 1:1\n0 3:1 2:1\n");
  absl::StatusOr<CsvTable> bad_table = OpenCsvTable(bad.path, table->layout);
  ASSERT_TRUE(bad_table.ok()) << bad_table.status();
  EXPECT_THAT(ReadCsvThrough(fit->transform, *bad_table, TextOptions{}).status().message(),
              AllOf(HasSubstr(bad.path + ":2: "), HasSubstr("strictly increasing")));
  EXPECT_THAT(RefusalOfColumn(*table, "label", "f7"),
              AllOf(HasSubstr("\"f7\""), HasSubstr("columns are label and f1 to f4")));
  // Under kSkip a line that is not LibSVM is skipped and counted.
  TextOptions skip;
  skip.bad_lines = TextOptions::BadLines::kSkip;
  absl::StatusOr<Examples> skipped = ReadCsvThrough(fit->transform, *bad_table, skip);
  ASSERT_TRUE(skipped.ok()) << skipped.status();
  EXPECT_THAT(skipped->records, ElementsAre(0));
  EXPECT_EQ(skipped->bad_lines_skipped, 1);
  // A test file read with the training file's columns drops an index they lack.
  const TempFile test("feature_table_test.svm", "+1 1:3 4:2 9:7\n");
  absl::StatusOr<CsvTable> test_table = OpenCsvTable(test.path, table->layout);
  ASSERT_TRUE(test_table.ok()) << test_table.status();
  EXPECT_EQ(test_table->header.names, table->header.names);
  e = ReadCsvThrough(fit->transform, *test_table, TextOptions{});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_THAT(e->dense, ElementsAre(3, 0, 2));
  // Index 0 makes a column f0; past kMaxLibSvmColumns the file is sparse and refused so.
  const TempFile zero("feature_table_zero.svm", "1 0:1 2:1\n");
  absl::StatusOr<CsvTable> zero_table = OpenCsvTable(zero.path, *layout);
  ASSERT_TRUE(zero_table.ok()) << zero_table.status();
  EXPECT_THAT(zero_table->header.names, ElementsAre("label", "f0", "f1", "f2"));
  EXPECT_THAT(LibSvmLayout(0, 3).names, ElementsAre("label", "f0", "f1", "f2"));
  EXPECT_EQ(LibSvmLayout(0, 3).first_index, 0u);
  const TempFile wide("feature_table_wide.svm",
                      absl::StrCat("1 1:1 ", kMaxLibSvmColumns + 1, ":1\n"));
  EXPECT_THAT(OpenCsvTable(wide.path, *layout).status().message(),
              AllOf(HasSubstr(wide.path), HasSubstr("sparse"), HasSubstr("without --schema")));
  // With the columns the chief found, as a worker gets them, the file is not read for them:
  // the same wide file opens, as those columns.
  absl::StatusOr<CsvTable> as_told = OpenCsvTable(wide.path, LibSvmLayout(1, 4));
  ASSERT_TRUE(as_told.ok()) << as_told.status();
  EXPECT_THAT(as_told->header.names, ElementsAre("label", "f1", "f2", "f3", "f4"));
  const TempFile empty("feature_table_empty.svm", "\n");
  EXPECT_THAT(OpenCsvTable(empty.path, *layout).status().message(), HasSubstr("empty file"));
  EXPECT_THAT(OpenCsvTable(empty.path, table->layout).status().message(), HasSubstr("empty file"));
  EXPECT_FALSE(OpenCsvTable(::testing::TempDir() + "/none.svm", table->layout).ok());
}

}  // namespace
}  // namespace pstrain
