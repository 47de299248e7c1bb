// Dense float32 tensors. A Tensor owns its values in row-major order. Their wire form is in
// common/tensor_codec.h (internal); this header is part of the installed client API.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace pstrain {

struct Tensor {
  std::vector<int64_t> shape;  // [] is a scalar (one value)
  std::vector<float> values;   // row-major; size() == NumElements(shape)

  // No shape and no values: a placeholder to assign to, not a scalar.
  Tensor() = default;
  // A tensor of `shape`, every value `fill`. Tensor({3, 2}), Tensor({}) (a scalar) and
  // Tensor(shape_vector, 1.0f) all name the shape; dims must be >= 0.
  explicit Tensor(std::initializer_list<int64_t> shape, float fill = 0.0f);
  explicit Tensor(std::vector<int64_t> shape, float fill = 0.0f);
  // A scalar (shape []) holding `value`.
  static Tensor Scalar(float value);

  int64_t size() const { return static_cast<int64_t>(values.size()); }
  float* data() { return values.data(); }
  const float* data() const { return values.data(); }
};

// A read-only view of `shape`'s row-major floats held elsewhere (a caller's buffer, a numpy
// array), for pushing a gradient without copying it into a Tensor first.
struct TensorView {
  std::vector<int64_t> shape;
  const float* data = nullptr;  // NumElements(shape) floats
};

// Product of the dimensions; 1 for a scalar (empty shape). The caller checks that it does not
// overflow (common/limits.h's CheckedNumElements does).
int64_t NumElements(const std::vector<int64_t>& shape);
// "[784, 256]"
std::string ShapeString(const std::vector<int64_t>& shape);
// "512 B", "1.5 KiB", "3.0 GiB".
std::string HumanBytes(int64_t bytes);

}  // namespace pstrain
