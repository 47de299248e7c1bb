#include "master/coordinator.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/rpc.h"

namespace pstrain {

Coordinator::Coordinator(int num_ps, int num_workers)
    : num_ps_(num_ps),
      num_workers_(num_workers),
      ps_registered_(num_ps, false),
      worker_registered_(num_workers, false),
      progress_(num_workers) {}

absl::Status Coordinator::Register(const RegisterRequest& req) {
  const Sender& s = req.sender();
  absl::MutexLock lock(&mu_);
  std::vector<bool>* table = nullptr;
  if (s.job() == "ps") table = &ps_registered_;
  if (s.job() == "worker") table = &worker_registered_;
  if (table == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("register from job \"", s.job(), "\": only ps and worker tasks register"));
  }
  if (s.task() < 0 || s.task() >= static_cast<int>(table->size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("register from unknown task ", TaskName(s.job(), s.task()),
                     ": the cluster has ", table->size(), " ", s.job(), " task(s)"));
  }
  (*table)[s.task()] = true;
  return absl::OkStatus();
}

absl::Status Coordinator::Report(const ProgressRequest& req, bool* stop) {
  const Sender& s = req.sender();
  absl::MutexLock lock(&mu_);
  if (s.job() != "worker" || s.task() < 0 || s.task() >= num_workers_ ||
      !worker_registered_[s.task()]) {
    return absl::InvalidArgumentError(absl::StrCat("progress report from ",
                                                   TaskName(s.job(), s.task()),
                                                   ", which is not a registered worker"));
  }
  WorkerProgress& p = progress_[s.task()];
  p.epoch = req.epoch();
  p.steps = req.steps();
  p.examples = req.examples();
  p.loss = req.loss();
  p.done = req.done();
  if (!req.error().empty()) p.error = req.error();
  p.last_report = absl::Now();
  ++reports_;
  *stop = stop_;
  return absl::OkStatus();
}

absl::Status Coordinator::WaitForRegistration(absl::Duration timeout) {
  auto all = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    for (bool b : ps_registered_)
      if (!b) return false;
    for (bool b : worker_registered_)
      if (!b) return false;
    return true;
  };
  absl::MutexLock lock(&mu_);
  if (mu_.AwaitWithTimeout(absl::Condition(&all), timeout)) return absl::OkStatus();
  std::vector<std::string> missing;
  for (int i = 0; i < num_ps_; ++i)
    if (!ps_registered_[i]) missing.push_back(TaskName("ps", i));
  for (int i = 0; i < num_workers_; ++i) {
    if (!worker_registered_[i]) missing.push_back(TaskName("worker", i));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("timed out after ", absl::FormatDuration(timeout),
                   " waiting for tasks to register: ", absl::StrJoin(missing, ", ")));
}

std::vector<WorkerProgress> Coordinator::WaitForReport(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  const int64_t seen = reports_;
  auto changed = [this, seen]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return reports_ != seen; };
  mu_.AwaitWithTimeout(absl::Condition(&changed), timeout);
  return progress_;
}

void Coordinator::RequestStop() {
  absl::MutexLock lock(&mu_);
  stop_ = true;
}

namespace {

class MasterServiceImpl final : public MasterService::CallbackService {
 public:
  explicit MasterServiceImpl(Coordinator* c) : coordinator_(c) {}

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* ctx, const RegisterRequest* req,
                                     RegisterResponse* resp) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(ToGrpcStatus(coordinator_->Register(*req)));
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
