// The tensor checks every carrier runs on what a peer sent (common/tensor_codec.h): a
// TensorProto as protobuf parses it from a request, decoded (DecodeTensor, TensorData) and, as a
// pushed gradient, with its bytes in the message or out of line (GradientData). What is accepted
// must be consistent: as many values as the shape says, the bytes unchanged, and an encoded copy
// decodes to the same tensor.
//   input: one byte of options (bit 0: the data travel out of line, as the data plane sends
//          them; bit 1: check against the shape the message claims or one dimension more), then
//          the TensorProto's bytes; out of line, the bytes after the proto's own are the data,
//          the proto's length a varint before it
#include <cstring>
#include <string>
#include <vector>

#include "common/limits.h"
#include "common/tensor_codec.h"
#include "fuzz_util.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/stubs/logging.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstrain;
  if (size == 0) return 0;
  const uint8_t options = data[0];
  const bool out_of_line = options & 1;
  google::protobuf::io::CodedInputStream in(data + 1, static_cast<int>(size - 1));
  TensorProto p;
  std::string extra;
  if (out_of_line) {
    uint32_t len = 0;
    std::string proto;
    if (!in.ReadVarint32(&len) || !in.ReadString(&proto, static_cast<int>(len))) return 0;
    if (!p.ParseFromString(proto)) return 0;
    const void* rest = nullptr;
    int avail = 0;
    if (in.GetDirectBufferPointer(&rest, &avail))
      extra.assign(static_cast<const char*>(rest), avail);
  } else if (!p.ParseFromArray(data + 1, static_cast<int>(size - 1))) {
    return 0;
  }

  // DecodeTensor: the values are the bytes, as many as the shape says.
  absl::StatusOr<Tensor> t = DecodeTensor(p);
  if (t.ok()) {
    FUZZ_CHECK(p.dtype() == DT_FLOAT, "decoded a dtype other than DT_FLOAT");
    FUZZ_CHECK(t->values.size() == static_cast<size_t>(NumElements(t->shape)), "value count");
    FUZZ_CHECK(t->values.size() * sizeof(float) == p.data().size(), "byte count");
    FUZZ_CHECK(
        p.data().empty() || std::memcmp(t->values.data(), p.data().data(), p.data().size()) == 0,
        "values");
    absl::StatusOr<int64_t> bytes = TensorBytes(t->shape);
    FUZZ_CHECK(bytes.ok() && *bytes == static_cast<int64_t>(p.data().size()), "TensorBytes");
    TensorProto again;
    EncodeTensor(*t, &again);
    absl::StatusOr<Tensor> t2 = DecodeTensor(again);
    // Bytes, not floats: a NaN is not equal to itself.
    FUZZ_CHECK(t2.ok() && t2->shape == t->shape && t2->values.size() == t->values.size() &&
                   (t->values.empty() || std::memcmp(t2->values.data(), t->values.data(),
                                                     t->values.size() * sizeof(float)) == 0),
               "an encoded copy decodes to another tensor");
  } else {
    FUZZ_CHECK(t.status().code() == absl::StatusCode::kInvalidArgument, t.status().ToString());
  }

  // TensorData and GradientData against the claimed shape (or one that differs from it).
  std::vector<int64_t> want(p.shape().begin(), p.shape().end());
  if (options & 2) want.push_back(1);
  const void* bytes = out_of_line ? static_cast<const void*>(extra.data()) : p.data().data();
  const int64_t n =
      out_of_line ? static_cast<int64_t>(extra.size()) : static_cast<int64_t>(p.data().size());
  absl::StatusOr<GradientBytes> g = GradientData(p, bytes, n, want, "gradient");
  if (g.ok()) {
    const int64_t width = g->dtype == DT_FLOAT ? 4 : 2;
    FUZZ_CHECK(g->elements == NumElements(want) && g->elements * width == n, "gradient byte count");
    FUZZ_CHECK(g->data == bytes, "gradient data moved");
    FUZZ_CHECK(out_of_line || t.ok() || g->dtype != DT_FLOAT, "GradientData and DecodeTensor");
  }
  absl::StatusOr<const float*> f = TensorData(p, bytes, n, want, "value");
  FUZZ_CHECK(!f.ok() || (g.ok() && g->dtype == DT_FLOAT), "TensorData and GradientData");
  return 0;
}
