#include "worker/worker.h"

#include <atomic>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/rpc.h"
#include "master.grpc.pb.h"
#include "spdlog/spdlog.h"
#include "worker.grpc.pb.h"
#include "worker/trainer.h"

namespace pstrain {
namespace {

class WorkerImpl final : public Worker, public WorkerService::CallbackService {
 public:
  WorkerImpl(const WorkerOptions& options, ShutdownFn on_shutdown)
      : options_(options),
        on_shutdown_(std::move(on_shutdown)),
        master_(MasterService::NewStub(MakeChannel(options.chief_address))) {}

  ~WorkerImpl() override {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

  grpc::Service* service() override { return this; }

  // Loading the data and training run on a thread of their own; the reactor is finished from
  // there once the spec and data are checked, so the chief learns about bad input at once.
  grpc::ServerUnaryReactor* StartTraining(grpc::CallbackServerContext* ctx,
                                          const StartTrainingRequest* req,
                                          StartTrainingResponse* resp) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    if (started_.exchange(true)) {
      reactor->Finish(ToGrpcStatus(absl::FailedPreconditionError(
          absl::StrCat(TaskName("worker", options_.task), " is already training"))));
      return reactor;
    }
    thread_ = std::thread([this, spec = req->spec(), reactor] {
      absl::StatusOr<Dataset> data = LoadMnist(spec.data_dir(), "train");
      absl::Status s = data.status();
      if (s.ok()) s = ValidateSpec(spec, options_.ps_addresses.size(), *data);
      reactor->Finish(ToGrpcStatus(s));  // `reactor` must not be used after this
      if (!s.ok()) {
        spdlog::error("cannot start training: {}", std::string(s.message()));
        return;
      }
      TrainerOptions topts;
      topts.task = options_.task;
      topts.ps_addresses = options_.ps_addresses;
      topts.stop = &stop_;
      topts.report = [this](const ProgressRequest& r) { return Report(r); };
      Train(spec, *data, topts);
    });
    return reactor;
  }

  grpc::ServerUnaryReactor* Shutdown(grpc::CallbackServerContext* ctx, const ShutdownRequest* req,
                                     ShutdownResponse* resp) override {
    stop_ = true;
    ShutdownOnce(req->reason(), req->job_succeeded());
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  bool Report(const ProgressRequest& r) {
    ProgressResponse resp;
    grpc::Status s = master_->ReportProgress(ContextWithTimeout(absl::Seconds(30)).get(), r, &resp);
    if (!s.ok()) {
      // Without the chief the job cannot finish: stop rather than train for nobody.
      ShutdownOnce(
          FromGrpcStatus(s, "ReportProgress", "chief " + options_.chief_address).ToString(),
          false);
      return false;
    }
    return !resp.stop();
  }

  void ShutdownOnce(const std::string& reason, bool job_succeeded) {
    std::call_once(shutdown_once_, [&] { on_shutdown_(reason, job_succeeded); });
  }

  const WorkerOptions options_;
  const ShutdownFn on_shutdown_;
  std::unique_ptr<MasterService::Stub> master_;
  std::atomic<bool> started_{false};
  std::atomic<bool> stop_{false};
  std::once_flag shutdown_once_;
  std::thread thread_;  // written once, by the first StartTraining
};

}  // namespace

absl::StatusOr<std::unique_ptr<Worker>> Worker::Create(const WorkerOptions& options,
                                                       ShutdownFn on_shutdown) {
  if (options.ps_addresses.empty())
    return absl::InvalidArgumentError("worker needs at least one ps");
  if (options.chief_address.empty())
    return absl::InvalidArgumentError("worker needs the chief's address");
  return std::make_unique<WorkerImpl>(options, std::move(on_shutdown));
}

}  // namespace pstrain
