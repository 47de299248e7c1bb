// The gRPC ParameterServerService over a ParameterServer, on gRPC's callback API. Each handler
// takes the raw request bytes, parses them itself (so a request that does not parse is
// InvalidArgument with a message, not gRPC's UNIMPLEMENTED ""), runs the ParameterServer method
// and serialises the response itself after checking its size (so no response can reach gRPC's
// serialiser too large to encode, which aborts the process).

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/limits.h"
#include "common/rpc.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "grpcpp/support/proto_buffer_writer.h"
#include "ps/ps.h"

namespace pstrain {
namespace {

using Raw = grpc::ByteBuffer;
using Base = ParameterServerService::WithRawCallbackMethod_Configure<
    ParameterServerService::WithRawCallbackMethod_CreateVariables<
        ParameterServerService::WithRawCallbackMethod_DeleteVariables<
            ParameterServerService::WithRawCallbackMethod_Pull<
                ParameterServerService::WithRawCallbackMethod_Push<
                    ParameterServerService::WithRawCallbackMethod_Leave<
                        ParameterServerService::WithRawCallbackMethod_Stats<
                            ParameterServerService::WithRawCallbackMethod_Shutdown<
                                ParameterServerService::Service>>>>>>>>;

// Parses `raw` into `msg`; InvalidArgument naming the method otherwise.
absl::Status Parse(const Raw& raw, absl::string_view method, google::protobuf::Message* msg) {
  Raw copy(raw);  // shares the slices; the reader consumes its buffer
  const size_t bytes = copy.Length();
  grpc::ProtoBufferReader reader(&copy);
  if (!reader.status().ok() || !msg->ParseFromZeroCopyStream(&reader)) {
    return absl::InvalidArgumentError(absl::StrCat(method, " request of ", bytes,
                                                   " bytes is not a valid ",
                                                   msg->GetDescriptor()->full_name()));
  }
  return absl::OkStatus();
}

// Serialises `msg` into `raw`, or ResourceExhausted if it would pass kMaxMessageBytes.
absl::Status Serialize(const google::protobuf::Message& msg, absl::string_view method, Raw* raw) {
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

class ParameterServerServiceImpl final : public Base {
 public:
  ParameterServerServiceImpl(ParameterServer* ps, ShutdownFn on_shutdown)
      : ps_(ps), on_shutdown_(std::move(on_shutdown)) {}

  grpc::ServerUnaryReactor* Configure(grpc::CallbackServerContext* ctx, const Raw* req,
                                      Raw* resp) override {
    return Unary<ConfigureRequest, ConfigureResponse>(
        ctx, *req, resp, "Configure",
        [this](const auto& q, auto* r) { return ps_->Configure(q, r); });
  }

  grpc::ServerUnaryReactor* CreateVariables(grpc::CallbackServerContext* ctx, const Raw* req,
                                            Raw* resp) override {
    return Unary<CreateVariablesRequest, CreateVariablesResponse>(
        ctx, *req, resp, "CreateVariables",
        [this](const auto& q, auto* r) { return ps_->CreateVariables(q, r); });
  }

  grpc::ServerUnaryReactor* DeleteVariables(grpc::CallbackServerContext* ctx, const Raw* req,
                                            Raw* resp) override {
    return Unary<DeleteVariablesRequest, DeleteVariablesResponse>(
        ctx, *req, resp, "DeleteVariables",
        [this](const auto& q, auto* r) { return ps_->DeleteVariables(q, r); });
  }

  // A pull may wait (sync step, ssp clock): the reactor is finished from whichever thread
  // releases it. The call's request and response live in `call` until then; `resp` stays valid
  // until Finish.
  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* ctx, const Raw* req,
                                 Raw* resp) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    struct Call {
      PullRequest req;
      PullResponse resp;
    };
    auto call = std::make_shared<Call>();
    if (absl::Status s = Parse(*req, "Pull", &call->req); !s.ok()) {
      reactor->Finish(ToGrpcStatus(s));
      return reactor;
    }
    ps_->PullAsync(call->req, &call->resp, [reactor, call, resp](absl::Status s) {
      if (s.ok()) s = Serialize(call->resp, "Pull", resp);
      reactor->Finish(ToGrpcStatus(s));  // may delete the call's gRPC state; `call` is ours
    });
    return reactor;
  }

  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* ctx, const Raw* req,
                                 Raw* resp) override {
    return Unary<PushRequest, PushResponse>(
        ctx, *req, resp, "Push", [this](const auto& q, auto* r) { return ps_->Push(q, r); });
  }

  grpc::ServerUnaryReactor* Leave(grpc::CallbackServerContext* ctx, const Raw* req,
                                  Raw* resp) override {
    return Unary<LeaveRequest, LeaveResponse>(
        ctx, *req, resp, "Leave", [this](const auto& q, auto* r) { return ps_->Leave(q, r); });
  }

  grpc::ServerUnaryReactor* Stats(grpc::CallbackServerContext* ctx, const Raw* req,
                                  Raw* resp) override {
    return Unary<StatsRequest, StatsResponse>(
        ctx, *req, resp, "Stats", [this](const auto& q, auto* r) { return ps_->Stats(q, r); });
  }

  // Calls on_shutdown once, for the first request the ParameterServer accepts (from the chief);
  // later ones just return OK. It runs on a gRPC thread inside this call, so it must not wait for
  // the server to shut down.
  grpc::ServerUnaryReactor* Shutdown(grpc::CallbackServerContext* ctx, const Raw* req,
                                     Raw* resp) override {
    return Unary<ShutdownRequest, ShutdownResponse>(
        ctx, *req, resp, "Shutdown", [this](const ShutdownRequest& q, ShutdownResponse*) {
          absl::Status status = ps_->CheckShutdown(q);
          if (status.ok() && !shutdown_called_.exchange(true) && on_shutdown_) {
            on_shutdown_(q.reason(), q.job_succeeded());
          }
          return status;
        });
  }

 private:
  // Parses the request, runs `fn` inline, serialises the response and finishes the call.
  template <typename Request, typename Response, typename Fn>
  static grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* ctx, const Raw& raw_req,
                                         Raw* raw_resp, absl::string_view method, Fn fn) {
    Request req;
    Response resp;
    absl::Status status = Parse(raw_req, method, &req);
    if (status.ok()) status = fn(req, &resp);
    if (status.ok()) status = Serialize(resp, method, raw_resp);
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(ToGrpcStatus(status));
    return reactor;
  }

  ParameterServer* const ps_;
  const ShutdownFn on_shutdown_;
  std::atomic<bool> shutdown_called_{false};
};

}  // namespace

std::unique_ptr<grpc::Service> MakeParameterServerService(ParameterServer* ps,
                                                          ShutdownFn on_shutdown) {
  return std::make_unique<ParameterServerServiceImpl>(ps, std::move(on_shutdown));
}

}  // namespace pstrain
