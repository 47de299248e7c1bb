#include "common/tensor.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace pstrain {

Tensor::Tensor(std::initializer_list<int64_t> shape, float fill)
    : Tensor(std::vector<int64_t>(shape), fill) {}

Tensor::Tensor(std::vector<int64_t> shape, float fill)
    : shape(std::move(shape)), values(NumElements(this->shape), fill) {}

Tensor Tensor::Scalar(float value) { return Tensor(std::vector<int64_t>{}, value); }

int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::string HumanBytes(int64_t bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024 && unit < 4) {
    v /= 1024;
    ++unit;
  }
  if (unit == 0) return absl::StrCat(bytes, " B");
  return absl::StrFormat("%.1f %s", v, kUnits[unit]);
}

}  // namespace pstrain
