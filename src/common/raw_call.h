// Unary gRPC calls served on raw bytes: the server parses each request itself, so a request that
// does not parse gets INVALID_ARGUMENT naming the method and message type (gRPC's own parsing
// answers UNIMPLEMENTED with an empty message), and serialises each response itself after
// checking its size (a response too large to encode would abort the process inside gRPC).
// Every service of pstrain (ParameterServerService, MasterService, WorkerService) uses it.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/rpc.h"
#include "google/protobuf/message.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/byte_buffer.h"

namespace pstrain {

// Parses `raw` into `msg`; InvalidArgument naming the method otherwise.
absl::Status ParseRequest(const grpc::ByteBuffer& raw, absl::string_view method,
                          google::protobuf::Message* msg);
// Serialises `msg` into `raw`, or ResourceExhausted if it would pass kMaxMessageBytes.
absl::Status SerializeResponse(const google::protobuf::Message& msg, absl::string_view method,
                               grpc::ByteBuffer* raw);

// Called exactly once with the call's outcome, inline or later from any thread.
using FinishFn = std::function<void(absl::Status)>;

// Serves one call: parses a Request from `raw_req`, then calls
// `handler(const Request&, Response*, FinishFn)`; the request and response stay alive until the
// handler's FinishFn runs, which serialises the response (if OK) and finishes the call. Returns
// the call's reactor, as a callback-API method must.
template <typename Request, typename Response, typename Handler>
grpc::ServerUnaryReactor* ServeRaw(grpc::CallbackServerContext* ctx,
                                   const grpc::ByteBuffer* raw_req, grpc::ByteBuffer* raw_resp,
                                   absl::string_view method, Handler&& handler) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  auto call = std::make_shared<std::pair<Request, Response>>();
  if (absl::Status s = ParseRequest(*raw_req, method, &call->first); !s.ok()) {
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }
  handler(call->first, &call->second,
          [reactor, call, raw_resp, method = std::string(method)](absl::Status s) {
            if (s.ok()) s = SerializeResponse(call->second, method, raw_resp);
            reactor->Finish(ToGrpcStatus(s));  // may delete the call's gRPC state; `call` is ours
          });
  return reactor;
}

}  // namespace pstrain
