// Pushes and pulls too large for one gRPC message (more than kMaxPayloadBytes of tensor bytes)
// travel as chunks of a stream on TensorStreamService (proto/stream.proto), so a tensor has no
// 512 MB ceiling (up to kMaxTensorBytes). The client sends from the caller's bytes and receives
// into the caller's buffers, with no copy of its own; the PS holds one buffer per pushed
// gradient (it applies a push only once all of it arrived) and one copy of each pulled value
// (taken under the variable's lock, sent after it: grpc_stream_server.cc). Used by the gRPC
// DataChannel.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/service_type.h"
#include "transport/transport.h"

namespace pstrain {

// As DataChannel::Push and ::Pull, over `channel` (not owned; it outlives the call) to the PS
// named `peer` in errors ("ps:1 127.0.0.1:2222").
void StreamPush(grpc::Channel* channel, const std::string& peer, const CallOptions& options,
                const PushRequest& head, std::vector<ConstBytes> grads, PushResponse* resp,
                DoneFn done);
void StreamPull(grpc::Channel* channel, const std::string& peer, const CallOptions& options,
                const PullRequest& req, std::vector<MutableBytes> dest, PullResponse* resp,
                DoneFn done);

// The server end over `handler` (not owned; it outlives the service), registered on the PS's
// gRPC server beside ParameterServerService. Null while not built.
std::unique_ptr<grpc::Service> MakeTensorStreamService(DataHandler* handler);

}  // namespace pstrain
