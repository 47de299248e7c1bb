// Readers for real data sets. Public header of src/data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "Eigen/Core"
#include "absl/status/statusor.h"

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

}  // namespace pstrain
