// The PS's end of the zero-copy gRPC data path: a PushRequest read from the call's bytes with
// each gradient's data left where it arrived, and a PullResponse written as slices over the
// variables' own values (lent by the PS, DataHandler::PullSink). Both speak the unchanged wire
// format of proto/ps.proto, so any gRPC client (another language's, an older pstrain) talks to it
// as to a protobuf-parsing server.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "ps.pb.h"
#include "transport/buffer_pool.h"
#include "transport/transport.h"

namespace pstrain {

// A push as ReadPushRequest reads it: `head` is the request protobuf would parse, except that
// every gradient's TensorProto has no data; gradient i's bytes are pieces[i], in order. A tensor
// that lies in one slice at a 4-byte aligned address is one piece there; a smaller one
// (under kCopyBelowBytes) is one piece in a pooled copy; a larger one is left where it arrived,
// one piece per received slice it spans (at any alignment), so a large push is never staged in
// a copy of its size. data[i] is gradient i's one piece, or empty when it has several. The
// PushPayload keeps the slices and copies alive, so it must outlive every use of them.
struct PushPayload {
  static constexpr int64_t kCopyBelowBytes = 64 << 10;

  PushRequest head;
  std::vector<ConstBytes> data;
  std::vector<absl::Span<const ConstBytes>> pieces;

  grpc::ByteBuffer raw;                             // shares the call's slices
  std::unique_ptr<grpc::ProtoBufferReader> reader;  // owns them if gRPC had to inflate them
  std::vector<BufferPool::Buffer> copies;
  std::vector<ConstBytes> piece_store;  // what pieces point into
  struct Range {
    size_t begin = 0, count = 0;
  };
  std::vector<Range> ranges;  // per gradient, in piece_store; count 0: its one piece is data[i]
};

// Reads `raw` into `out` (which must be fresh). InvalidArgument naming `method` for bytes that
// protobuf would not parse as a PushRequest (truncated, a length past the end of what holds it,
// a bad tag or wire type), or with more than kMaxVariablesPerRequest gradients; nothing is
// allocated by a length before it is checked against the bytes that are there.
absl::Status ReadPushRequest(const grpc::ByteBuffer& raw, absl::string_view method,
                             BufferPool* pool, PushPayload* out);

// Bytes lent by their owner: valid and unchanged while `keep` lives.
struct LentBytes {
  ConstBytes bytes;
  std::shared_ptr<const void> keep;
};

// Writes `resp`, whose values carry no data, with data[i] as value i's data, into `out`: the
// bytes protobuf would serialise for `resp` with that data set, the data as slices over the lent
// bytes (not copied), each holding its `keep` until gRPC drops the slice. ResourceExhausted
// naming `method` past kMaxMessageBytes; InvalidArgument if a value already has data or
// data.size() differs from the number of values.
absl::Status WritePullResponse(const PullResponse& resp, std::vector<LentBytes> data,
                               absl::string_view method, grpc::ByteBuffer* out);

}  // namespace pstrain
