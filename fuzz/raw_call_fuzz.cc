// The raw calls every service serves (common/raw_call.h): a request's bytes, as gRPC hands them
// over in slices, parsed with ParseRequest into the request (or response) type of any method
// of the four services, against protobuf's parse of the same bytes in one piece; what parses is
// written back with SerializeResponse and must parse to the same message.
//   input: one byte choosing how the bytes are cut into slices (fuzz_util.h ToByteBuffer), one
//          choosing the message type (the methods' inputs, then their outputs, in the order of
//          the services in proto/), then the message's bytes
#include <memory>
#include <string>
#include <vector>

#include "common/raw_call.h"
#include "fuzz_util.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/stubs/logging.h"
#include "master.pb.h"
#include "ps.pb.h"
#include "stream.pb.h"
#include "worker.pb.h"

namespace {

// Every type a raw call parses: the methods' inputs, then their outputs.
const std::vector<const google::protobuf::Message*>& Types() {
  static const std::vector<const google::protobuf::Message*> types = [] {
    std::vector<const google::protobuf::Message*> in, out;
    // The generated pool knows the files linked in (referenced below through their types).
    const auto* pool = google::protobuf::DescriptorPool::generated_pool();
    for (const google::protobuf::Descriptor* linked :
         {pstrain::PushRequest::descriptor(), pstrain::RegisterRequest::descriptor(),
          pstrain::StartTrainingRequest::descriptor(), pstrain::PushChunk::descriptor()}) {
      FUZZ_CHECK(linked != nullptr, "proto types linked");
    }
    for (const char* name : {"pstrain.ParameterServerService", "pstrain.MasterService",
                             "pstrain.WorkerService", "pstrain.TensorStreamService"}) {
      const google::protobuf::ServiceDescriptor* s = pool->FindServiceByName(name);
      FUZZ_CHECK(s != nullptr, name);
      for (int m = 0; m < s->method_count(); ++m) {
        auto* factory = google::protobuf::MessageFactory::generated_factory();
        in.push_back(factory->GetPrototype(s->method(m)->input_type()));
        out.push_back(factory->GetPrototype(s->method(m)->output_type()));
      }
    }
    in.insert(in.end(), out.begin(), out.end());
    return in;
  }();
  return types;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);  // protobuf logs every string that is not UTF-8
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstrain;
  if (size < 2) return 0;
  const google::protobuf::Message* type = Types()[data[1] % Types().size()];
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 2, size - 2);
  std::unique_ptr<google::protobuf::Message> msg(type->New());
  const absl::Status s = ParseRequest(fuzz::ToByteBuffer(bytes, data[0]), "Method", msg.get());
  std::unique_ptr<google::protobuf::Message> reference(type->New());
  const bool parses = reference->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
  FUZZ_CHECK(s.ok() == parses, "ParseRequest and protobuf disagree: " + s.ToString());
  if (!s.ok()) {
    FUZZ_CHECK(s.code() == absl::StatusCode::kInvalidArgument, s.ToString());
    return 0;
  }
  FUZZ_CHECK(msg->SerializeAsString() == reference->SerializeAsString(),
             "a message cut into slices parses to another");
  grpc::ByteBuffer written;
  FUZZ_CHECK(SerializeResponse(*msg, "Method", &written).ok(), "SerializeResponse");
  std::unique_ptr<google::protobuf::Message> again(type->New());
  FUZZ_CHECK(ParseRequest(written, "Method", again.get()).ok() &&
                 again->SerializeAsString() == msg->SerializeAsString(),
             "a written message parses to another");
  return 0;
}
