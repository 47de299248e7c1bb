#include "common/tensor_codec.h"

#include <bit>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pstrain {

static_assert(std::endian::native == std::endian::little,
              "tensors travel as little-endian bytes; a big-endian host needs byte swapping");

void EncodeTensor(const std::vector<int64_t>& shape, const float* values, TensorProto* out) {
  out->set_dtype(DT_FLOAT);
  out->mutable_shape()->Assign(shape.begin(), shape.end());
  out->set_data(reinterpret_cast<const char*>(values), NumElements(shape) * sizeof(float));
}

void EncodeTensor(const Tensor& t, TensorProto* out) { EncodeTensor(t.shape, t.data(), out); }

static absl::Status CheckProto(const TensorProto& p, std::vector<int64_t>* shape) {
  if (p.dtype() != DT_FLOAT) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor dtype is ", DataType_Name(p.dtype()), ", only DT_FLOAT is supported"));
  }
  shape->assign(p.shape().begin(), p.shape().end());
  for (int64_t d : *shape) {
    if (d < 0)
      return absl::InvalidArgumentError("tensor shape " + ShapeString(*shape) +
                                        " has a negative dimension");
  }
  const size_t want = static_cast<size_t>(NumElements(*shape)) * sizeof(float);
  if (p.data().size() != want) {
    return absl::InvalidArgumentError(absl::StrCat("tensor of shape ", ShapeString(*shape),
                                                   " needs ", want, " bytes of data, got ",
                                                   p.data().size()));
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> DecodeTensor(const TensorProto& p) {
  Tensor t;
  if (absl::Status s = CheckProto(p, &t.shape); !s.ok()) return s;
  t.values.resize(NumElements(t.shape));
  if (!t.values.empty()) std::memcpy(t.values.data(), p.data().data(), p.data().size());
  return t;
}

absl::StatusOr<const float*> TensorData(const TensorProto& p, const std::vector<int64_t>& want,
                                        const std::string& what) {
  std::vector<int64_t> shape;
  if (absl::Status s = CheckProto(p, &shape); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", s.message()));
  }
  if (shape != want) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": shape ", ShapeString(shape), " does not match ", ShapeString(want)));
  }
  return reinterpret_cast<const float*>(p.data().data());
}

}  // namespace pstrain
