// Readers for real data sets. Public header of src/data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "Eigen/Core"
#include "absl/status/statusor.h"
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

// Images as rows of floats scaled to [0, 1], with their labels.
struct Dataset {
  Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> images;  // n x features
  std::vector<int32_t> labels;                                                   // n
  int num_classes = 10;
  int64_t size() const { return static_cast<int64_t>(labels.size()); }
  int64_t features() const { return images.cols(); }
};

// Loads the MNIST-layout split `split` ("train" or "t10k") from `dir`: <split>-images-idx3-ubyte
// and <split>-labels-idx1-ubyte, each raw or with a .gz suffix. Checks that the counts agree and
// labels are in [0, 10). NotFound names the files looked for when neither form exists.
absl::StatusOr<Dataset> LoadMnist(const std::string& dir, const std::string& split);

// The number of examples of split `split` in `dir`, from its label file alone.
absl::StatusOr<int64_t> CountMnist(const std::string& dir, const std::string& split);

struct TextOptions {
  // A malformed line stops the read with an error "file:line: what" (kStop), or is dropped and
  // counted in Examples::bad_lines_skipped (kSkip). Blank lines are ignored.
  enum class BadLines { kStop, kSkip };
  BadLines bad_lines = BadLines::kStop;
  int64_t max_rows = -1;  // read at most this many rows; -1 = all
};

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
// LibSVM: "label index:value index:value ..." with strictly increasing indices; "# ..." ends a
// line. The features are sparse (key = index).
absl::StatusOr<Examples> ReadLibSvm(const std::string& path, const TextOptions& options);

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

}  // namespace pstrain
