// The gRPC MasterService over a Coordinator: each handler converts and forwards.
#include <chrono>

#include "common/rpc.h"
#include "master/coordinator.h"

namespace pstrain {
namespace {

// A barrier arrival is withdrawn this long before its caller's deadline, so that the answer
// naming the missing workers reaches the caller before its own deadline fires.
constexpr absl::Duration kBarrierAnswerMargin = absl::Milliseconds(500);

absl::Time BarrierDeadline(const grpc::CallbackServerContext& ctx) {
  const std::chrono::system_clock::time_point d = ctx.deadline();
  if (d == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(d) - kBarrierAnswerMargin;
}

class MasterServiceImpl final : public MasterService::CallbackService {
 public:
  explicit MasterServiceImpl(Coordinator* c) : coordinator_(c) {}

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* ctx, const RegisterRequest* req,
                                     RegisterResponse* resp) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(ToGrpcStatus(coordinator_->Register(*req, resp)));
    return reactor;
  }

  grpc::ServerUnaryReactor* CreateVariable(grpc::CallbackServerContext* ctx,
                                           const CreateVariableRequest* req,
                                           CreateVariableResponse* resp) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(ToGrpcStatus(coordinator_->CreateVariable(*req, resp)));
    return reactor;
  }

  // Held open until the barrier releases or the arrival is withdrawn; finished from the thread
  // that decides it. The Coordinator asks IsCancelled only until it calls `done`, while the
  // context is alive: Finish comes after, and may delete the context.
  grpc::ServerUnaryReactor* Barrier(grpc::CallbackServerContext* ctx, const BarrierRequest* req,
                                    BarrierResponse* resp) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    BarrierCall call;
    call.deadline = BarrierDeadline(*ctx);
    call.cancelled = [ctx] { return ctx->IsCancelled(); };
    call.done = [reactor](absl::Status s) { reactor->Finish(ToGrpcStatus(s)); };
    coordinator_->Barrier(*req, std::move(call));
    return reactor;
  }

  grpc::ServerUnaryReactor* ReportProgress(grpc::CallbackServerContext* ctx,
                                           const ProgressRequest* req,
                                           ProgressResponse* resp) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    bool stop = false;
    absl::Status s = coordinator_->Report(*req, &stop);
    resp->set_stop(stop);
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }

 private:
  Coordinator* const coordinator_;
};

}  // namespace

std::unique_ptr<grpc::Service> MakeMasterService(Coordinator* coordinator) {
  return std::make_unique<MasterServiceImpl>(coordinator);
}

}  // namespace pstrain
