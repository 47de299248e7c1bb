// The gRPC MasterService over a Coordinator, on raw requests and responses (common/raw_call.h):
// each handler forwards to the Coordinator.
#include <chrono>

#include "common/raw_call.h"
#include "common/rpc.h"
#include "master/coordinator.h"

namespace pstrain {
namespace {

// A barrier arrival is withdrawn this long before its caller's deadline, so that the answer
// naming the missing workers reaches the caller before its own deadline fires.
constexpr absl::Duration kBarrierAnswerMargin = absl::Seconds(1);

absl::Time BarrierDeadline(const grpc::CallbackServerContext& ctx) {
  const std::chrono::system_clock::time_point d = ctx.deadline();
  if (d == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(d) - kBarrierAnswerMargin;
}

using Raw = grpc::ByteBuffer;
using Base = MasterService::WithRawCallbackMethod_Register<
    MasterService::WithRawCallbackMethod_ReportProgress<
        MasterService::WithRawCallbackMethod_CreateVariable<
            MasterService::WithRawCallbackMethod_Barrier<
                MasterService::WithRawCallbackMethod_CreateTable<
                    MasterService::WithRawCallbackMethod_NextTask<
                        MasterService::WithRawCallbackMethod_TaskDone<
                            MasterService::WithRawCallbackMethod_Heartbeat<
                                MasterService::Service>>>>>>>>;

class MasterServiceImpl final : public Base {
 public:
  explicit MasterServiceImpl(Coordinator* c) : coordinator_(c) {}

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* ctx, const Raw* req,
                                     Raw* resp) override {
    return ServeRaw<RegisterRequest, RegisterResponse>(
        ctx, req, resp, "Register",
        [this](const auto& q, auto* r, FinishFn done) { done(coordinator_->Register(q, r)); });
  }

  grpc::ServerUnaryReactor* CreateVariable(grpc::CallbackServerContext* ctx, const Raw* req,
                                           Raw* resp) override {
    return ServeRaw<CreateVariableRequest, CreateVariableResponse>(
        ctx, req, resp, "CreateVariable", [this](const auto& q, auto* r, FinishFn done) {
          done(coordinator_->CreateVariable(q, r));
        });
  }

  grpc::ServerUnaryReactor* CreateTable(grpc::CallbackServerContext* ctx, const Raw* req,
                                        Raw* resp) override {
    return ServeRaw<CreateTableRequest, CreateTableResponse>(
        ctx, req, resp, "CreateTable",
        [this](const auto& q, auto* r, FinishFn done) { done(coordinator_->CreateTable(q, r)); });
  }

  grpc::ServerUnaryReactor* NextTask(grpc::CallbackServerContext* ctx, const Raw* req,
                                     Raw* resp) override {
    return ServeRaw<NextTaskRequest, NextTaskResponse>(
        ctx, req, resp, "NextTask",
        [this](const auto& q, auto* r, FinishFn done) { done(coordinator_->NextTask(q, r)); });
  }

  grpc::ServerUnaryReactor* TaskDone(grpc::CallbackServerContext* ctx, const Raw* req,
                                     Raw* resp) override {
    return ServeRaw<TaskDoneRequest, TaskDoneResponse>(
        ctx, req, resp, "TaskDone",
        [this](const auto& q, auto*, FinishFn done) { done(coordinator_->TaskDone(q)); });
  }

  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx, const Raw* req,
                                      Raw* resp) override {
    return ServeRaw<HeartbeatRequest, HeartbeatResponse>(
        ctx, req, resp, "Heartbeat",
        [this](const auto& q, auto* r, FinishFn done) { done(coordinator_->Heartbeat(q, r)); });
  }

  // Held open until the barrier releases or the arrival is withdrawn; finished from the thread
  // that decides it. The Coordinator asks IsCancelled only until it calls `done`, while the
  // context is alive: Finish comes after, and may delete the context.
  grpc::ServerUnaryReactor* Barrier(grpc::CallbackServerContext* ctx, const Raw* req,
                                    Raw* resp) override {
    return ServeRaw<BarrierRequest, BarrierResponse>(
        ctx, req, resp, "Barrier",
        [this, ctx](const BarrierRequest& q, BarrierResponse*, FinishFn done) {
          BarrierCall call;
          call.deadline = BarrierDeadline(*ctx);
          call.cancelled = [ctx] { return ctx->IsCancelled(); };
          call.done = std::move(done);
          coordinator_->Barrier(q, std::move(call));
        });
  }

  grpc::ServerUnaryReactor* ReportProgress(grpc::CallbackServerContext* ctx, const Raw* req,
                                           Raw* resp) override {
    return ServeRaw<ProgressRequest, ProgressResponse>(
        ctx, req, resp, "ReportProgress",
        [this](const ProgressRequest& q, ProgressResponse* r, FinishFn done) {
          bool stop = false;
          absl::Status s = coordinator_->Report(q, &stop);
          r->set_stop(stop);
          done(s);
        });
  }

 private:
  Coordinator* const coordinator_;
};

}  // namespace

std::unique_ptr<grpc::Service> MakeMasterService(Coordinator* coordinator) {
  return std::make_unique<MasterServiceImpl>(coordinator);
}

}  // namespace pstrain
