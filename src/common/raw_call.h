// Unary gRPC calls served on raw bytes: the server parses each request itself, so a request that
// does not parse gets INVALID_ARGUMENT naming the method and message type (gRPC's own parsing
// answers UNIMPLEMENTED with an empty message), and serialises each response itself after
// checking its size (a response too large to encode would abort the process inside gRPC).
// Every service of pstrain (ParameterServerService, MasterService, WorkerService) uses it, so it
// is also the one place where a call's job token is checked (security.h) before its handler
// runs, and where every call is counted for /metrics (rpc_metrics.h).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/rpc.h"
#include "common/rpc_metrics.h"
#include "common/security.h"
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

// Serves one call whose handler reads `raw_req` and writes `raw_resp` itself (the PS's Pull
// and Push, which keep tensors out of protobuf strings): checks the job token, then calls
// `handler(FinishFn)`, whose FinishFn counts the call for /metrics and finishes it. The
// handler must leave `raw_resp` alone after calling it. Returns the call's reactor.
template <typename Handler>
grpc::ServerUnaryReactor* ServeBytes(grpc::CallbackServerContext* ctx,
                                     const grpc::ByteBuffer* raw_req, grpc::ByteBuffer* raw_resp,
                                     absl::string_view method, Handler&& handler) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  const absl::Time start = absl::Now();
  const size_t request_bytes = raw_req->Length();
  FinishFn finish = [reactor, raw_resp, start, request_bytes,
                     method = std::string(method)](absl::Status s) {
    ObserveServedRpc(method, s.code(), request_bytes, s.ok() ? raw_resp->Length() : 0,
                     absl::Now() - start);
    reactor->Finish(ToGrpcStatus(s));  // may delete the call's gRPC state
  };
  if (absl::Status s = CheckCallToken(*ctx, method); !s.ok()) {
    finish(s);
    return reactor;
  }
  handler(std::move(finish));
  return reactor;
}

// Serves one call: parses a Request from `raw_req`, then calls
// `handler(const Request&, Response*, FinishFn)`; the request and response stay alive until the
// handler's FinishFn runs, which serialises the response (if OK) and finishes the call. Returns
// the call's reactor, as a callback-API method must.
template <typename Request, typename Response, typename Handler>
grpc::ServerUnaryReactor* ServeRaw(grpc::CallbackServerContext* ctx,
                                   const grpc::ByteBuffer* raw_req, grpc::ByteBuffer* raw_resp,
                                   absl::string_view method, Handler&& handler) {
  return ServeBytes(ctx, raw_req, raw_resp, method, [&](FinishFn finish) {
    auto call = std::make_shared<std::pair<Request, Response>>();
    if (absl::Status s = ParseRequest(*raw_req, method, &call->first); !s.ok()) {
      return finish(s);
    }
    handler(
        call->first, &call->second,
        [call, raw_resp, method = std::string(method), finish = std::move(finish)](absl::Status s) {
          if (s.ok()) s = SerializeResponse(call->second, method, raw_resp);
          finish(s);  // `call` is ours, so it outlives the call's gRPC state
        });
  });
}

}  // namespace pstrain
