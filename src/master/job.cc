// RunJob: the chief's side of one training job, from registration to shutdown.
#include "master/job.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/limits.h"
#include "common/tensor.h"
#include "master/progress.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace pstrain {

absl::Status Stopped(const std::string& reason) {
  return absl::CancelledError(absl::StrCat("stopped by ", reason));
}

namespace {

// One stub of `Service` per address, in the order of `addresses`.
template <typename Service>
std::vector<std::unique_ptr<typename Service::Stub>> StubsFor(
    const std::vector<std::string>& addresses) {
  std::vector<std::unique_ptr<typename Service::Stub>> stubs;
  for (const std::string& a : addresses) stubs.push_back(Service::NewStub(MakeChannel(a)));
  return stubs;
}

}  // namespace

Job::Job(const MasterOptions& options, Coordinator* coordinator, ModelJob* model_job,
         VariablePlacer* placer, TableCreator* tables, StatusTracker* status)
    : config_(options.job),
      coordinator_(coordinator),
      model_job_(model_job),
      placer_(placer),
      tables_(tables),
      status_(status),
      print_progress_(options.print_progress),
      ps_addresses_(options.ps_addresses),
      ps_(StubsFor<ParameterServerService>(options.ps_addresses)),
      workers_(StubsFor<WorkerService>(options.worker_addresses)) {}

Sender Job::Chief() const {
  Sender s = MakeSender("chief", 0);
  s.set_generation(generation_);
  return s;
}

absl::StatusOr<JobResult> Job::Run() {
  if (model_job_ != nullptr) {
    if (config_.epochs == kAutoEpochs) {
      config_.epochs = config_.EpochsFor(model_job_->train_records());
      spdlog::info("--epochs auto: {} epochs over {} training records", config_.epochs,
                   model_job_->train_records());
    }
    task_rows_ = config_.TaskRows(model_job_->train_records(), static_cast<int>(workers_.size()));
    if (config_.cosine_if_regression && model_job_->regression()) {
      config_.optimizer.mutable_schedule()->set_kind("cosine");
      spdlog::info("--lr_schedule cosine: an mlp's regression decays its rate");
    }
    SetScheduleLength();
  } else {
    task_rows_ = config_.TaskRows(config_.rows, static_cast<int>(workers_.size()));
  }
  if (absl::Status s = EnableTasks(); !s.ok()) return s;
  if (model_job_ == nullptr && Recovery() && checkpoints_ != nullptr) {
    coordinator_->HoldFinishedUntilSaved();
  }
  if (Recovery()) {
    // Reset first: a restarted chief numbers its runs above those the PS ran for the chief
    // before it, so that the old runs' calls are refused as those of another generation.
    if (absl::Status s = ResetPs(config_.rpc_timeout); !s.ok()) return s;
    if (absl::Status s = BeginGeneration(restore_); !s.ok()) return s;
    if (config_.restarted) coordinator_->CountChiefRestart();
  }
  if (absl::Status s = ConfigurePs(); !s.ok()) return s;
  if (model_job_ != nullptr) {
    if (absl::Status s = CreateModel(restore_); !s.ok()) return s;
  } else {
    // Client programs create their parameters themselves; they are restored as they do.
    {
      absl::MutexLock lock(&create_mu_);
      source_ = restore_;
    }
    coordinator_->SetCreateVariable([this](const VariableSpec& spec) { return Create(spec); });
    coordinator_->SetCreateTable([this](const TableDef& def) { return CreateTable(def); });
    started_.assign(workers_.size(), 0);
    for (size_t t = 0; t < configured_workers_.size() && t < started_.size(); ++t) {
      started_[t] = configured_workers_[t].incarnation();
    }
    coordinator_->AnnounceWorkers(configured_workers_);
  }
  if (checkpoints_ != nullptr && restore_ != nullptr) {
    checkpoints_->SetRestoredStep(restore_->global_step);
  }
  if (checkpoints_ != nullptr && Recovery()) {
    checkpoints_->SetLedgerSource([c = coordinator_] { return c->LedgerJson(); });
  }
  if (std::optional<std::string> r = coordinator_->AbortReason()) return Stopped(*r);
  coordinator_->SetReady();
  status_->SetState("running");
  const absl::Time start = absl::Now();
  JobResult result;
  result.mode = config_.mode;
  if (model_job_ != nullptr) {
    result.model = config_.model;
    if (absl::Status s = StartWorkers(&result.bad_lines_skipped); !s.ok()) return s;
  }
  absl::Time alive_since = start;
  while (true) {
    JobResult trained = result;
    if (absl::Status s = WaitForWorkers(start, alive_since, &trained); !s.ok()) return s;
    // A run after a final rollback that redid nothing keeps the counts of the run before.
    if (trained.steps > 0 || result.steps == 0) result = trained;
    JobResult finished = result;
    const absl::Status s = Finish(start, &finished);
    std::optional<std::string> reason = FinalRollback(s);
    if (!reason) {
      if (!s.ok()) return s;
      return finished;
    }
    std::vector<absl::Time> alive(workers_.size());
    if (absl::Status r = Rollback(*reason, &alive); !r.ok()) return r;
    alive_since = absl::Now();
  }
}

absl::Status Job::Finish(absl::Time start, JobResult* result) {
  if (checkpoints_ != nullptr) checkpoints_->SaveAndWait().IgnoreError();  // logged
  result->seconds = absl::ToDoubleSeconds(absl::Now() - start);
  result->examples_per_sec = result->examples / std::max(result->seconds, 1e-9);
  result->num_ps = static_cast<int>(ps_.size());
  result->num_workers = static_cast<int>(workers_.size());
  if (absl::Status s = CollectStats(result); !s.ok()) return s;
  if (Recovery()) LedgerTotals(result);
  if (model_job_ == nullptr) {
    WarnNotCreated();
    WarnIfUnbalanced();
    return absl::OkStatus();
  }
  // Every update touches every shard once: updates per shard are the global steps (the PS
  // count a table's updates too: then the workers' count stands).
  const int64_t shards = placer_->NumShards();
  if (shards > 0 && result->tables.empty()) {
    result->global_step = result->ps_stats.updates_applied() / shards;
  }
  status_->SetState("evaluating");
  if (config_.eval_delay_ms > 0) {
    spdlog::info("the evaluation waits {} ms (--eval_delay_ms)", config_.eval_delay_ms);
    std::this_thread::sleep_for(std::chrono::milliseconds(config_.eval_delay_ms));
  }
  return Evaluate(result);
}

std::optional<std::string> Job::FinalRollback(const absl::Status& finished) {
  // A PS restarted after the last task holds nothing: its pulls fail with NOT_FOUND, or while
  // it is down with UNAVAILABLE or a deadline. Any other error is the job's.
  if (!Recovery() || finished.ok() ||
      !(absl::IsNotFound(finished) || absl::IsUnavailable(finished) ||
        absl::IsDeadlineExceeded(finished))) {
    return std::nullopt;
  }
  spdlog::warn(
      "the job's end failed ({}); a restarted task is waited for up to {} "
      "(--task_timeout)",
      std::string(finished.message()), absl::FormatDuration(config_.task_timeout));
  const absl::Time deadline = absl::Now() + config_.task_timeout;
  while (absl::Now() < deadline && !coordinator_->AbortReason()) {
    if (std::optional<std::string> r = coordinator_->RollbackReason()) return r;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return std::nullopt;
}

namespace {

// How long a restarted chief asks a task that does not obey it yet (it registers again within
// a second of the chief's restart, and then does) to stop.
constexpr absl::Duration kRestartedChiefPatience = absl::Seconds(10);

// Tells every task to stop, in parallel, each call with a short deadline. A task that refuses
// the chief (PERMISSION_DENIED: it has not learnt of this chief yet) is asked again until
// `patience` has passed; zero: once.
void TellTasksToStop(const std::vector<std::unique_ptr<ParameterServerService::Stub>>& ps,
                     const std::vector<std::unique_ptr<WorkerService::Stub>>& workers,
                     const ShutdownRequest& req, absl::Duration patience) {
  const absl::Time until = absl::Now() + patience;
  auto shutdown = [&](auto* stub) {
    for (;;) {
      ShutdownResponse resp;
      const grpc::Status s = stub->Shutdown(ContextWithTimeout(absl::Seconds(3)).get(), req, &resp);
      if (s.error_code() != grpc::StatusCode::PERMISSION_DENIED || absl::Now() >= until) return;
      absl::SleepFor(absl::Milliseconds(200));
    }
  };
  std::vector<std::thread> threads;
  for (auto& stub : ps) threads.emplace_back([&, s = stub.get()] { shutdown(s); });
  for (auto& stub : workers) threads.emplace_back([&, s = stub.get()] { shutdown(s); });
  for (auto& t : threads) t.join();
}

}  // namespace

void Job::ShutdownTasks(const std::string& reason, bool job_succeeded) {
  ShutdownRequest req;
  *req.mutable_sender() = Chief();
  req.set_reason(reason.substr(0, kMaxTextBytes));
  req.set_job_succeeded(job_succeeded);
  TellTasksToStop(ps_, workers_, req, absl::ZeroDuration());
}

namespace {

// The running jobs of this process, for RequestJobStop.
struct StopRegistry {
  absl::Mutex mu;
  std::optional<std::string> reason ABSL_GUARDED_BY(mu);
  std::set<Coordinator*> running ABSL_GUARDED_BY(mu);
};
StopRegistry& Registry() {
  static StopRegistry* const registry = new StopRegistry;  // never destroyed: used at exit
  return *registry;
}

// Makes `c` reachable by RequestJobStop while it lives.
class StopRegistration {
 public:
  explicit StopRegistration(Coordinator* c) : c_(c) {
    StopRegistry& r = Registry();
    absl::MutexLock lock(&r.mu);
    r.running.insert(c_);
    if (r.reason) c_->Abort(*r.reason);
  }
  ~StopRegistration() {
    StopRegistry& r = Registry();
    absl::MutexLock lock(&r.mu);
    r.running.erase(c_);
  }
  StopRegistration(const StopRegistration&) = delete;
  StopRegistration& operator=(const StopRegistration&) = delete;

 private:
  Coordinator* const c_;
};

absl::StatusOr<JobResult> RunJobSteps(const MasterOptions& options);

}  // namespace

void RequestJobStop(const std::string& reason) {
  StopRegistry& r = Registry();
  absl::MutexLock lock(&r.mu);
  if (!r.reason) r.reason = reason;
  for (Coordinator* c : r.running) c->Abort(*r.reason);
}

absl::StatusOr<JobResult> RunJob(const MasterOptions& options) {
  absl::StatusOr<JobResult> result = RunJobSteps(options);
  // A job that failed before its status was tracked (bad data, a bad flag) shows so too.
  if (!result.ok() && options.monitor != nullptr) {
    options.monitor->Update([&](JobStatus* s) {
      s->mode = options.job.mode;
      s->model = options.job.model;
      s->state = "failed";
      s->error = std::string(result.status().message());
    });
  }
  return result;
}

namespace {

// MasterService for `coordinator` on the chief's address.
absl::StatusOr<std::unique_ptr<grpc::Server>> ServeMaster(const MasterOptions& options,
                                                          Coordinator* coordinator,
                                                          std::unique_ptr<grpc::Service>* service) {
  *service = MakeMasterService(coordinator);
  return StartGrpcServer(options.listen_address, {service->get()});
}

// A chief restarted after the job had ended (`saved`: the result its predecessor saved before
// it told the tasks to stop). It serves MasterService, so that a task still running learns of
// this chief when it registers again and obeys it, tells every task to stop (a task that has
// exited is not there to answer), and reports the saved result with its own restart counted.
absl::StatusOr<JobResult> ReportFinishedJob(const MasterOptions& options,
                                            const std::string& saved) {
  spdlog::warn(
      "the job finished before this chief was restarted: its result is {}/result.json; telling "
      "every task to stop",
      options.job.checkpoint_dir);
  nlohmann::json j = nlohmann::json::parse(saved);  // an object: SavedJobResult checked it
  for (const char* key : {"chief_restarts", "failures_survived"}) {
    if (j.contains(key) && j[key].is_number_integer()) j[key] = j[key].get<int64_t>() + 1;
  }
  Coordinator coordinator(options.ps_addresses, static_cast<int>(options.worker_addresses.size()));
  coordinator.EndJob();
  std::unique_ptr<grpc::Service> service;
  absl::StatusOr<std::unique_ptr<grpc::Server>> server =
      ServeMaster(options, &coordinator, &service);
  if (!server.ok()) return server.status();
  ShutdownRequest req;
  *req.mutable_sender() = MakeSender("chief", 0);
  req.set_reason("job finished");
  req.set_job_succeeded(true);
  // Programs waiting in Client::Done hear it from the start.
  coordinator.RequestStop();
  TellTasksToStop(StubsFor<ParameterServerService>(options.ps_addresses),
                  StubsFor<WorkerService>(options.worker_addresses), req, kRestartedChiefPatience);
  (*server)->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  if (options.monitor != nullptr) {
    options.monitor->Update([&](JobStatus* s) {
      s->mode = options.job.mode;
      s->model = options.job.model;
      s->state = "succeeded";
    });
  }
  JobResult result;
  result.finished_before = j.dump();
  return result;
}

// How long the chief waits, at the end, for its client programs to ask whether the job ends.
constexpr absl::Duration kProgramsHearStop = absl::Seconds(10);

absl::StatusOr<JobResult> RunJobSteps(const MasterOptions& options) {
  const JobConfig& config = options.job;
  const int num_workers = static_cast<int>(options.worker_addresses.size());
  const int num_ps = static_cast<int>(options.ps_addresses.size());
  if (absl::Status s = config.ValidateFor(num_ps, num_workers); !s.ok()) return s;
  std::unique_ptr<CheckpointManager> checkpoints;
  std::unique_ptr<LoadedCheckpoint> restore;
  std::string finished;
  if (absl::Status s =
          OpenCheckpoints(config, options.ps_addresses, &checkpoints, &restore, &finished);
      !s.ok()) {
    return s;
  }
  if (!finished.empty()) return ReportFinishedJob(options, finished);
  std::unique_ptr<ModelJob> model_job;
  if (config.BuiltInModel()) {
    absl::StatusOr<std::unique_ptr<ModelJob>> prepared = ModelJob::Prepare(config, num_ps);
    if (!prepared.ok()) return prepared.status();
    model_job = *std::move(prepared);
  }
  absl::StatusOr<std::unique_ptr<VariablePlacer>> placer = VariablePlacer::Create(
      options.ps_addresses, config.partitioner, config.placement, config.rpc_timeout);
  if (!placer.ok()) return placer.status();
  TableCreator tables(options.ps_addresses, config.rpc_timeout);

  Coordinator coordinator(options.ps_addresses, num_workers);
  StopRegistration stoppable(&coordinator);
  coordinator.SetMode(config.mode);
  std::unique_ptr<grpc::Service> service;
  absl::StatusOr<std::unique_ptr<grpc::Server>> server =
      ServeMaster(options, &coordinator, &service);
  if (!server.ok()) return server.status();
  spdlog::info("chief listening on {}, waiting for {} ps and {} workers", options.listen_address,
               num_ps, num_workers);

  StatusTracker status(options.monitor, options, &coordinator, placer->get());
  Job job(options, &coordinator, model_job.get(), placer->get(), &tables, &status);
  job.SetCheckpoints(checkpoints.get(), restore.get());
  absl::StatusOr<JobResult> result;
  if (absl::Status s = coordinator.WaitForRegistration(config.register_timeout); !s.ok()) {
    result = s;
  } else {
    result = job.Run();
  }
  coordinator.EndJob();
  status.Finish(result.status());
  coordinator.RequestStop();
  // Saved before the tasks are told to stop: a chief restarted after that reports it.
  if (result.ok() && checkpoints != nullptr) {
    if (absl::Status s = SaveJobResult(config.checkpoint_dir, result->ToJson()); !s.ok()) {
      spdlog::warn("the job's result is not saved beside its checkpoints: {}",
                   std::string(s.message()));
    }
  }
  job.ShutdownTasks(result.ok() ? "job finished" : std::string(result.status().message()),
                    result.ok());
  // Client programs that reported done wait to hear that the job ends (Client::Done).
  if (!config.BuiltInModel()) coordinator.WaitUntilToldStop(kProgramsHearStop);
  if (config.end_delay_ms > 0) {
    spdlog::info("the chief reports the result in {} ms (--end_delay_ms)", config.end_delay_ms);
    std::this_thread::sleep_for(std::chrono::milliseconds(config.end_delay_ms));
  }
  // A task killed after the result was made comes back while the others are told to stop.
  if (result.ok()) result->restarts_after_end = coordinator.restarts_after_end();
  (*server)->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  return result;
}

}  // namespace
}  // namespace pstrain
