// The gRPC ParameterServerService over a ParameterServer, on gRPC's callback API with raw
// requests and responses (common/raw_call.h): each handler runs the ParameterServer method. Pull
// and Push read and write their bytes themselves (transport/grpc_wire.h), so that tensors are
// not copied into and out of protobuf strings.

#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/limits.h"
#include "common/raw_call.h"
#include "common/rpc.h"
#include "ps/ps.h"
#include "transport/buffer_pool.h"
#include "transport/grpc_wire.h"

namespace pstrain {
namespace {

using Raw = grpc::ByteBuffer;
using RecoveryMethods = ParameterServerService::WithRawCallbackMethod_Reset<
    ParameterServerService::WithRawCallbackMethod_AppliedTasks<
        ParameterServerService::WithRawCallbackMethod_DataPlane<ParameterServerService::Service>>>;
using Base = ParameterServerService::WithRawCallbackMethod_Configure<
    ParameterServerService::WithRawCallbackMethod_CreateVariables<
        ParameterServerService::WithRawCallbackMethod_DeleteVariables<
            ParameterServerService::WithRawCallbackMethod_Pull<
                ParameterServerService::WithRawCallbackMethod_Push<
                    ParameterServerService::WithRawCallbackMethod_CreateTables<
                        ParameterServerService::WithRawCallbackMethod_Lookup<
                            ParameterServerService::WithRawCallbackMethod_PushSparse<
                                ParameterServerService::WithRawCallbackMethod_Leave<
                                    ParameterServerService::WithRawCallbackMethod_Stats<
                                        ParameterServerService::WithRawCallbackMethod_Shutdown<
                                            ParameterServerService::
                                                WithRawCallbackMethod_Checkpoint<
                                                    ParameterServerService::
                                                        WithRawCallbackMethod_Import<
                                                            ParameterServerService::
                                                                WithRawCallbackMethod_ReplaceWorker<
                                                                    RecoveryMethods>>>>>>>>>>>>>>;

struct PullCall {
  PullRequest req;
  PullResponse resp;
  std::vector<LentBytes> data;  // value i's floats, the variable's own
};

struct PushCall {
  PushPayload payload;
  PushResponse resp;
};

class ParameterServerServiceImpl final : public Base {
 public:
  ParameterServerServiceImpl(ParameterServer* ps, ShutdownFn on_shutdown)
      : ps_(ps), on_shutdown_(std::move(on_shutdown)) {}

  grpc::ServerUnaryReactor* Configure(grpc::CallbackServerContext* ctx, const Raw* req,
                                      Raw* resp) override {
    return ServeRaw<ConfigureRequest, ConfigureResponse>(
        ctx, req, resp, "Configure",
        [this](const auto& q, auto* r, FinishFn done) { done(ps_->Configure(q, r)); });
  }

  grpc::ServerUnaryReactor* ReplaceWorker(grpc::CallbackServerContext* ctx, const Raw* req,
                                          Raw* resp) override {
    return ServeRaw<ReplaceWorkerRequest, ReplaceWorkerResponse>(
        ctx, req, resp, "ReplaceWorker",
        [this](const auto& q, auto*, FinishFn done) { done(ps_->ReplaceWorker(q)); });
  }

  grpc::ServerUnaryReactor* CreateVariables(grpc::CallbackServerContext* ctx, const Raw* req,
                                            Raw* resp) override {
    // The received bytes are let go once parsed, before the variables are built: creating a
    // large variable then holds two copies of its initial value at most (the parsed one and the
    // variable's own), not three.
    return ServeBytes(ctx, req, resp, "CreateVariables", [this, req, resp](FinishFn finish) {
      CreateVariablesRequest q;
      if (absl::Status s = ParseRequest(*req, "CreateVariables", &q); !s.ok()) return finish(s);
      const_cast<Raw*>(req)->Clear();  // the call's own buffer, read only above
      CreateVariablesResponse r;
      absl::Status s = ps_->CreateVariables(q, &r);
      if (s.ok()) s = SerializeResponse(r, "CreateVariables", resp);
      finish(s);
    });
  }

  grpc::ServerUnaryReactor* DeleteVariables(grpc::CallbackServerContext* ctx, const Raw* req,
                                            Raw* resp) override {
    return ServeRaw<DeleteVariablesRequest, DeleteVariablesResponse>(
        ctx, req, resp, "DeleteVariables",
        [this](const auto& q, auto* r, FinishFn done) { done(ps_->DeleteVariables(q, r)); });
  }

  // A pull may wait (sync step, ssp clock): the reactor is finished from whichever thread
  // releases it. Each value is sent from the variable's own floats, which the PS lends (a push
  // meanwhile updates a copy): the response's slices point at them (transport/grpc_wire.h)
  // until gRPC has sent them; the call's state lives in `call` until then. `resp` stays valid
  // until Finish.
  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* ctx, const Raw* req,
                                 Raw* resp) override {
    return ServeBytes(ctx, req, resp, "Pull", [this, req, resp](FinishFn finish) {
      auto call = std::make_shared<PullCall>();
      if (absl::Status s = ParseRequest(*req, "Pull", &call->req); !s.ok()) return finish(s);
      call->data.resize(call->req.names_size());
      auto sink = [call](int i, const float* values, int64_t count,
                         const std::shared_ptr<const void>& keep) {
        call->data[i] = {{values, count * static_cast<int64_t>(sizeof(float))}, keep};
        return absl::OkStatus();
      };
      // One message: a pull past it is refused before anything is lent (the client splits
      // its pulls, and streams a shard that passes one message).
      ps_->PullAsync(call->req, &call->resp, std::move(sink), kMaxPayloadBytes,
                     [call, resp, finish = std::move(finish)](absl::Status s) {
                       if (s.ok())
                         s = WritePullResponse(call->resp, std::move(call->data), "Pull", resp);
                       finish(s);
                     });
    });
  }

  // A push's tensors stay in the received slices (or a small pooled copy) until it is applied,
  // which may be later on another thread (after a checkpoint's freeze): `call` keeps them.
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* ctx, const Raw* req,
                                 Raw* resp) override {
    return ServeBytes(ctx, req, resp, "Push", [this, req, resp](FinishFn finish) {
      auto call = std::make_shared<PushCall>();
      if (absl::Status s = ReadPushRequest(*req, "Push", &BufferPool::Shared(), &call->payload);
          !s.ok()) {
        return finish(s);
      }
      ps_->AfterFreeze([this, call, resp, finish = std::move(finish)] {
        absl::Status s = ps_->PushPieces(call->payload.head, call->payload.pieces, &call->resp);
        if (s.ok()) s = SerializeResponse(call->resp, "Push", resp);
        finish(s);
      });
    });
  }

  grpc::ServerUnaryReactor* CreateTables(grpc::CallbackServerContext* ctx, const Raw* req,
                                         Raw* resp) override {
    return ServeRaw<CreateTablesRequest, CreateTablesResponse>(
        ctx, req, resp, "CreateTables",
        [this](const auto& q, auto* r, FinishFn done) { done(ps_->CreateTables(q, r)); });
  }

  // A lookup may wait as a pull does; its keys are read from the request in `call`, which lives
  // until the lookup's FinishFn runs.
  grpc::ServerUnaryReactor* Lookup(grpc::CallbackServerContext* ctx, const Raw* req,
                                   Raw* resp) override {
    return ServeRaw<LookupRequest, LookupResponse>(
        ctx, req, resp, "Lookup", [this](const LookupRequest& q, LookupResponse* r, FinishFn done) {
          ps_->LookupAsync(q, r, std::move(done));
        });
  }

  grpc::ServerUnaryReactor* PushSparse(grpc::CallbackServerContext* ctx, const Raw* req,
                                       Raw* resp) override {
    return ServeRaw<PushSparseRequest, PushSparseResponse>(
        ctx, req, resp, "PushSparse", [this](const auto& q, auto* r, FinishFn done) {
          ps_->AfterFreeze([this, &q, r, done = std::move(done)] { done(ps_->PushSparse(q, r)); });
        });
  }

  grpc::ServerUnaryReactor* Leave(grpc::CallbackServerContext* ctx, const Raw* req,
                                  Raw* resp) override {
    return ServeRaw<LeaveRequest, LeaveResponse>(
        ctx, req, resp, "Leave", [this](const auto& q, auto* r, FinishFn done) {
          ps_->AfterFreeze([this, &q, r, done = std::move(done)] { done(ps_->Leave(q, r)); });
        });
  }

  grpc::ServerUnaryReactor* Stats(grpc::CallbackServerContext* ctx, const Raw* req,
                                  Raw* resp) override {
    return ServeRaw<StatsRequest, StatsResponse>(
        ctx, req, resp, "Stats",
        [this](const auto& q, auto* r, FinishFn done) { done(ps_->Stats(q, r)); });
  }

  grpc::ServerUnaryReactor* Checkpoint(grpc::CallbackServerContext* ctx, const Raw* req,
                                       Raw* resp) override {
    return ServeRaw<CheckpointRequest, CheckpointResponse>(
        ctx, req, resp, "Checkpoint",
        [this](const auto& q, auto* r, FinishFn done) { done(ps_->Checkpoint(q, r)); });
  }

  grpc::ServerUnaryReactor* Import(grpc::CallbackServerContext* ctx, const Raw* req,
                                   Raw* resp) override {
    return ServeRaw<ImportRequest, ImportResponse>(
        ctx, req, resp, "Import",
        [this](const auto& q, auto* r, FinishFn done) { done(ps_->Import(q, r)); });
  }

  grpc::ServerUnaryReactor* Reset(grpc::CallbackServerContext* ctx, const Raw* req,
                                  Raw* resp) override {
    return ServeRaw<ResetRequest, ResetResponse>(
        ctx, req, resp, "Reset",
        [this](const auto& q, auto* r, FinishFn done) { done(ps_->Reset(q, r)); });
  }

  grpc::ServerUnaryReactor* AppliedTasks(grpc::CallbackServerContext* ctx, const Raw* req,
                                         Raw* resp) override {
    return ServeRaw<AppliedTasksRequest, AppliedTasksResponse>(
        ctx, req, resp, "AppliedTasks",
        [this](const auto& q, auto* r, FinishFn done) { done(ps_->AppliedTasks(q, r)); });
  }

  // Any task may ask; the answer holds only addresses.
  grpc::ServerUnaryReactor* DataPlane(grpc::CallbackServerContext* ctx, const Raw* req,
                                      Raw* resp) override {
    return ServeRaw<DataPlaneRequest, DataPlaneResponse>(
        ctx, req, resp, "DataPlane", [this](const auto&, auto* r, FinishFn done) {
          *r = ps_->DataPlane();
          done(absl::OkStatus());
        });
  }

  // Calls on_shutdown once, for the first request the ParameterServer accepts (from the chief);
  // later ones just return OK. It runs on a gRPC thread inside this call, so it must not wait for
  // the server to shut down.
  grpc::ServerUnaryReactor* Shutdown(grpc::CallbackServerContext* ctx, const Raw* req,
                                     Raw* resp) override {
    return ServeRaw<ShutdownRequest, ShutdownResponse>(
        ctx, req, resp, "Shutdown",
        [this](const ShutdownRequest& q, ShutdownResponse*, FinishFn done) {
          absl::Status status = ps_->CheckShutdown(q);
          if (status.ok() && !shutdown_called_.exchange(true) && on_shutdown_) {
            on_shutdown_(q.reason(), q.job_succeeded());
          }
          done(status);
        });
  }

 private:
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
