// The "grpc" data channel: Pull and Push on ParameterServerService's unchanged wire format
// (proto/ps.proto), so any PS serves them, with the tensors' bytes kept out of protobuf. A push
// is a grpc::ByteBuffer whose gradient data are slices over the caller's own memory (nothing is
// copied into a message); a pull's values are copied once, from gRPC's received slices straight
// into the caller's buffers. Requests with more than kMaxPayloadBytes of tensor bytes travel as
// chunked streams (grpc_stream.h).
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "grpcpp/support/byte_buffer.h"
#include "transport/transport.h"

namespace pstrain {

// A DataChannel to the PS whose gRPC server is at `address` (host:port), over MakeChannel
// (common/rpc.h: TLS and the job token). Errors name the call and `address`
// ("Pull at 127.0.0.1:2222: ...").
std::unique_ptr<DataChannel> MakeGrpcDataChannel(const std::string& address);

// Sets `out` to the wire form of the PushRequest that is `head` with gradient i's data being
// grads[i]: byte for byte what protobuf serialises for that request. The slice of each non-empty
// grads[i] refers to its bytes, not a copy: unref(user) runs once for each such slice when the
// last reference to it (in `out`, or in gRPC once `out` is sent) is dropped, and the bytes must
// stay valid until then. InvalidArgument, with no slice made, unless grads holds one entry per
// gradient, each with no data in `head` and a non-negative size.
absl::Status EncodePushRequest(const PushRequest& head, absl::Span<const ConstBytes> grads,
                               void (*unref)(void*), void* user, grpc::ByteBuffer* out);

// Decodes the wire form of a PullResponse in `raw`: each value's name, version, dtype and shape
// into `resp` (whose values then carry no data) and its data into dest[i], copied once from the
// buffer's slices. InvalidArgument naming the value when the response holds another number of
// values than dest, a value whose data or shape needs a size other than dest[i].size, or a dtype
// other than DT_FLOAT; DataLoss for bytes that do not parse (a truncated response). Nothing is
// written outside the dest buffers; on error their contents are unspecified.
absl::Status DecodePullResponse(grpc::ByteBuffer* raw, absl::Span<const MutableBytes> dest,
                                PullResponse* resp);

}  // namespace pstrain
