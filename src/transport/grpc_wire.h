// The PS's end of the zero-copy gRPC data path: a PushRequest read from the call's bytes with
// each gradient's data left where it arrived, and a PullResponse written as slices over pooled
// copies of the values. Both speak the unchanged wire format of proto/ps.proto, so any gRPC
// client (another language's, an older pstrain) talks to it as to a protobuf-parsing server.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "ps.pb.h"
#include "transport/buffer_pool.h"
#include "transport/transport.h"

namespace pstrain {

// A push as ReadPushRequest reads it: `head` is the request protobuf would parse, except that
// every gradient's TensorProto has no data; gradient i's bytes are data[i]. They point into the
// received slices where a tensor lies in one slice at a 4-byte aligned address, and into a
// pooled copy otherwise; the PushPayload keeps both alive, so it must outlive every use of them.
struct PushPayload {
  PushRequest head;
  std::vector<ConstBytes> data;

  grpc::ByteBuffer raw;                             // shares the call's slices
  std::unique_ptr<grpc::ProtoBufferReader> reader;  // owns them if gRPC had to inflate them
  std::vector<BufferPool::Buffer> copies;
};

// Reads `raw` into `out` (which must be fresh). InvalidArgument naming `method` for bytes that
// protobuf would not parse as a PushRequest (truncated, a length past the end of what holds it,
// a bad tag or wire type), or with more than kMaxVariablesPerRequest gradients; nothing is
// allocated by a length before it is checked against the bytes that are there.
absl::Status ReadPushRequest(const grpc::ByteBuffer& raw, absl::string_view method,
                             BufferPool* pool, PushPayload* out);

// Writes `resp`, whose values carry no data, with data[i] as value i's data, into `out`: the
// bytes protobuf would serialise for `resp` with that data set, the data as slices over the
// buffers, which return to their pool when gRPC drops them. ResourceExhausted naming `method`
// past kMaxMessageBytes; InvalidArgument if a value already has data or data.size() differs
// from the number of values.
absl::Status WritePullResponse(const PullResponse& resp, std::vector<BufferPool::Buffer> data,
                               absl::string_view method, grpc::ByteBuffer* out);

}  // namespace pstrain
