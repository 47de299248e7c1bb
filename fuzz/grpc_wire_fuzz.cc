// The PS's zero-copy reader of a unary push (transport/grpc_wire.h ReadPushRequest) against
// protobuf's own parse of the same bytes: whatever protobuf parses (within the gradient limit) the
// reader reads to the same request, with every gradient's bytes where its pieces say; whatever
// it accepts protobuf parses too.
//   input: one byte choosing how the bytes are cut into slices (fuzz_util.h ToByteBuffer), then
//          the bytes of the request
#include <cstring>
#include <string>

#include "common/limits.h"
#include "fuzz_util.h"
#include "protobuf_quiet.h"
#include "transport/grpc_wire.h"

namespace pstrain {
namespace {

// The request with each gradient's data put back from its pieces.
PushRequest Inlined(const PushPayload& p) {
  PushRequest req = p.head;
  for (int i = 0; i < req.gradients_size(); ++i) {
    if (!req.gradients(i).has_gradient()) continue;  // mutable_gradient() would add one
    TensorProto* t = req.mutable_gradients(i)->mutable_gradient();
    FUZZ_CHECK(t->data().empty(), "gradient data left in the head");
    std::string data;
    for (const ConstBytes& b : p.pieces[i]) {
      FUZZ_CHECK(b.size > 0 || p.pieces[i].size() == 1, "an empty piece among several");
      data.append(static_cast<const char*>(b.data), static_cast<size_t>(b.size));
    }
    if (!data.empty()) t->set_data(data);
  }
  return req;
}

}  // namespace
}  // namespace pstrain

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstrain;
  if (size == 0) return 0;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  PushPayload payload;
  const absl::Status s =
      ReadPushRequest(fuzz::ToByteBuffer(bytes, data[0]), "Push", &BufferPool::Shared(), &payload);
  PushRequest reference;
  const bool parses = reference.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
  if (!s.ok()) {
    FUZZ_CHECK(!parses || reference.gradients_size() > kMaxVariablesPerRequest,
               "refused what protobuf parses: " + std::string(s.message()));
    FUZZ_CHECK(s.code() == absl::StatusCode::kInvalidArgument, s.ToString());
    return 0;
  }
  FUZZ_CHECK(parses, "accepted what protobuf refuses");
  const int n = payload.head.gradients_size();
  FUZZ_CHECK(payload.data.size() == static_cast<size_t>(n) &&
                 payload.pieces.size() == static_cast<size_t>(n),
             "one data and one list of pieces per gradient");
  FUZZ_CHECK(Inlined(payload).SerializeAsString() == reference.SerializeAsString(),
             "the request read differs from protobuf's parse");
  return 0;
}
