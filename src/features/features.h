// Public header of src/features: feature columns. A schema says what each column of a table is
// (the label; numeric with its normalizer; categorical by vocabulary, hash or identity;
// bucketized; crossed), statistics from one pass over the training rows fill in what the schema
// leaves to the data (means, ranges, vocabularies, bucket boundaries, the label's classes), and
// the transform turns a row of raw fields into a model's inputs: dense floats and sparse keys.
// Readers (src/data) give raw fields; models (src/model) never see text. The shapes follow
// TensorFlow's tf.feature_column (numeric_column with a normalizer, bucketized_column,
// categorical_column_with_vocabulary_list / _hash_bucket / _identity, crossed_column).
//
// Plain values and functions; nothing here is shared between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/examples.h"
#include "data/data.h"

namespace pstrain {

// How a numeric column's value becomes a feature. kStandardize: (x - mean) / stddev of the
// training rows. kMinMax: (x - min) / (max - min), 0 when the column is constant. kLog1p:
// sign(x) log(1 + |x|), then standardized with the statistics of that (for heavy tails). kNone:
// as it is.
enum class Normalizer { kNone, kStandardize, kMinMax, kLog1p };
// How a categorical column's values become ids. kVocabulary: the values seen in training at
// least min_count times, most frequent first (id 0 is "other": unseen or rare; a missing value
// has a key of its own).
// kHash: a hash of the value modulo hash_buckets (memory bounded whatever the number of
// distinct values). kIdentity: the value is an integer code in [0, num_ids).
enum class Encoding { kVocabulary, kHash, kIdentity };

struct ColumnSpec {
  enum class Kind { kNumeric, kCategorical, kBucketized };
  std::string name;  // of the table's header
  Kind kind = Kind::kNumeric;
  // Numeric: a missing value (an empty field, "NA", "N/A", "NaN", "?", "null") takes the
  // training mean (0 after standardizing); `missing_indicator` adds a dense 0/1 feature saying
  // it was missing.
  Normalizer normalizer = Normalizer::kStandardize;
  bool missing_indicator = false;
  // Bucketized: a numeric column cut at quantiles of the training rows into this many buckets,
  // each bucket a category (a missing value is a bucket of its own).
  int buckets = 10;
  // Categorical.
  Encoding encoding = Encoding::kVocabulary;
  int64_t min_count = 1;     // kVocabulary
  int64_t hash_buckets = 0;  // kHash: required, at least 2
  int64_t num_ids = 0;       // kIdentity: required, at least 1
  int embedding_dim = 0;     // a model's embedding of this column; 0: the model's default
  // Categorical and bucketized: the column becomes dense one-hot inputs (one per id, and one
  // for a missing value) instead of a sparse key, as tf.feature_column.indicator_column; at
  // most kMaxIndicatorWidth of them.
  bool indicator = false;
  static constexpr int64_t kMaxIndicatorWidth = 4096;
};

// A cross of two or more categorical or bucketized columns (the wide part of a model): each
// combination of their ids hashed into hash_buckets.
struct CrossSpec {
  std::vector<std::string> columns;
  int64_t hash_buckets = 0;  // required, at least 2
};

struct Schema {
  enum class Task { kClassification, kRegression };
  std::string label;  // the label column's name
  Task task = Task::kClassification;
  std::vector<ColumnSpec> columns;  // the features, in the order of the model's inputs
  std::vector<CrossSpec> crosses;

  // Reads a schema from JSON (the layout is in docs/features.md). Errors are InvalidArgument
  // naming `source` and the field at fault: an unknown key or value, a missing name, a column
  // named twice, a cross of an unknown or numeric column, a hash or id count out of range.
  static absl::StatusOr<Schema> FromJson(absl::string_view text, absl::string_view source);
  // The same layout in YAML (1.2's core schema: a plain true/false is a boolean, a plain number
  // a number, null or ~ nothing, anything quoted a string). A document that is not YAML is
  // refused naming its line and column (from 1).
  static absl::StatusOr<Schema> FromYaml(absl::string_view text, absl::string_view source);
  std::string ToJson() const;  // FromJson(ToJson()) gives the same schema
};

// What the transform learns from the training rows: one entry per schema column, in order.
struct ColumnStats {
  int64_t count = 0;                              // rows with a value (numeric and bucketized)
  int64_t missing = 0;                            // rows without one
  double mean = 0, stddev = 0, min = 0, max = 0;  // of the value (after log1p for kLog1p)
  std::vector<double> boundaries;                 // bucketized: ascending cut points
  std::vector<std::string> vocabulary;            // kVocabulary: the ids' values, from id 1
};
struct FeatureStats {
  std::vector<ColumnStats> columns;
  // Classification: the label's classes, class k is classes[k] (numbers in numeric order,
  // otherwise strings in byte order). Regression: empty.
  std::vector<std::string> classes;
  // Regression: the mean and standard deviation of the target (a model learns the target
  // standardized by them and predicts in its units). Classification: 0.
  double label_mean = 0, label_stddev = 0;
  int64_t rows = 0;

  std::string ToJson() const;
  static absl::StatusOr<FeatureStats> FromJson(absl::string_view text, absl::string_view source);
};

// One pass over the training rows, each given as the fields of the header's columns.
class StatsBuilder {
 public:
  // InvalidArgument when the schema names a column `header` lacks (naming it and the header).
  static absl::StatusOr<StatsBuilder> Create(const Schema& schema,
                                             const std::vector<std::string>& header);
  // `where` ("file:line") prefixes an error: a field count unlike the header's, a numeric
  // field that is not a number, a missing label, an identity code out of range, more distinct
  // values than a vocabulary keeps (kMaxVocabulary: use kHash). A row refused counts nowhere.
  absl::Status Add(const std::vector<absl::string_view>& fields, absl::string_view where);
  // InvalidArgument when no row was added, or a classification label has fewer than 2 classes.
  absl::StatusOr<FeatureStats> Finish();

  static constexpr int64_t kMaxVocabulary = 1 << 20;
  // Bucket boundaries come from a uniform sample of at most this many values per column.
  static constexpr int64_t kQuantileSample = 100000;

  StatsBuilder(StatsBuilder&&) noexcept;
  StatsBuilder& operator=(StatsBuilder&&) noexcept;
  ~StatsBuilder();

 private:
  struct State;
  explicit StatsBuilder(std::unique_ptr<State> state);
  void Sample(size_t column, double x);
  std::unique_ptr<State> state_;
};

// The model's inputs a schema gives: dense floats (per numeric column its value, then its
// missing flag if asked; per indicator column its one-hot block; in the schema's order) and one
// sparse key per other categorical, bucketized and crossed column, its field the index among
// those (columns first, then crosses).
struct FeatureShape {
  int dense_features = 0;
  int categorical_fields = 0;
  int num_classes = 0;  // classification: the label's classes; regression: 0
};

class Transform {
 public:
  // InvalidArgument when the statistics do not fit the schema or the header lacks a column.
  static absl::StatusOr<Transform> Create(Schema schema, FeatureStats stats,
                                          const std::vector<std::string>& header);
  const FeatureShape& shape() const { return shape_; }
  // Appends the row to `out` (whose dense_dim is shape().dense_features). `where` prefixes an
  // error: a bad field count, a non-number in a numeric column, a label of a class the
  // training rows never had or not a number in regression, an identity code out of range.
  absl::Status Append(const std::vector<absl::string_view>& fields, absl::string_view where,
                      Examples* out) const;

 private:
  Transform() = default;
  Schema schema_;
  FeatureStats stats_;
  FeatureShape shape_;
  std::vector<int> field_of_column_;                  // schema column -> header field
  int label_field_ = 0;                               // header field of the label
  size_t width_ = 0;                                  // fields per row
  std::vector<std::vector<int>> cross_columns_;       // per cross, its schema columns
  std::vector<int64_t> indicator_width_;              // per column: one-hot inputs, or 0
  absl::flat_hash_map<std::string, int> class_of_;    // a label's class, by its text ...
  absl::flat_hash_map<double, int> class_of_number_;  // ... or by its number ("1.0" is "1")
  std::vector<absl::flat_hash_map<std::string, uint64_t>> vocabulary_;  // per column: ids
};

// A schema for a table whose columns were not described, and why each column got its kind.
struct InferredSchema {
  Schema schema;
  std::vector<std::string> reasons;  // per column of the table, the label's last
};

// Looks at the rows in one pass: a column whose every value is missing is left out, and so is
// text with a different value in every row (an identifier, such as a name) once there are
// kMinRowsForIdentifiers rows; a column with a value that is not a number is categorical (a
// vocabulary, or hash buckets past kMaxVocabulary / 16 distinct values); integers with at least
// 3 and at most kMaxCodes distinct values are categorical codes; other numbers are standardized
// numeric columns, with a missing flag where some are missing. The label is `label` (the first
// column when empty); its task is regression when its values are numbers and not all integers,
// or integers with more than kMaxCodes distinct values, classification otherwise. Without
// `integer_codes`, integer columns are numeric whatever their count of values (for a model
// that bends a number by itself, such as an MLP, to which a one-hot code loses the order).
class SchemaInferrer {
 public:
  static constexpr int kMaxCodes = 32;
  static constexpr int64_t kMinRowsForIdentifiers = 20;
  static absl::StatusOr<SchemaInferrer> Create(const std::vector<std::string>& header,
                                               absl::string_view label, bool integer_codes = true);
  absl::Status Add(const std::vector<absl::string_view>& fields, absl::string_view where);
  absl::StatusOr<InferredSchema> Finish() const;

  SchemaInferrer(SchemaInferrer&&) noexcept;
  SchemaInferrer& operator=(SchemaInferrer&&) noexcept;
  ~SchemaInferrer();

 private:
  struct State;
  explicit SchemaInferrer(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// ---- A table read through a schema: what the chief and the workers train on. ----
// Record 0 of such a file (its first non-blank line) is the header, the columns' names, and the
// rows follow; a file whose first record is numbers and missing values (at least one number)
// has no header, as `--data csv:` tells one without a schema, and its columns are named c1,
// c2, ... Records are counted and ranged as data.h's TextOptions counts them, so a worker reads
// its range of a large file without splitting the records before it. Errors name the file, line
// and column.

// How a delimited file is laid out: its delimiter and, for a format whose files have no header
// line (Criteo's TSV), its columns' names. A delimiter alone converts to a layout: a CSV file
// as above.
//
// A LibSVM file ("label index:value ...") is a table too, its features as numeric columns: the
// label, then a column per index from 0 or 1 (0 if the file has it) to the highest the file
// has, named f<index>, an index a line lacks being 0, as LibSVM means it. OpenCsvTable finds the
// indices in one pass, at most kMaxLibSvmColumns columns (more is a sparse file: read it without
// a schema, as --data libsvm: does); given names (the training file's, for its test file) it
// keeps them and drops the indices outside them.
constexpr int64_t kMaxLibSvmColumns = 10000;
struct CsvLayout {
  CsvLayout(char d = ',') : delimiter(d) {}  // NOLINT: a delimiter is a layout
  char delimiter;
  std::vector<std::string> names;  // empty: the file's own header, or c1, c2, ...
  bool libsvm = false;
  uint64_t first_index = 1;  // LibSVM: the index of the column after the label
};
// The layout of a data file that goes through a schema: csv (commas), criteo (tabs, no
// header: label, I1 to I13, C1 to C26) or libsvm. InvalidArgument for any other format.
absl::StatusOr<CsvLayout> TableLayout(const DataSpec& spec);
// The layout of a LibSVM table whose columns are known: the label and `features` columns
// f<first_index> onwards (as OpenCsvTable found them for the chief; a worker opens its file with
// them, reading one record instead of the whole file).
CsvLayout LibSvmLayout(uint64_t first_index, int64_t features);

struct CsvHeader {
  std::vector<std::string> names;
  bool in_file = true;  // record 0 is the header, not a row
};
// A CSV file laid out as `layout`, its header read once for every pass over it.
struct CsvTable {
  std::string path;
  CsvLayout layout;
  CsvHeader header;
};
// The table of the file `path` laid out as `layout`. InvalidArgument for an empty file.
absl::StatusOr<CsvTable> OpenCsvTable(const std::string& path, const CsvLayout& layout);
// A schema inferred from the rows of records [0, options.end_record) of `table` (the header
// gives none; SchemaInferrer; a row it refuses stops the pass or is skipped, by
// options.bad_lines).
absl::StatusOr<InferredSchema> InferCsvSchema(const CsvTable& table, absl::string_view label,
                                              TextOptions options, bool integer_codes = true);
// The statistics of `schema` over the rows of records [0, options.end_record) of `table`.
absl::StatusOr<FeatureStats> ComputeCsvStats(const Schema& schema, const CsvTable& table,
                                             TextOptions options);
// The transform of `schema` and `stats` for `table` (its header names the columns).
absl::StatusOr<Transform> CsvTransform(Schema schema, FeatureStats stats, const CsvTable& table);
// The examples of records [options.first_record, options.end_record) of `table` through
// `transform` (the header gives none); rows skipped under kSkip count in bad_lines_skipped, and
// `records` names each row's record.
absl::StatusOr<Examples> ReadCsvThrough(const Transform& transform, const CsvTable& table,
                                        const TextOptions& options);

// Whether a field is a missing value: empty, or NA, N/A, NaN, ?, null (any case), after
// surrounding spaces.
bool IsMissing(absl::string_view field);

}  // namespace pstrain
