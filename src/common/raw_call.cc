#include "common/raw_call.h"

#include "absl/strings/str_cat.h"
#include "common/limits.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "grpcpp/support/proto_buffer_writer.h"

namespace pstrain {

absl::Status ParseRequest(const grpc::ByteBuffer& raw, absl::string_view method,
                          google::protobuf::Message* msg) {
  grpc::ByteBuffer copy(raw);  // shares the slices; the reader consumes its buffer
  const size_t bytes = copy.Length();
  grpc::ProtoBufferReader reader(&copy);
  if (!reader.status().ok() || !msg->ParseFromZeroCopyStream(&reader)) {
    return absl::InvalidArgumentError(absl::StrCat(method, " request of ", bytes,
                                                   " bytes is not a valid ",
                                                   msg->GetDescriptor()->full_name()));
  }
  return absl::OkStatus();
}

absl::Status SerializeResponse(const google::protobuf::Message& msg, absl::string_view method,
                               grpc::ByteBuffer* raw) {
  const size_t bytes = msg.ByteSizeLong();
  if (bytes > static_cast<size_t>(kMaxMessageBytes)) {
    return absl::ResourceExhaustedError(absl::StrCat(method, " response of ", bytes,
                                                     " bytes is over the limit of ",
                                                     kMaxMessageBytes, " bytes per message"));
  }
  grpc::ProtoBufferWriter writer(raw, grpc::kProtoBufferWriterMaxBufferLength,
                                 static_cast<int>(bytes));
  if (!msg.SerializeToZeroCopyStream(&writer)) {
    return absl::InternalError(absl::StrCat(method, " response could not be serialised"));
  }
  return absl::OkStatus();
}

}  // namespace pstrain
