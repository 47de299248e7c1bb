// MNIST-layout data sets (MNIST, Fashion-MNIST): an idx3 image file and an idx1 label file.
#include <algorithm>
#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "data/data.h"

namespace pstrain {
namespace {

// The raw file if it exists, else the .gz one; NotFound naming both otherwise.
absl::StatusOr<std::string> FindFile(const std::string& dir, const std::string& name,
                                     const std::string& what) {
  const std::string raw = (std::filesystem::path(dir) / name).string();
  const std::string gz = raw + ".gz";
  std::error_code ec;
  if (std::filesystem::exists(raw, ec)) return raw;
  if (std::filesystem::exists(gz, ec)) return gz;
  return absl::NotFoundError(
      absl::StrCat("no ", what, " in ", dir, ": looked for ", raw, " and ", gz));
}

std::string DimsString(const std::vector<int64_t>& dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

}  // namespace

absl::StatusOr<Examples> LoadMnist(const std::string& dir, const std::string& split, int64_t begin,
                                   int64_t end) {
  absl::StatusOr<std::string> images_path =
      FindFile(dir, split + "-images-idx3-ubyte", split + " images");
  if (!images_path.ok()) return images_path.status();
  absl::StatusOr<std::string> labels_path =
      FindFile(dir, split + "-labels-idx1-ubyte", split + " labels");
  if (!labels_path.ok()) return labels_path.status();

  absl::StatusOr<IdxArray> images = ReadIdx(*images_path);
  if (!images.ok()) return images.status();
  if (images->dims.size() != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat(*images_path, ": images must have 3 dimensions (count, rows, cols), got ",
                     DimsString(images->dims)));
  }
  absl::StatusOr<IdxArray> labels = ReadIdx(*labels_path);
  if (!labels.ok()) return labels.status();
  if (labels->dims.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        *labels_path, ": labels must have 1 dimension, got ", DimsString(labels->dims)));
  }
  const int64_t n = images->dims[0];
  if (labels->dims[0] != n) {
    return absl::InvalidArgumentError(absl::StrCat("count mismatch: ", *images_path, " has ", n,
                                                   " images but ", *labels_path, " has ",
                                                   labels->dims[0], " labels"));
  }
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t label = labels->data[static_cast<size_t>(i)];
    if (label >= kMnistClasses) {
      return absl::InvalidArgumentError(absl::StrCat(*labels_path, ": label ", int{label},
                                                     " at index ", i, " is out of range [0, ",
                                                     kMnistClasses, ")"));
    }
  }
  if (end < 0 || end > n) end = n;
  begin = std::clamp<int64_t>(begin, 0, end);

  Examples out;
  const int64_t features = images->dims[1] * images->dims[2];
  out.dense_dim = static_cast<int>(features);
  out.dense.resize(static_cast<size_t>((end - begin) * features));
  const uint8_t* pixels = images->data.data() + begin * features;
  for (size_t i = 0; i < out.dense.size(); ++i) out.dense[i] = pixels[i] * (1.0f / 255.0f);
  out.labels.assign(labels->data.begin() + begin, labels->data.begin() + end);
  out.sparse_offsets.assign(static_cast<size_t>(end - begin) + 1, 0);
  return out;
}

absl::StatusOr<int64_t> CountMnist(const std::string& dir, const std::string& split) {
  absl::StatusOr<std::string> path = FindFile(dir, split + "-labels-idx1-ubyte", split + " labels");
  if (!path.ok()) return path.status();
  absl::StatusOr<IdxArray> labels = ReadIdx(*path);
  if (!labels.ok()) return labels.status();
  if (labels->dims.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(*path, ": labels must have 1 dimension, got ", DimsString(labels->dims)));
  }
  return labels->dims[0];
}

}  // namespace pstrain
