// Readers for real data sets. Public header of src/data.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/examples.h"

namespace pstrain {

// One IDX file (the format of MNIST and Fashion-MNIST): unsigned-byte elements and their dims.
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;  // row-major, size() == product(dims)
};

// Reads an IDX file of unsigned bytes (type code 0x08), raw or gzip-compressed (detected from
// the content, not the name). Errors name the file and the problem: missing file, bad magic,
// unsupported element type, truncated data, trailing bytes.
absl::StatusOr<IdxArray> ReadIdx(const std::string& path);

// Loads the MNIST-layout split `split` ("train" or "t10k") from `dir`: <split>-images-idx3-ubyte
// and <split>-labels-idx1-ubyte, each raw or with a .gz suffix. Checks that the counts agree and
// labels are in [0, 10). NotFound names the files looked for when neither form exists. The
// images become dense rows of floats scaled to [0, 1], the labels their classes. Only examples
// [begin, end) are converted (end -1: to the last).
constexpr int kMnistClasses = 10;
absl::StatusOr<Examples> LoadMnist(const std::string& dir, const std::string& split,
                                   int64_t begin = 0, int64_t end = -1);

// The number of examples of split `split` in `dir`, from its label file alone.
absl::StatusOr<int64_t> CountMnist(const std::string& dir, const std::string& split);

struct TextOptions {
  // A malformed line stops the read with an error "file:line: what" (kStop), or is dropped and
  // counted in Examples::bad_lines_skipped (kSkip). Blank lines are ignored.
  enum class BadLines { kStop, kSkip };
  BadLines bad_lines = BadLines::kStop;
  // Reads only records [first_record, end_record) (end_record -1: to the end of the file). A
  // record is a non-blank line, a CSV header and bad lines among them; the rest are skipped
  // without being parsed, so a worker reads its shard of a large file quickly.
  int64_t first_record = 0;
  int64_t end_record = -1;
};

// The records (non-blank lines) of a plain or gzip-compressed text file, counted without
// parsing them.
absl::StatusOr<int64_t> CountRecords(const std::string& path);

// Calls `fn` with each record of a plain or gzip-compressed text file in [options.first_record,
// options.end_record) as written (its line end and, on line 1, a UTF-8 byte order mark left
// out), its line number and its record number; the line is valid during the call. Under
// BadLines::kSkip a record that `fn` refuses with InvalidArgument is skipped and counted (`fn`
// must then have kept nothing of it); the count is returned. Other errors, or any under kStop,
// stop the read and are returned as `fn` gave them.
using LineRangeFn =
    std::function<absl::Status(absl::string_view line, int64_t line_number, int64_t record)>;
absl::StatusOr<int64_t> ForEachLine(const std::string& path, const TextOptions& options,
                                    const LineRangeFn& fn);

struct CsvOptions {
  int label_column = 0;  // the other columns are the dense features, in order
  // kAuto: the first line is a header if any of its fields is not a number.
  enum class Header { kAuto, kYes, kNo };
  Header header = Header::kAuto;
  char delimiter = ',';
};

// Files may be plain or gzip-compressed. NotFound for a missing file; InvalidArgument
// "file:line: ..." for a bad line (too few or many fields, a bad number, bad hex, indices out of
// order) unless skipped.
// CSV: numeric fields, every line with as many as the first; label from options.label_column.
absl::StatusOr<Examples> ReadCsv(const std::string& path, const CsvOptions& csv,
                                 const TextOptions& options);
// One record of a delimited file split into its fields as written (RFC 4180 quoting: a field
// that starts with a quote runs to the closing one, "" inside it is a quote, and the delimiter
// inside it is text; other fields keep their spaces; spaces around a quoted field are skipped
// unless the delimiter is a space). A quoted field cannot span lines.
// InvalidArgument naming the field for a quote not closed or text after a closing quote.
absl::Status SplitCsvRecord(absl::string_view line, char delimiter,
                            std::vector<std::string>* fields);
// Calls `fn` with the fields of every non-blank record of a plain or gzip-compressed file
// (SplitCsvRecord; a UTF-8 byte order mark before the first is dropped) and its line number;
// the first error, `fn`'s or "path:line: what", stops the read. The fields are valid during the
// call. A quote or a line end as the delimiter is InvalidArgument.
using CsvRecordFn =
    std::function<absl::Status(const std::vector<absl::string_view>& fields, int64_t line)>;
absl::Status ForEachCsvRecord(const std::string& path, char delimiter, const CsvRecordFn& fn);
// The same over records [options.first_record, options.end_record) only (records before the
// first are not split), `fn` told each one's record number too. Under BadLines::kSkip a record
// that cannot be split, or that `fn` refuses with InvalidArgument, is skipped and counted (`fn`
// must then have kept nothing of it); the count is returned. Other errors stop the read.
using CsvRangeFn = std::function<absl::Status(const std::vector<absl::string_view>& fields,
                                              int64_t line, int64_t record)>;
absl::StatusOr<int64_t> ForEachCsvRecord(const std::string& path, char delimiter,
                                         const TextOptions& options, const CsvRangeFn& fn);

// LibSVM: "label index:value index:value ..." with strictly increasing indices; "# ..." ends a
// line. The features are sparse (key = index).
absl::StatusOr<Examples> ReadLibSvm(const std::string& path, const TextOptions& options);
// One LibSVM line split into its label and features as written (spaces or tabs between them):
// `features` gets each "index:value" in order, up to a "# ..." comment. InvalidArgument naming a
// token that is not index:value or an index not above the previous one. The views point into
// `line`; the values' numbers are left to the caller.
struct LibSvmFeature {
  uint64_t index;
  absl::string_view value;
  absl::string_view token;  // "index:value" as written, for a message
};
absl::Status SplitLibSvmLine(absl::string_view line, absl::string_view* label,
                             std::vector<LibSvmFeature>* features);

// Criteo Kaggle TSV: label (0/1), 13 integer features (may be empty), 26 categorical features
// of 8 hex digits (may be empty). Integers become log(1 + x) (missing or negative: 0); every
// categorical field gives one sparse feature, its key CategoricalKey(field, value, missing).
constexpr int kCriteoDense = 13;
constexpr int kCriteoCategorical = 26;
absl::StatusOr<Examples> ReadCriteo(const std::string& path, const TextOptions& options);
// A 64-bit id for value `value` of categorical field `field` (a missing value has an id of its
// own per field); well spread, so ids can be sharded by hash.
uint64_t CategoricalKey(int field, uint32_t value, bool missing);

// A synthetic click log in the Criteo TSV layout drawn from a known logistic model: Zipf-
// distributed categorical values (some missing), heavy-tailed integers, per-value weights and
// pairwise interactions of latent vectors between some fields, about 25% clicks. Deterministic
// for a seed.
struct CriteoGenOptions {
  int64_t rows = 0;
  uint64_t seed = 1;
  double zipf_exponent = 1.1;  // rank r of a field drawn with probability ~ 1 / (r + 1)^s
  double missing_rate = 0.02;  // chance that a field is empty
};
struct CriteoGenResult {
  int64_t rows = 0;
  double click_rate = 0;
  // The ground truth's own probabilities scored against the labels drawn from them: the best
  // AUC (and log loss) any model can reach on this data.
  double ground_truth_auc = 0;
  double ground_truth_log_loss = 0;
};
// Writes the rows to `path`. InvalidArgument for bad options; errors name the file otherwise.
absl::StatusOr<CriteoGenResult> GenerateCriteo(const std::string& path,
                                               const CriteoGenOptions& options);

// ---- The dataset interface: what the trainer and the chief read examples through. ----

// Where a data set is and in which format: "FORMAT:PATH" with FORMAT one of
//   idx (or mnist)  an MNIST-layout directory: the train split for training, t10k held out;
//   csv             label column first, then numeric features (header optional);
//   libsvm          "label index:value ...";
//   criteo          the Criteo Kaggle TSV layout (13 integer and 26 categorical features).
// A bare PATH is an MNIST-layout directory, as before formats existed.
struct DataSpec {
  enum class Format { kIdx, kCsv, kLibSvm, kCriteo };
  Format format = Format::kIdx;
  std::string path;

  // InvalidArgument naming the unknown format or the empty path.
  static absl::StatusOr<DataSpec> Parse(absl::string_view text);
  std::string ToString() const;  // "csv:PATH": Parse(ToString()) gives the same spec
};

// What a model needs to know of the examples, known before any row is read.
struct DataShape {
  int dense_features = 0;      // dense floats per example
  int categorical_fields = 0;  // sparse features carry fields 0 .. categorical_fields-1
  int num_classes = 0;         // labels are classes 0 .. num_classes-1; 0: not known (text)
};

// The shape of `spec`'s examples: from the IDX files of the t10k split (which share the train
// split's shape), a CSV file's first line, or the format alone (LibSVM, Criteo). Errors name
// the file.
absl::StatusOr<DataShape> ShapeOf(const DataSpec& spec);

// The training records of `spec`: the IDX train split's examples or a text file's records
// (TextOptions), counted without parsing.
absl::StatusOr<int64_t> CountTrainingRecords(const DataSpec& spec);

// Examples of training records [begin, end) of `spec`: a worker reads its shard this way. A
// text record that is a header or a bad line skipped under `bad_lines` gives no example (and
// counts in bad_lines_skipped); a bad line under kStop is an error "file:line: what".
absl::StatusOr<Examples> ReadTrainingRecords(const DataSpec& spec, int64_t begin, int64_t end,
                                             TextOptions::BadLines bad_lines);

// A data set split into training records and held-out examples, as the chief plans a job.
class Dataset {
 public:
  struct Options {
    TextOptions::BadLines bad_lines = TextOptions::BadLines::kStop;
    // Held-out examples from this spec (its training records; for idx its t10k split); when
    // unset, the last `holdout` fraction of the training file's records (idx: its t10k split).
    std::optional<DataSpec> test;
    double holdout = 0.1;
  };
  // Counts the records and checks that something is left for training and for evaluation:
  // InvalidArgument otherwise, naming the file and the counts.
  static absl::StatusOr<Dataset> Open(const DataSpec& train, const Options& options);

  const DataSpec& spec() const { return train_; }
  const DataShape& shape() const { return shape_; }
  // Training records are [0, train_records()) of spec().
  int64_t train_records() const { return train_records_; }
  // Records [begin, end) of the training part.
  absl::StatusOr<Examples> ReadTrain(int64_t begin, int64_t end) const;
  // Every held-out example.
  absl::StatusOr<Examples> ReadTest() const;
  // Where the held-out examples are: records [test_begin(), test_end()) of test_spec().
  const DataSpec& test_spec() const { return options_.test ? *options_.test : train_; }
  int64_t test_begin() const { return test_begin_; }
  int64_t test_end() const { return test_end_; }

 private:
  DataSpec train_;
  DataShape shape_;
  Options options_;
  int64_t train_records_ = 0;
  int64_t test_begin_ = 0, test_end_ = 0;  // records of the held-out part in its file
};

}  // namespace pstrain
