// The wire form of tensors (proto/tensor.proto): raw little-endian bytes plus shape and dtype.
//
// Encoding copies the values into a TensorProto; decoding checks dtype, shape and byte count
// against common/limits.h and says what is wrong.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tensor.h"
#include "tensor.pb.h"

namespace pstrain {

// Fills `out` from `t`. Thread-compatible.
void EncodeTensor(const Tensor& t, TensorProto* out);
// Same, from a raw pointer, so callers that hold values elsewhere avoid a copy into a Tensor.
void EncodeTensor(const std::vector<int64_t>& shape, const float* values, TensorProto* out);
// Bytes of a float tensor of `shape`, checked against common/limits.h: InvalidArgument for a rank
// over kMaxTensorRank, a negative dimension, an element or byte count that overflows int64, or
// more than kMaxTensorBytes.
absl::StatusOr<int64_t> TensorBytes(const std::vector<int64_t>& shape);
// Checks dtype, shape (as TensorBytes does) and data size; InvalidArgument naming the problem
// otherwise. Never throws.
absl::StatusOr<Tensor> DecodeTensor(const TensorProto& p);
// Checks `p` as DecodeTensor does and that its shape equals `want`; returns a view of its floats.
// The pointer is valid while `p` is; `what` names the tensor in error messages.
absl::StatusOr<const float*> TensorData(const TensorProto& p, const std::vector<int64_t>& want,
                                        const std::string& what);
// The same for a tensor whose `size` bytes at `data` travelled outside the message (the data
// plane): `p` carries dtype and shape and no data (InvalidArgument if it has data too).
absl::StatusOr<const float*> TensorData(const TensorProto& p, const void* data, int64_t size,
                                        const std::vector<int64_t>& want, const std::string& what);

// A pushed gradient's bytes, checked: DT_FLOAT, or 16-bit values (DT_HALF, DT_BFLOAT16) that the
// PS widens to float32 (common/half.h) before it checks and applies them.
struct GradientBytes {
  DataType dtype = DT_FLOAT;
  const void* data = nullptr;
  int64_t elements = 0;
};
// TensorData for a gradient of any of those dtypes: `size` must be elements times the dtype's
// bytes, and the float32 tensor it widens to must be within kMaxTensorBytes. `data` is p's
// own data, or bytes that travelled out of line (then p must have none). Messages name the dtype.
absl::StatusOr<GradientBytes> GradientData(const TensorProto& p, const void* data, int64_t size,
                                           const std::vector<int64_t>& want,
                                           const std::string& what);

}  // namespace pstrain
