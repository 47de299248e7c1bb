// Dense float32 tensors. A Tensor owns its values in row-major order. Their wire form is in
// common/tensor_codec.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>


namespace pstrain {

struct Tensor {
  std::vector<int64_t> shape;
  std::vector<float> values;  // row-major; size() == NumElements(shape)

  Tensor() = default;
  explicit Tensor(std::vector<int64_t> s, float fill = 0.0f);
  int64_t size() const { return static_cast<int64_t>(values.size()); }
  float* data() { return values.data(); }
  const float* data() const { return values.data(); }
};

// Product of the dimensions; 1 for a scalar (empty shape).
int64_t NumElements(const std::vector<int64_t>& shape);
// "[784, 256]"
std::string ShapeString(const std::vector<int64_t>& shape);

}  // namespace pstrain
