#include "master/coordinator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/rpc.h"

namespace pstrain {

Coordinator::Coordinator(int num_ps, int num_workers)
    : num_ps_(num_ps),
      num_workers_(num_workers),
      ps_registered_(num_ps, false),
      worker_registered_(num_workers, false),
      workers_(num_workers),
      progress_(num_workers) {}

absl::Status Coordinator::Register(const RegisterRequest& req, RegisterResponse* resp) {
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
  if (s.job() == "worker") workers_[s.task()] = s;
  resp->set_mode(mode_);
  return absl::OkStatus();
}

std::vector<Sender> Coordinator::Workers() const {
  absl::MutexLock lock(&mu_);
  return workers_;
}

void Coordinator::SetMode(const std::string& mode) {
  absl::MutexLock lock(&mu_);
  mode_ = mode;
}

bool Coordinator::IsWorker(const Sender& s) const {
  return s.job() == "worker" && s.task() >= 0 && s.task() < num_workers_ &&
         worker_registered_[s.task()] && workers_[s.task()].incarnation() == s.incarnation();
}

void Coordinator::SetReady() {
  std::vector<std::function<void(absl::Status)>> released;
  {
    absl::MutexLock lock(&mu_);
    ready_ = true;
    ReleaseBarriers();
    released.swap(released_);
  }
  for (auto& done : released) done(absl::OkStatus());
}

void Coordinator::ReleaseBarriers() {
  for (auto it = barriers_.begin(); it != barriers_.end();) {
    BarrierState& b = it->second;
    const bool all = std::all_of(b.arrived.begin(), b.arrived.end(), [](bool x) { return x; });
    if (all && (ready_ || it->first != "pstrain/start")) {
      for (auto& done : b.waiting) released_.push_back(std::move(done));
      it = barriers_.erase(it);
    } else {
      ++it;
    }
  }
}

void Coordinator::Barrier(const BarrierRequest& req, std::function<void(absl::Status)> done) {
  std::vector<std::function<void(absl::Status)>> released;
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    if (!IsWorker(req.sender())) {
      refused = absl::PermissionDeniedError(absl::StrCat(
          "barrier \"", req.name(), "\" from ", TaskName(req.sender().job(), req.sender().task()),
          ", which is not a registered worker"));
    } else if (stop_) {
      refused = absl::CancelledError("the job is ending");
    } else {
      BarrierState& b = barriers_[req.name()];
      if (b.arrived.empty()) b.arrived.assign(num_workers_, false);
      b.arrived[req.sender().task()] = true;
      b.waiting.push_back(std::move(done));
      ReleaseBarriers();
      released.swap(released_);
    }
  }
  if (!refused.ok()) return done(refused);
  for (auto& d : released) d(absl::OkStatus());
}

void Coordinator::SetCreateVariable(CreateVariableFn fn) {
  absl::MutexLock lock(&mu_);
  create_variable_ = std::move(fn);
}

absl::Status Coordinator::CreateVariable(const CreateVariableRequest& req,
                                         CreateVariableResponse* resp) {
  CreateVariableFn fn;
  {
    absl::MutexLock lock(&mu_);
    if (!IsWorker(req.sender())) {
      return absl::PermissionDeniedError(
          absl::StrCat("CreateVariable from ", TaskName(req.sender().job(), req.sender().task()),
                       ", which is not a registered worker"));
    }
    fn = create_variable_;
  }
  if (!fn) {
    return absl::FailedPreconditionError(
        "this job creates its own variables: CreateVariable needs a chief run with --model "
        "external");
  }
  absl::StatusOr<Placement> p = fn(req.spec());
  if (!p.ok()) return p.status();
  *resp->mutable_placement() = *std::move(p);
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
  p.nonfinite_skipped = req.nonfinite_skipped();
  p.stale_dropped = req.stale_dropped();
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
  std::vector<std::function<void(absl::Status)>> cancelled;
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    for (auto& [name, b] : barriers_) {
      for (auto& d : b.waiting) cancelled.push_back(std::move(d));
    }
    barriers_.clear();
  }
  for (auto& d : cancelled) d(absl::CancelledError("the job is ending"));
}

namespace {

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

  // Held open until every worker arrived; finished from the thread of the last arrival.
  grpc::ServerUnaryReactor* Barrier(grpc::CallbackServerContext* ctx, const BarrierRequest* req,
                                    BarrierResponse* resp) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    coordinator_->Barrier(*req, [reactor](absl::Status s) { reactor->Finish(ToGrpcStatus(s)); });
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
