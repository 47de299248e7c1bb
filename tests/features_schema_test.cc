// Feature columns: a schema read from JSON or YAML with every mistake named, statistics from one
// pass over rows, the transform of a row against hand-computed values, and a schema inferred.
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "data/data.h"
#include "features/features.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

std::vector<absl::string_view> Fields(absl::string_view line) { return absl::StrSplit(line, ','); }

// Statistics of `rows` (each a CSV line) under `schema` and `header`, then their transform.
struct Fitted {
  FeatureStats stats;
  Transform transform;
};
Fitted Fit(const Schema& schema, const std::vector<std::string>& header,
           const std::vector<std::string>& rows) {
  absl::StatusOr<StatsBuilder> b = StatsBuilder::Create(schema, header);
  EXPECT_TRUE(b.ok()) << b.status();
  for (size_t i = 0; i < rows.size(); ++i) {
    absl::Status s = b->Add(Fields(rows[i]), absl::StrCat("rows:", i + 1));
    EXPECT_TRUE(s.ok()) << s;
  }
  absl::StatusOr<FeatureStats> stats = b->Finish();
  EXPECT_TRUE(stats.ok()) << stats.status();
  absl::StatusOr<Transform> t = Transform::Create(schema, *stats, header);
  EXPECT_TRUE(t.ok()) << t.status();
  return {*stats, *std::move(t)};
}

Schema Parse(absl::string_view json) {
  absl::StatusOr<Schema> s = Schema::FromJson(json, "schema.json");
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : Schema{};
}

std::string ParseError(absl::string_view json) {
  absl::StatusOr<Schema> s = Schema::FromJson(json, "schema.json");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(s.status().message());
}

TEST(FeatureSchemaTest, ReadsEveryKindOfColumnAndWritesItBackTheSame) {
  const Schema s = Parse(R"({
    "label": "y", "task": "classification",
    "columns": [
      {"name": "age", "type": "numeric", "normalizer": "minmax", "missing_indicator": true},
      {"name": "fare", "type": "numeric", "normalizer": "log1p"},
      {"name": "age_b", "type": "bucketized", "buckets": 4},
      {"name": "sex", "type": "categorical", "encoding": "vocabulary", "embedding_dim": 4},
      {"name": "zip", "type": "categorical", "encoding": "hash", "hash_buckets": 1000},
      {"name": "code", "type": "categorical", "encoding": "identity", "num_ids": 41}
    ],
    "crosses": [{"columns": ["sex", "code"], "hash_buckets": 100}]})");
  ASSERT_EQ(s.columns.size(), 6u);
  EXPECT_EQ(s.label, "y");
  EXPECT_EQ(s.columns[0].normalizer, Normalizer::kMinMax);
  EXPECT_TRUE(s.columns[0].missing_indicator);
  EXPECT_EQ(s.columns[1].normalizer, Normalizer::kLog1p);
  EXPECT_EQ(s.columns[2].kind, ColumnSpec::Kind::kBucketized);
  EXPECT_EQ(s.columns[2].buckets, 4);
  EXPECT_EQ(s.columns[3].embedding_dim, 4);
  EXPECT_EQ(s.columns[4].hash_buckets, 1000);
  EXPECT_EQ(s.columns[5].num_ids, 41);
  ASSERT_EQ(s.crosses.size(), 1u);
  EXPECT_THAT(s.crosses[0].columns, ElementsAre("sex", "code"));
  const Schema again = Parse(s.ToJson());
  EXPECT_EQ(again.ToJson(), s.ToJson());
}

// The same schema in YAML reads as in JSON; quoted scalars stay strings, plain ones are numbers
// and booleans, and what YAML cannot parse or JSON's reader refuses is named with its place.
TEST(FeatureSchemaTest, AYamlSchemaReadsAsItsJson) {
  absl::StatusOr<Schema> yaml = Schema::FromYaml(R"(# the survey's columns
label: "y"
task: classification
columns:
  - {name: age, type: numeric, normalizer: minmax, missing_indicator: true}
  - name: "1990"            # quoted: a name, not a number
    type: bucketized
    buckets: 4
  - name: code
    type: categorical
    encoding: identity
    num_ids: 41
    embedding_dim: 4
crosses:
  - columns: [age_b, code]
    hash_buckets: 100
)",
                                                 "schema.yaml");
  EXPECT_FALSE(yaml.ok());  // age_b is not a column
  EXPECT_THAT(yaml.status().message(), HasSubstr("schema.yaml: crosses[0]: no column \"age_b\""));
  yaml = Schema::FromYaml(R"(
label: y
columns:
  - {name: age, type: numeric, normalizer: minmax, missing_indicator: true}
  - {name: "1990", type: bucketized, buckets: 4}
  - {name: code, type: categorical, encoding: identity, num_ids: 41, embedding_dim: 4}
crosses: [{columns: ["1990", code], hash_buckets: 100}]
)",
                          "schema.yaml");
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  const Schema json = Parse(R"({"label": "y", "columns": [
      {"name": "age", "type": "numeric", "normalizer": "minmax", "missing_indicator": true},
      {"name": "1990", "type": "bucketized", "buckets": 4},
      {"name": "code", "type": "categorical", "encoding": "identity", "num_ids": 41,
       "embedding_dim": 4}],
      "crosses": [{"columns": ["1990", "code"], "hash_buckets": 100}]})");
  EXPECT_EQ(yaml->ToJson(), json.ToJson());

  auto error = [](absl::string_view text) {
    absl::StatusOr<Schema> s = Schema::FromYaml(text, "schema.yaml");
    EXPECT_TRUE(absl::IsInvalidArgument(s.status())) << s.status();
    return std::string(s.status().message());
  };
  EXPECT_THAT(error("label: y\ncolumns: [{name: a}\n"),
              HasSubstr("schema.yaml: not valid YAML at line "));
  EXPECT_THAT(error("label: y\nlabel: z\ncolumns: [{name: a}]\n"),
              HasSubstr("key \"label\" is given twice"));
  EXPECT_THAT(error("label: y\ncolumns: [{name: a, missing_indicator: \"true\"}]\n"),
              HasSubstr("\"missing_indicator\" must be true or false"));
  EXPECT_THAT(error("label: y\ncolumns: [{name: a, type: categorical, encoding: hash, "
                    "hash_buckets: \"8\"}]\n"),
              HasSubstr("\"hash_buckets\" must be an integer"));
  EXPECT_THAT(error("- label\n- y\n"), HasSubstr("schema.yaml: must be an object"));
  EXPECT_THAT(error(std::string(200, '[') + std::string(200, ']')),
              HasSubstr("schema.yaml line 1, column 34: nested deeper than 32 levels"));
  // Past yaml-cpp's own bound (its parser stops at 2,000 levels) the same words, not its "bad
  // file".
  EXPECT_THAT(error(std::string(100000, '[')),
              AllOf(HasSubstr("schema.yaml line 1, column "), HasSubstr("nested deeper than 32"),
                    Not(HasSubstr("bad file"))));
  // Aliases of aliases: 10^9 values if expanded, refused after a bounded number.
  std::string laughs = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  for (char c = 'b'; c <= 'j'; ++c) {
    absl::StrAppend(&laughs, std::string(1, c), ": &", std::string(1, c), " [");
    for (int i = 0; i < 10; ++i)
      absl::StrAppend(&laughs, i ? ", " : "", "*", std::string(1, c - 1));
    absl::StrAppend(&laughs, "]\n");
  }
  EXPECT_THAT(error(laughs), HasSubstr("more than 100000 values (aliases included)"));
}

TEST(FeatureSchemaTest, EveryMistakeIsNamed) {
  EXPECT_THAT(ParseError("{"), HasSubstr("schema.json: not valid JSON"));
  EXPECT_THAT(ParseError(R"({"columns": [{"name": "a"}]})"), HasSubstr("\"label\""));
  EXPECT_THAT(ParseError(R"({"label": "y", "columns": []})"), HasSubstr("\"columns\""));
  EXPECT_THAT(ParseError(R"({"label": "y", "columns": [{"name": "a", "normaliser": "none"}]})"),
              HasSubstr("schema.json: columns[0]: unknown key \"normaliser\""));
  EXPECT_THAT(ParseError(R"({"label": "y", "columns": [{"name": "a", "type": "text"}]})"),
              HasSubstr("\"type\" is \"text\"; it must be one of numeric, categorical"));
  EXPECT_THAT(ParseError(R"({"label": "y", "columns": [{"type": "numeric"}]})"),
              HasSubstr("columns[0]: a column needs a \"name\""));
  EXPECT_THAT(ParseError(R"({"label": "y", "columns": [{"name": "a"}, {"name": "a"}]})"),
              HasSubstr("column \"a\" is named twice"));
  EXPECT_THAT(ParseError(R"({"label": "y", "columns": [{"name": "y"}]})"),
              HasSubstr("column \"y\" is named twice (or is the label)"));
  EXPECT_THAT(ParseError(R"({"label": "y", "columns": [{"name": "a", "type": "categorical",
                                                        "encoding": "hash"}]})"),
              HasSubstr("encoding \"hash\" needs \"hash_buckets\""));
  EXPECT_THAT(ParseError(R"({"label": "y", "columns": [{"name": "a", "type": "categorical",
                                                        "encoding": "hash", "hash_buckets": 1}]})"),
              HasSubstr("\"hash_buckets\" must be an integer from 2"));
  EXPECT_THAT(ParseError(R"({"label": "y", "columns": [{"name": "a"}, {"name": "b",
                              "type": "categorical"}],
                              "crosses": [{"columns": ["a", "b"], "hash_buckets": 10}]})"),
              HasSubstr("crosses[0]: column \"a\" is numeric"));
  EXPECT_THAT(ParseError(R"({"label": "y", "columns": [{"name": "a", "buckets": 4}]})"),
              HasSubstr("\"buckets\" applies to bucketized columns, and column \"a\" is "
                        "numeric"));
  EXPECT_THAT(ParseError(R"({"label": "y", "columns": [{"name": "c", "type": "categorical",
                              "encoding": "hash", "hash_buckets": 8, "num_ids": 3}]})"),
              HasSubstr("\"num_ids\" applies to categorical (identity) columns, and column "
                        "\"c\" is categorical (hash)"));
  EXPECT_THAT(ParseError(R"({"label": "y", "columns": [{"name": "a", "embedding_dim": 3}]})"),
              HasSubstr("\"embedding_dim\" applies to categorical and bucketized columns"));
  EXPECT_THAT(ParseError(R"({"label": "y", "columns": [{"name": "b", "type": "categorical"}],
                              "crosses": [{"columns": ["b", "c"], "hash_buckets": 10}]})"),
              HasSubstr("crosses[0]: no column \"c\""));
}

TEST(FeatureTransformTest, NumericColumnsMatchHandComputedValues) {
  const Schema s = Parse(R"({"label": "y", "columns": [
      {"name": "a"},
      {"name": "b", "normalizer": "minmax"},
      {"name": "c", "normalizer": "log1p"},
      {"name": "d", "normalizer": "none", "missing_indicator": true}]})");
  const std::vector<std::string> header = {"a", "y", "b", "c", "d"};
  const std::string e1 = absl::StrFormat("%.17g", std::expm1(1.0));  // log1p(e - 1) = 1
  Fitted f = Fit(s, header,
                 {"1,0,10,0,5", absl::StrCat("2,1,20,", e1, ",NA"), "3,0,30,99,7", "4,1,50,-3,?"});
  // a: mean 2.5, population stddev sqrt(1.25); c: log1p of 0, e-1, 99 and -3 is 0, 1, ln 100,
  // -ln 4; d: mean of 5 and 7.
  EXPECT_DOUBLE_EQ(f.stats.columns[0].mean, 2.5);
  EXPECT_DOUBLE_EQ(f.stats.columns[0].stddev, std::sqrt(1.25));
  EXPECT_EQ(f.stats.columns[3].count, 2);
  EXPECT_EQ(f.stats.columns[3].missing, 2);
  EXPECT_THAT(f.stats.classes, ElementsAre("0", "1"));
  EXPECT_EQ(f.transform.shape().dense_features, 5);
  EXPECT_EQ(f.transform.shape().num_classes, 2);

  Examples out;
  out.dense_dim = 5;
  ASSERT_TRUE(f.transform.Append(Fields(absl::StrCat("4,1,30,", e1, ",n/a")), "test:1", &out).ok());
  const double lc[] = {0, 1, std::log(100.0), -std::log(4.0)};
  const double mc = (lc[0] + lc[1] + lc[2] + lc[3]) / 4;
  double vc = 0;
  for (double x : lc) vc += (x - mc) * (x - mc) / 4;
  ASSERT_EQ(out.dense.size(), 5u);
  EXPECT_NEAR(out.dense[0], (4 - 2.5) / std::sqrt(1.25), 1e-6);
  EXPECT_NEAR(out.dense[1], (30.0 - 10) / (50 - 10), 1e-6);
  EXPECT_NEAR(out.dense[2], (1 - mc) / std::sqrt(vc), 1e-5);
  EXPECT_NEAR(out.dense[3], 6.0, 1e-6);  // missing: the mean, flagged
  EXPECT_EQ(out.dense[4], 1.0f);
  EXPECT_EQ(out.labels[0], 1.0f);
  EXPECT_EQ(out.sparse_offsets, (std::vector<int64_t>{0, 0}));
  // Far out of the training range a scaled value is clamped; an unscaled one must fit a float.
  ASSERT_TRUE(f.transform.Append(Fields("1e300,0,-1e300,0,5"), "test:2", &out).ok());
  EXPECT_EQ(out.dense[5], 1e6f);
  EXPECT_EQ(out.dense[6], -1e6f);
  EXPECT_THAT(f.transform.Append(Fields("1,0,10,0,1e300"), "test:3", &out).message(),
              HasSubstr("test:3: column \"d\": \"1e300\" is beyond a float's range"));
  EXPECT_EQ(out.size(), 2);
}

TEST(FeatureTransformTest, CategoricalColumnsGiveOneKeyPerColumnAndCross) {
  const Schema s = Parse(R"({"label": "y", "columns": [
      {"name": "sex", "type": "categorical"},
      {"name": "code", "type": "categorical", "encoding": "identity", "num_ids": 5},
      {"name": "zip", "type": "categorical", "encoding": "hash", "hash_buckets": 8},
      {"name": "v", "type": "bucketized", "buckets": 4}],
      "crosses": [{"columns": ["sex", "code"], "hash_buckets": 1000}]})");
  const std::vector<std::string> header = {"y", "sex", "code", "zip", "v"};
  std::vector<std::string> rows;
  for (int i = 1; i <= 100; ++i) {
    rows.push_back(
        absl::StrCat("no,", i % 3 == 0 ? "female" : "male", ",", i % 5, ",z", i, ",", i));
  }
  rows.push_back("yes,other,1,z1,");
  Fitted f = Fit(s, header, rows);
  EXPECT_THAT(f.stats.columns[0].vocabulary, ElementsAre("male", "female", "other"));
  EXPECT_THAT(f.stats.columns[3].boundaries, ElementsAre(26, 51, 76));
  EXPECT_THAT(f.stats.classes, ElementsAre("no", "yes"));
  EXPECT_EQ(f.transform.shape().categorical_fields, 5);

  Examples out;
  ASSERT_TRUE(f.transform.Append(Fields("yes,female,3,zz,30"), "t:1", &out).ok());
  ASSERT_TRUE(f.transform.Append(Fields("no,unseen,3,zz,"), "t:2", &out).ok());
  ASSERT_TRUE(f.transform.Append(Fields("no,,4,z7,100"), "t:3", &out).ok());
  EXPECT_EQ(out.sparse_offsets, (std::vector<int64_t>{0, 5, 10, 15}));
  EXPECT_THAT(out.labels, ElementsAre(1, 0, 0));
  // Row 1: female is id 2, code 3, bucket 1 (26 <= 30 < 51); row 2: an unseen value is id 0
  // and a missing bucket has a key of its own; row 3: a missing category likewise.
  EXPECT_EQ(out.sparse_keys[0], CategoricalKey(0, 2, false));
  EXPECT_EQ(out.sparse_keys[1], CategoricalKey(1, 3, false));
  EXPECT_EQ(out.sparse_keys[3], CategoricalKey(3, 1, false));
  EXPECT_EQ(out.sparse_keys[5], CategoricalKey(0, 0, false));
  EXPECT_EQ(out.sparse_keys[8], CategoricalKey(3, 0, true));
  EXPECT_EQ(out.sparse_keys[10], CategoricalKey(0, 0, true));
  EXPECT_EQ(out.sparse_keys[13], CategoricalKey(3, 3, false));
  EXPECT_EQ(out.sparse_keys[2], out.sparse_keys[7]);  // "zz" hashes the same every time
  EXPECT_NE(out.sparse_keys[4], out.sparse_keys[9]);  // crosses of (female, 3), (unseen, 3)
  for (int32_t field : {0, 1, 2, 3, 4}) EXPECT_EQ(out.sparse_fields[field], field);

  // Hashing keeps a column's ids bounded whatever the number of distinct values.
  Examples many;
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(f.transform.Append(Fields(absl::StrCat("no,male,0,v", i, ",1")), "t", &many).ok());
  }
  std::set<uint64_t> zip_keys;
  for (int64_t r = 0; r < many.size(); ++r) zip_keys.insert(many.sparse_keys[r * 5 + 2]);
  EXPECT_LE(zip_keys.size(), 8u);
  EXPECT_GE(zip_keys.size(), 6u);
}

TEST(FeatureTransformTest, LabelsAreClassesInNumericOrderOrRegressionTargets) {
  const std::vector<std::string> header = {"x", "y"};
  Fitted f = Fit(Parse(R"({"label": "y", "columns": [{"name": "x"}]})"), header,
                 {"1,10", "2,2", "3,1", "4,2"});
  EXPECT_THAT(f.stats.classes, ElementsAre("1", "2", "10"));
  Examples out;
  ASSERT_TRUE(f.transform.Append(Fields("1,10.0"), "t:1", &out).ok());  // "10.0" is class "10"
  EXPECT_EQ(out.labels[0], 2.0f);
  absl::Status unseen = f.transform.Append(Fields("1,3"), "test.csv:7", &out);
  EXPECT_THAT(unseen.message(),
              HasSubstr("test.csv:7: column \"y\": \"3\" is a class the training rows never had"));
  EXPECT_EQ(out.size(), 1);  // nothing appended for a row that fails

  Fitted r = Fit(Parse(R"({"label": "y", "task": "regression", "columns": [{"name": "x"}]})"),
                 header, {"1,0.5", "2,-1.25"});
  EXPECT_TRUE(r.stats.classes.empty());
  EXPECT_EQ(r.transform.shape().num_classes, 0);
  ASSERT_TRUE(r.transform.Append(Fields("1,3.75"), "t:1", &out).ok());
  EXPECT_EQ(out.labels[1], 3.75f);
  EXPECT_THAT(r.transform.Append(Fields("1,abc"), "t:2", &out).message(),
              HasSubstr("t:2: column \"y\": \"abc\" is not a number within a float's range"));
}

TEST(FeatureTransformTest, OneNumberIsOneClassAndEveryRowHasTheHeadersWidth) {
  const Schema s = Parse(R"({"label": "y", "columns": [{"name": "x"}]})");
  Fitted f = Fit(s, {"x", "y"}, {"1,1", "2,1.0", "3,0", "4,00"});
  EXPECT_THAT(f.stats.classes, ElementsAre("0", "1"));
  EXPECT_EQ(f.transform.shape().num_classes, 2);
  Examples out;
  EXPECT_THAT(f.transform.Append(Fields("1,1,7"), "t:1", &out).message(),
              HasSubstr("t:1: 3 fields where the header has 2"));
  EXPECT_THAT(f.transform.Append(Fields("1"), "t:2", &out).message(),
              HasSubstr("t:2: 1 fields where the header has 2"));
  EXPECT_EQ(out.size(), 0);
  // A header that names a schema's column twice is ambiguous.
  EXPECT_THAT(StatsBuilder::Create(s, {"x", "y", "x"}).status().message(),
              HasSubstr("the header names column \"x\" twice (fields 1 and 3)"));
  EXPECT_THAT(Transform::Create(s, f.stats, {"y", "y", "x"}).status().message(),
              HasSubstr("names column \"y\" twice"));
  // A regression target must fit a float.
  const Schema r = Parse(R"({"label": "y", "task": "regression", "columns": [{"name": "x"}]})");
  absl::StatusOr<StatsBuilder> b = StatsBuilder::Create(r, {"x", "y"});
  EXPECT_THAT(b->Add(Fields("1,1e300"), "big.csv:2").message(),
              HasSubstr("big.csv:2: column \"y\": \"1e300\" is not a number within a float's "
                        "range"));
}

TEST(FeatureStatsTest, BadRowsAreNamedByFileLineAndColumn) {
  const Schema s = Parse(R"({"label": "y", "columns": [{"name": "a"},
      {"name": "c", "type": "categorical", "encoding": "identity", "num_ids": 3}]})");
  absl::StatusOr<StatsBuilder> missing_column = StatsBuilder::Create(s, {"y", "a"});
  EXPECT_THAT(missing_column.status().message(),
              HasSubstr("the data has no column \"c\" (its header: y,a)"));
  absl::StatusOr<StatsBuilder> b = StatsBuilder::Create(s, {"y", "a", "c"});
  ASSERT_TRUE(b.ok());
  EXPECT_THAT(b->Add(Fields("1,abc,0"), "train.csv:3").message(),
              HasSubstr("train.csv:3: column \"a\": \"abc\" is not a finite number"));
  EXPECT_THAT(b->Add(Fields("1,inf,0"), "train.csv:4").message(),
              HasSubstr("\"inf\" is not a finite number"));
  EXPECT_THAT(b->Add(Fields("1,2,3"), "train.csv:5").message(),
              HasSubstr("train.csv:5: column \"c\": \"3\" is not an id from 0 to 2"));
  EXPECT_THAT(b->Add(Fields("1,2"), "train.csv:6").message(),
              HasSubstr("train.csv:6: 2 fields where the header has 3"));
  EXPECT_THAT(b->Add(Fields(",2,1"), "train.csv:7").message(),
              HasSubstr("train.csv:7: the label \"y\" is missing"));
  ASSERT_TRUE(b->Add(Fields("1,2,1"), "train.csv:8").ok());
  EXPECT_THAT(b->Finish().status().message(),
              HasSubstr("the label \"y\" has 1 class in the training rows"));
  // A row refused counts nowhere: "100" of the refused row is not in the mean.
  absl::StatusOr<StatsBuilder> after = StatsBuilder::Create(s, {"y", "a", "c"});
  EXPECT_FALSE(after->Add(Fields("1,100,3"), "train.csv:2").ok());
  ASSERT_TRUE(after->Add(Fields("0,2,1"), "train.csv:3").ok());
  ASSERT_TRUE(after->Add(Fields("1,4,1"), "train.csv:4").ok());
  absl::StatusOr<FeatureStats> stats = after->Finish();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->rows, 2);
  EXPECT_EQ(stats->columns[0].mean, 3);
  EXPECT_EQ(stats->columns[0].max, 4);
  absl::StatusOr<StatsBuilder> none = StatsBuilder::Create(s, {"y", "a", "c"});
  EXPECT_THAT(none->Finish().status().message(), HasSubstr("no training row"));
}

TEST(FeatureStatsTest, AVocabularyPastItsBoundAsksForHashing) {
  const Schema s = Parse(R"({"label": "y", "columns": [{"name": "id", "type": "categorical"}]})");
  absl::StatusOr<StatsBuilder> b = StatsBuilder::Create(s, {"y", "id"});
  ASSERT_TRUE(b.ok());
  absl::Status last;
  for (int64_t i = 0; i <= StatsBuilder::kMaxVocabulary && last.ok(); ++i) {
    last = b->Add(Fields(absl::StrCat(i % 2, ",u", i)), absl::StrCat("big.csv:", i + 2));
  }
  EXPECT_THAT(last.message(), HasSubstr(absl::StrCat("big.csv:", StatsBuilder::kMaxVocabulary + 2,
                                                     ": column \"id\" has more than ")));
  EXPECT_THAT(last.message(), HasSubstr("\"encoding\": \"hash\""));
}

TEST(FeatureStatsTest, StatisticsTravelAsJsonAndMustFitTheirSchema) {
  const Schema s = Parse(R"({"label": "y", "columns": [{"name": "a"},
      {"name": "s", "type": "categorical"}]})");
  Fitted f = Fit(s, {"y", "a", "s"}, {"0,1.5,x", "1,2.5,y", "1,3,y"});
  absl::StatusOr<FeatureStats> back = FeatureStats::FromJson(f.stats.ToJson(), "ckpt");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ToJson(), f.stats.ToJson());
  EXPECT_THAT(back->columns[1].vocabulary, ElementsAre("y", "x"));
  // Values of any bytes (a Latin-1 file) come back as they were.
  Fitted latin = Fit(s, {"y", "a", "s"}, {"0,1,caf\xe9", "1,2,100%", "1,3,x"});
  absl::StatusOr<FeatureStats> bytes = FeatureStats::FromJson(latin.stats.ToJson(), "ckpt");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_THAT(bytes->columns[1].vocabulary, ElementsAre("100%", "caf\xe9", "x"));
  EXPECT_THAT(FeatureStats::FromJson(R"({"rows": 1, "classes": ["%zz"], "columns": []})", "c")
                  .status()
                  .message(),
              HasSubstr("bad escape"));
  // Statistics that could not come from data are refused, not used.
  auto refused = [](absl::string_view column_json, absl::string_view classes) {
    return std::string(FeatureStats::FromJson(absl::StrCat(R"({"rows": 3, "classes": )", classes,
                                                           R"(, "columns": [)", column_json, "]}"),
                                              "ckpt")
                           .status()
                           .message());
  };
  const std::string good =
      R"({"count": 3, "missing": 0, "mean": 1, "stddev": 1, "min": 0, "max": 2, )"
      R"("boundaries": [0.5, 1.5], "vocabulary": ["a", "b"]})";
  EXPECT_EQ(refused(good, R"(["0", "1"])"), "");
  EXPECT_THAT(refused(absl::StrReplaceAll(good, {{R"("stddev": 1)", R"("stddev": -1)"}}), "[]"),
              HasSubstr("ckpt: feature statistics: column 0: counts, moments or range"));
  EXPECT_THAT(refused(absl::StrReplaceAll(good, {{"[0.5, 1.5]", "[1.5, 0.5]"}}), "[]"),
              HasSubstr("bucket boundaries not finite and ascending"));
  EXPECT_THAT(refused(absl::StrReplaceAll(good, {{R"(["a", "b"])", R"(["a", "a"])"}}), "[]"),
              HasSubstr("a vocabulary value twice"));
  EXPECT_THAT(refused(good, R"(["1", "1"])"), HasSubstr("the classes must be distinct"));
  EXPECT_THAT(refused(good, R"(["1"])"), HasSubstr("the classes must be distinct"));
  EXPECT_THAT(FeatureStats::FromJson("{\"rows\": 1}", "ckpt/features.json").status().message(),
              HasSubstr("ckpt/features.json: feature statistics:"));

  Schema fewer = s;
  fewer.columns.pop_back();
  EXPECT_THAT(Transform::Create(fewer, *back, {"y", "a", "s"}).status().message(),
              HasSubstr("computed for another schema"));
  Schema regression = s;
  regression.task = Schema::Task::kRegression;
  EXPECT_THAT(Transform::Create(regression, *back, {"y", "a", "s"}).status().message(),
              HasSubstr("another task"));
}

TEST(SchemaInferrerTest, ChoosesEachColumnsKindAndSaysWhy) {
  absl::StatusOr<SchemaInferrer> in =
      SchemaInferrer::Create({"sex", "age", "code", "flag", "name", "empty", "species"}, "species");
  ASSERT_TRUE(in.ok());
  for (int i = 0; i < 60; ++i) {
    const std::string age = i % 10 == 0 ? "" : absl::StrCat(20 + i * 0.5);
    ASSERT_TRUE(
        in->Add(Fields(absl::StrCat(i % 2 ? "male" : "female", ",", age, ",", i % 7, ",", i % 2,
                                    ",person ", i, ",NA,", i % 3 ? "setosa" : "virginica")),
                "iris.csv")
            .ok());
  }
  absl::StatusOr<InferredSchema> got = in->Finish();
  ASSERT_TRUE(got.ok()) << got.status();
  const Schema& s = got->schema;
  EXPECT_EQ(s.label, "species");
  EXPECT_EQ(s.task, Schema::Task::kClassification);
  ASSERT_EQ(s.columns.size(), 4u);
  EXPECT_EQ(s.columns[0].kind, ColumnSpec::Kind::kCategorical);  // text
  EXPECT_EQ(s.columns[1].kind, ColumnSpec::Kind::kNumeric);      // numbers, some missing
  EXPECT_TRUE(s.columns[1].missing_indicator);
  EXPECT_EQ(s.columns[2].kind, ColumnSpec::Kind::kCategorical);  // 7 integer codes
  EXPECT_EQ(s.columns[3].kind, ColumnSpec::Kind::kNumeric);      // 0/1
  ASSERT_EQ(got->reasons.size(), 7u);
  EXPECT_THAT(got->reasons[0], HasSubstr("sex: text values (2 distinct): categorical"));
  EXPECT_THAT(got->reasons[1], HasSubstr("6 missing: filled with the mean and flagged"));
  EXPECT_THAT(got->reasons[2], HasSubstr("code: integers with 7 distinct values"));
  EXPECT_THAT(got->reasons[4], HasSubstr("name: text with a different value in every row"));
  EXPECT_THAT(got->reasons[5], HasSubstr("empty: every value is missing: left out"));
  EXPECT_THAT(got->reasons[6], HasSubstr("species (label): 2 distinct values: classification"));
  // The inferred schema is a schema: it reads back, and trains a transform.
  EXPECT_EQ(Parse(s.ToJson()).ToJson(), s.ToJson());

  absl::StatusOr<SchemaInferrer> reg = SchemaInferrer::Create({"y", "x"}, "");
  ASSERT_TRUE(reg->Add(Fields("0.5,1"), "r").ok());
  ASSERT_TRUE(reg->Add(Fields("2,1"), "r").ok());
  EXPECT_EQ(reg->Finish()->schema.task, Schema::Task::kRegression);
  EXPECT_THAT(SchemaInferrer::Create({"a", "b"}, "c").status().message(),
              HasSubstr("no column \"c\""));
  EXPECT_THAT(SchemaInferrer::Create({"y", "caf\xe9"}, "").status().message(),
              HasSubstr("the name of column 2 is not UTF-8"));
  EXPECT_THAT(SchemaInferrer::Create({"y", "a", "a"}, "").status().message(),
              HasSubstr("the header names column \"a\" twice (fields 2 and 3)"));
  EXPECT_THAT(SchemaInferrer::Create({"y", " "}, "").status().message(),
              HasSubstr("column 2 has no name in the header"));
  absl::StatusOr<SchemaInferrer> nothing = SchemaInferrer::Create({"y", "id", "gone"}, "");
  for (int i = 0; i < 30; ++i) {
    ASSERT_TRUE(nothing->Add(Fields(absl::StrCat(i % 2, ",user", i, ",")), "n").ok());
  }
  EXPECT_THAT(nothing->Finish().status().message(), HasSubstr("no column is left to be a feature"));
}

}  // namespace
}  // namespace pstrain
