#include "common/tensor_codec.h"

#include <bit>
#include <cstring>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/limits.h"

namespace pstrain {

static_assert(std::endian::native == std::endian::little,
              "tensors travel as little-endian bytes; a big-endian host needs byte swapping");

void EncodeTensor(const std::vector<int64_t>& shape, const float* values, TensorProto* out) {
  out->set_dtype(DT_FLOAT);
  out->mutable_shape()->Assign(shape.begin(), shape.end());
  out->set_data(reinterpret_cast<const char*>(values), NumElements(shape) * sizeof(float));
}

void EncodeTensor(const Tensor& t, TensorProto* out) { EncodeTensor(t.shape, t.data(), out); }

absl::StatusOr<int64_t> TensorBytes(const std::vector<int64_t>& shape) {
  auto bad = [](auto... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  if (shape.size() > static_cast<size_t>(kMaxTensorRank)) {
    return bad("tensor shape has rank ", shape.size(), ", over the limit of ", kMaxTensorRank);
  }
  for (int64_t d : shape) {
    if (d < 0) return bad("tensor shape ", ShapeString(shape), " has a negative dimension");
  }
  const std::optional<int64_t> elements = CheckedNumElements(shape);
  if (!elements) {
    return bad("tensor shape ", ShapeString(shape), " overflows: its element count exceeds 2^63");
  }
  const std::optional<int64_t> bytes = CheckedMul(*elements, sizeof(float));
  if (!bytes) {
    return bad("tensor shape ", ShapeString(shape), " overflows: its ", *elements,
               " elements need more than 2^63 bytes");
  }
  if (*bytes > kMaxTensorBytes) {
    return bad("tensor of shape ", ShapeString(shape), " needs ", *bytes,
               " bytes, over the limit of ", kMaxTensorBytes, " bytes per tensor");
  }
  return *bytes;
}

// Checks dtype (DT_FLOAT, or also the 16-bit ones with `sixteen_bit`), rank, shape and that
// `data_bytes` is what they need.
static absl::Status CheckProto(const TensorProto& p, std::vector<int64_t>* shape,
                               int64_t data_bytes, bool sixteen_bit = false) {
  const bool known = DataType_IsValid(p.dtype()) && !DataType_Name(p.dtype()).empty();
  const char* supported = sixteen_bit ? "DT_FLOAT, DT_HALF or DT_BFLOAT16" : "DT_FLOAT";
  const bool ok =
      p.dtype() == DT_FLOAT || (sixteen_bit && (p.dtype() == DT_HALF || p.dtype() == DT_BFLOAT16));
  if (!ok) {
    if (!known) {
      return absl::InvalidArgumentError(absl::StrCat("tensor dtype ", static_cast<int>(p.dtype()),
                                                     " is not a known DataType; only ", supported,
                                                     " is supported"));
    }
    return absl::InvalidArgumentError(absl::StrCat("tensor dtype is ", DataType_Name(p.dtype()),
                                                   "; only ", supported, " is supported"));
  }
  if (p.shape_size() > kMaxTensorRank) {
    return absl::InvalidArgumentError(absl::StrCat("tensor shape has rank ", p.shape_size(),
                                                   ", over the limit of ", kMaxTensorRank));
  }
  shape->assign(p.shape().begin(), p.shape().end());
  // The float32 bytes bound the size for every dtype: 16-bit values are widened to them.
  absl::StatusOr<int64_t> floats = TensorBytes(*shape);
  if (!floats.ok()) return floats.status();
  const int64_t want = p.dtype() == DT_FLOAT ? *floats : *floats / 2;
  if (data_bytes != want) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor of shape ", ShapeString(*shape), " needs ", want, " bytes of ",
                     DataType_Name(p.dtype()), " data, got ", data_bytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> DecodeTensor(const TensorProto& p) {
  Tensor t;
  if (absl::Status s = CheckProto(p, &t.shape, p.data().size()); !s.ok()) return s;
  t.values.resize(p.data().size() / sizeof(float));
  if (!t.values.empty()) std::memcpy(t.values.data(), p.data().data(), p.data().size());
  return t;
}

absl::StatusOr<GradientBytes> GradientData(const TensorProto& p, const void* data, int64_t size,
                                           const std::vector<int64_t>& want,
                                           const std::string& what) {
  if (data != p.data().data() && !p.data().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": its data is both in the message and out of line"));
  }
  std::vector<int64_t> shape;
  if (absl::Status s = CheckProto(p, &shape, size, /*sixteen_bit=*/true); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", s.message()));
  }
  if (shape != want) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": shape ", ShapeString(shape), " does not match ", ShapeString(want)));
  }
  return GradientBytes{p.dtype(), data, NumElements(shape)};
}

absl::StatusOr<const float*> TensorData(const TensorProto& p, const void* data, int64_t size,
                                        const std::vector<int64_t>& want, const std::string& what) {
  if (p.dtype() != DT_FLOAT) {
    std::vector<int64_t> shape;
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", CheckProto(p, &shape, size).message()));
  }
  absl::StatusOr<GradientBytes> g = GradientData(p, data, size, want, what);
  if (!g.ok()) return g.status();
  return static_cast<const float*>(g->data);
}

absl::StatusOr<const float*> TensorData(const TensorProto& p, const std::vector<int64_t>& want,
                                        const std::string& what) {
  return TensorData(p, p.data().data(), static_cast<int64_t>(p.data().size()), want, what);
}

}  // namespace pstrain
