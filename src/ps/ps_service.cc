// The gRPC ParameterServerService over a ParameterServer, on gRPC's callback API. Each handler
// runs the ParameterServer method inline and finishes the call with its status.

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "common/rpc.h"
#include "ps/ps.h"

namespace pstrain {
namespace {

class ParameterServerServiceImpl final : public ParameterServerService::CallbackService {
 public:
  ParameterServerServiceImpl(ParameterServer* ps, ShutdownFn on_shutdown)
      : ps_(ps), on_shutdown_(std::move(on_shutdown)) {}

  grpc::ServerUnaryReactor* CreateVariables(grpc::CallbackServerContext* ctx,
                                            const CreateVariablesRequest* req,
                                            CreateVariablesResponse* resp) override {
    return Finish(ctx, ps_->CreateVariables(*req, resp));
  }

  grpc::ServerUnaryReactor* DeleteVariables(grpc::CallbackServerContext* ctx,
                                            const DeleteVariablesRequest* req,
                                            DeleteVariablesResponse* resp) override {
    return Finish(ctx, ps_->DeleteVariables(*req, resp));
  }

  grpc::ServerUnaryReactor* Configure(grpc::CallbackServerContext* ctx, const ConfigureRequest* req,
                                      ConfigureResponse* resp) override {
    return Finish(ctx, ps_->Configure(*req, resp));
  }

  // A pull may wait (sync step, ssp clock): the reactor is finished from whichever thread
  // releases it. `req` and `resp` stay valid until Finish.
  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* ctx, const PullRequest* req,
                                 PullResponse* resp) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    ps_->PullAsync(*req, resp, [reactor](absl::Status s) { reactor->Finish(ToGrpcStatus(s)); });
    return reactor;
  }

  grpc::ServerUnaryReactor* Leave(grpc::CallbackServerContext* ctx, const LeaveRequest* req,
                                  LeaveResponse* resp) override {
    return Finish(ctx, ps_->Leave(*req, resp));
  }

  grpc::ServerUnaryReactor* Stats(grpc::CallbackServerContext* ctx, const StatsRequest* req,
                                  StatsResponse* resp) override {
    return Finish(ctx, ps_->Stats(*req, resp));
  }

  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* ctx, const PushRequest* req,
                                 PushResponse* resp) override {
    return Finish(ctx, ps_->Push(*req, resp));
  }

  // Calls on_shutdown once, for the first request the ParameterServer accepts (from the chief);
  // later ones just return OK. It runs on a gRPC thread inside this call, so it must not wait for
  // the server to shut down.
  grpc::ServerUnaryReactor* Shutdown(grpc::CallbackServerContext* ctx, const ShutdownRequest* req,
                                     ShutdownResponse* resp) override {
    absl::Status status = ps_->CheckShutdown(*req);
    if (status.ok() && !shutdown_called_.exchange(true) && on_shutdown_) {
      on_shutdown_(req->reason(), req->job_succeeded());
    }
    return Finish(ctx, status);
  }

 private:
  static grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* ctx,
                                          const absl::Status& status) {
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
