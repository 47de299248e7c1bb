// Dense float32 tensors and their wire form (proto/tensor.proto).
//
// A Tensor owns its values in row-major order. Encoding copies the values into a TensorProto as
// raw little-endian bytes; decoding checks dtype, shape and byte count and says what is wrong.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tensor.pb.h"

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

// Fills `out` from `t`. Thread-compatible.
void EncodeTensor(const Tensor& t, TensorProto* out);
// Same, from a raw pointer, so callers that hold values elsewhere avoid a copy into a Tensor.
void EncodeTensor(const std::vector<int64_t>& shape, const float* values, TensorProto* out);
// Checks dtype, non-negative dims and data size; InvalidArgument naming the problem otherwise.
absl::StatusOr<Tensor> DecodeTensor(const TensorProto& p);
// Checks `p` as DecodeTensor does and that its shape equals `want`; returns a view of its floats.
// The pointer is valid while `p` is; `what` names the tensor in error messages.
absl::StatusOr<const float*> TensorData(const TensorProto& p, const std::vector<int64_t>& want,
                                        const std::string& what);

}  // namespace pstrain
