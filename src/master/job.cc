// RunJob: the chief's side of one training job, from registration to shutdown.
#include <algorithm>
#include <cstdio>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/ps_client.h"
#include "common/limits.h"
#include "common/rpc.h"
#include "common/tensor.h"
#include "data/data.h"
#include "master/checkpoints.h"
#include "master/coordinator.h"
#include "master/job_status.h"
#include "master/master.h"
#include "master/model_job.h"
#include "master/progress.h"
#include "master/specs.h"
#include "master/tables.h"
#include "master/variables.h"
#include "model/model.h"
#include "ps.grpc.pb.h"
#include "spdlog/spdlog.h"
#include "worker.grpc.pb.h"

namespace pstrain {
namespace {

// A gap this long between two passes of the job loop means the chief itself did not run
// (SIGSTOP, a starved machine): that time is not counted as silence of the workers.
constexpr absl::Duration kLoopStall = absl::Seconds(5);

absl::Status Stopped(const std::string& reason) {
  return absl::CancelledError(absl::StrCat("stopped by ", reason));
}

// Calls `rpc` with a fresh context until it succeeds, fails for good, or `timeout` has passed:
// for calls to a peer that may not be ready yet, and that are safe to repeat.
template <typename Rpc>
absl::Status CallWithRetry(absl::Duration timeout, const std::string& what, const std::string& task,
                           Rpc rpc) {
  const absl::Time deadline = absl::Now() + timeout;
  return RetryUntil(timeout, absl::StrCat(what, " at ", task), [&] {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(deadline));
    return FromGrpcStatus(rpc(&ctx), what, task);
  });
}

class Job {
 public:
  Job(const MasterOptions& options, Coordinator* coordinator, ModelJob* model_job,
      VariablePlacer* placer, TableCreator* tables, StatusTracker* status)
      : config_(options.job),
        coordinator_(coordinator),
        model_job_(model_job),
        placer_(placer),
        tables_(tables),
        status_(status),
        print_progress_(options.print_progress),
        ps_addresses_(options.ps_addresses) {
    for (const std::string& a : options.ps_addresses) {
      ps_.push_back(ParameterServerService::NewStub(MakeChannel(a)));
    }
    for (const std::string& a : options.worker_addresses) {
      workers_.push_back(WorkerService::NewStub(MakeChannel(a)));
    }
  }

  absl::StatusOr<JobResult> Run() {
    if (absl::Status s = ConfigurePs(); !s.ok()) return s;
    if (model_job_ != nullptr) {
      SetScheduleLength();
      absl::Status s =
          model_job_->CreateParameters(config_.optimizer, placer_, tables_, Restorer());
      if (!s.ok()) return s;
      SetUpCheckpoints();
      WarnIfUnbalanced();
    } else {
      coordinator_->SetCreateVariable([this](const VariableSpec& spec) { return Create(spec); });
      coordinator_->SetCreateTable(
          [this](const TableDef& def) { return tables_->GetOrCreate(def); });
    }
    if (std::optional<std::string> r = coordinator_->AbortReason()) return Stopped(*r);
    coordinator_->SetReady();
    status_->SetState("running");
    const absl::Time start = absl::Now();
    JobResult result;
    result.mode = config_.mode;
    if (model_job_ != nullptr) {
      result.model = config_.model;
      if (absl::Status s = EnableTasks(); !s.ok()) return s;
      if (absl::Status s = StartWorkers(&result.bad_lines_skipped); !s.ok()) return s;
    }
    if (absl::Status s = WaitForWorkers(start, &result); !s.ok()) return s;
    if (config_.task_rows > 0) LedgerTotals(&result);
    if (checkpoints_ != nullptr) checkpoints_->SaveAndWait().IgnoreError();  // logged
    result.seconds = absl::ToDoubleSeconds(absl::Now() - start);
    result.examples_per_sec = result.examples / std::max(result.seconds, 1e-9);
    result.num_ps = static_cast<int>(ps_.size());
    result.num_workers = static_cast<int>(workers_.size());
    if (absl::Status s = CollectStats(&result); !s.ok()) return s;
    if (model_job_ != nullptr) {
      // Every update touches every shard once: updates per shard are the global steps (the
      // PS count a table's updates too: then the workers' count stands).
      const int64_t shards = placer_->NumShards();
      if (shards > 0 && result.tables.empty()) {
        result.global_step = result.ps_stats.updates_applied() / shards;
      }
      status_->SetState("evaluating");
      if (absl::Status s = Evaluate(&result); !s.ok()) return s;
    } else {
      WarnIfUnbalanced();
    }
    return result;
  }

  // Best effort: every task is told to stop, in parallel, each with a short deadline.
  void ShutdownTasks(const std::string& reason, bool job_succeeded) {
    std::vector<std::thread> threads;
    ShutdownRequest req;
    *req.mutable_sender() = MakeSender("chief", 0);
    req.set_reason(reason.substr(0, kMaxTextBytes));
    req.set_job_succeeded(job_succeeded);
    auto shutdown = [&req](auto* stub) {
      ShutdownResponse resp;
      stub->Shutdown(ContextWithTimeout(absl::Seconds(3)).get(), req, &resp);
    };
    for (auto& stub : ps_) threads.emplace_back([&, s = stub.get()] { shutdown(s); });
    for (auto& stub : workers_) threads.emplace_back([&, s = stub.get()] { shutdown(s); });
    for (auto& t : threads) t.join();
  }

  // Checkpoints (master/checkpoints.h): saved through `manager`, restored from `restore`.
  void SetCheckpoints(CheckpointManager* manager, const LoadedCheckpoint* restore) {
    checkpoints_ = manager;
    restore_ = restore;
  }

 private:
  ModelJob::RestoreFn Restorer() {
    if (restore_ == nullptr) return nullptr;
    return [this](const auto& vars, const auto& defs, std::vector<Placement>* placement) {
      if (absl::Status s = CheckSignature(*restore_, SignatureOf(model_job_->model())); !s.ok())
        return s;
      return RestoreParameters(*restore_, vars, defs, placer_, tables_, ps_addresses_,
                               config_.rpc_timeout, placement);
    };
  }
  void SetUpCheckpoints() {
    if (checkpoints_ == nullptr) return;
    TrainingSpec spec;
    model_job_->FillSpec(&spec);
    checkpoints_->SetModel({spec.placement().begin(), spec.placement().end()},
                           SignatureOf(model_job_->model()));
    if (restore_ != nullptr) checkpoints_->SetRestoredStep(restore_->global_step);
  }

  absl::Status ConfigurePs() {
    ConfigureRequest req;
    *req.mutable_sender() = MakeSender("chief", 0);
    ConsistencyConfig* c = req.mutable_consistency();
    c->set_mode(config_.mode);
    c->set_num_workers(static_cast<int>(workers_.size()));
    const int replicas = config_.replicas_to_aggregate > 0 ? config_.replicas_to_aggregate
                                                           : static_cast<int>(workers_.size());
    c->set_replicas_to_aggregate(replicas);
    c->set_staleness(config_.staleness);
    for (const Sender& w : coordinator_->Workers()) *req.add_workers() = w;
    req.set_wait_timeout_s(absl::ToDoubleSeconds(config_.task_timeout));
    for (size_t t = 0; t < ps_.size(); ++t) {
      ConfigureResponse resp;
      absl::Status s = CallWithRetry(
          config_.rpc_timeout, "Configure", TaskName("ps", t),
          [&](grpc::ClientContext* ctx) { return ps_[t]->Configure(ctx, req, &resp); });
      if (!s.ok()) return s;
    }
    spdlog::info("mode {}{}", config_.mode,
                 config_.mode == "sync"
                     ? absl::StrCat(": ", replicas, " of ", workers_.size(), " gradients per step")
                 : config_.mode == "ssp" ? absl::StrCat(": staleness ", config_.staleness)
                                         : std::string());
    return absl::OkStatus();
  }

  // The job's length in global steps. Sync: one epoch is as many steps as the largest data shard
  // needs, each step one update. Async and ssp: every push of every worker is an update.
  int64_t SyncSteps() const {
    const int64_t workers = static_cast<int64_t>(workers_.size());
    const int64_t b = config_.batch_size;
    return config_.epochs * (((model_job_->train_records() + workers - 1) / workers + b - 1) / b);
  }
  int64_t GlobalSteps() const {
    if (config_.mode == "sync") return SyncSteps();
    const int64_t workers = static_cast<int64_t>(workers_.size());
    const int64_t n = model_job_->train_records(), b = config_.batch_size;
    int64_t steps = 0;
    for (int64_t w = 0; w < workers; ++w) {
      const int64_t shard = n * (w + 1) / workers - n * w / workers;
      steps += config_.epochs * ((shard + b - 1) / b);
    }
    return steps;
  }

  // A cosine schedule without --lr_total_steps ends with the job.
  void SetScheduleLength() {
    LearningRateSchedule* s = config_.optimizer.mutable_schedule();
    if (s->kind() == "cosine" && s->total_steps() == 0) {
      s->set_total_steps(GlobalSteps());
      spdlog::info("cosine learning-rate schedule over {} global steps", s->total_steps());
    }
  }

  // CreateVariable of a client program: the spec is checked before anything is drawn or sent.
  absl::StatusOr<Placement> Create(const VariableSpec& spec) {
    absl::StatusOr<NewVariable> var = VariableFromSpec(spec, config_.optimizer);
    if (!var.ok()) return var.status();
    return placer_->GetOrCreate(*var, spec.partitioner());
  }

  void WarnIfUnbalanced() {
    if (std::optional<std::string> w = placer_->Imbalance()) spdlog::warn("{}", *w);
  }

  // The task queue (docs/recovery.md), with --task_rows.
  absl::Status EnableTasks() {
    if (config_.task_rows <= 0) return absl::OkStatus();
    return coordinator_->EnableTasks({model_job_->train_records(), config_.task_rows,
                                      config_.epochs, static_cast<int>(workers_.size())},
                                     absl::Seconds(config_.heartbeat_secs),
                                     absl::Seconds(config_.heartbeat_timeout_secs));
  }
  void LedgerTotals(JobResult* result) const {
    const nlohmann::json l = coordinator_->LedgerJson();
    result->task_queue = true;
    result->tasks = l["tasks"].get<int64_t>();
    result->tasks_applied = l["applied"].get<int64_t>();
    result->tasks_redone = l["redone"].get<int64_t>();
    result->workers_declared_dead = l["workers_declared_dead"].get<int64_t>();
    result->ledger_check = coordinator_->LedgerCheck();
  }

  // Task queue: a worker declared dead is not waited for; one registered by a new incarnation (a
  // restarted process) is announced to every PS in place of the old one and started.
  absl::Status StartReplacements(std::vector<absl::Time>* alive, absl::Time now) {
    const std::vector<Sender> workers = coordinator_->Workers();
    const std::vector<bool> live = coordinator_->LiveWorkers();
    for (size_t t = 0; t < workers.size(); ++t) {
      if (!live[t]) (*alive)[t] = now;
      if (!live[t] || workers[t].incarnation() == started_[t]) continue;
      ReplaceWorkerRequest req;
      *req.mutable_sender() = MakeSender("chief", 0);
      *req.mutable_worker() = workers[t];
      for (size_t p = 0; p < ps_.size(); ++p) {
        ReplaceWorkerResponse resp;
        absl::Status s = CallWithRetry(
            config_.rpc_timeout, "ReplaceWorker", TaskName("ps", p),
            [&](grpc::ClientContext* ctx) { return ps_[p]->ReplaceWorker(ctx, req, &resp); });
        if (!s.ok()) return s;
      }
      StartTrainingResponse resp;
      if (absl::Status s = StartWorker(t, &resp); !s.ok()) return s;
      started_[t] = workers[t].incarnation();
      (*alive)[t] = now;
      spdlog::info("{} replaced by incarnation {}, started on the task queue",
                   TaskName("worker", t), workers[t].incarnation());
    }
    return absl::OkStatus();
  }

  // Starts every worker on its shard (with the task queue: on the queue); *bad_lines_skipped
  // sums the data lines they skipped.
  absl::Status StartWorkers(int64_t* bad_lines_skipped) {
    TrainingSpec& spec = spec_;
    model_job_->FillSpec(&spec);
    spec.set_num_shards(static_cast<int>(workers_.size()));
    spec.set_batch_size(config_.batch_size);
    spec.set_epochs(config_.epochs);
    spec.set_report_every(config_.report_every);
    spec.set_rpc_timeout_s(absl::ToDoubleSeconds(config_.task_timeout));
    spec.set_mode(config_.mode);
    if (config_.mode == "sync") spec.set_total_steps(SyncSteps());
    spec.set_stop_on_nonfinite(config_.stop_on_nonfinite);
    if (config_.task_rows > 0) {
      spec.set_num_shards(1);
      spec.set_task_queue(true);
      spec.set_heartbeat_interval_s(config_.heartbeat_secs);
    }
    const std::vector<Sender> registered = coordinator_->Workers();
    for (size_t t = 0; t < workers_.size(); ++t) {
      started_.push_back(registered[t].incarnation());
      StartTrainingResponse resp;
      if (absl::Status s = StartWorker(t, &resp); !s.ok()) return s;
      *bad_lines_skipped += resp.bad_lines_skipped();
    }
    return absl::OkStatus();
  }

  // Starts worker `t` on spec_. Retried: a worker repeats nothing for a StartTraining it
  // already took from this chief.
  absl::Status StartWorker(size_t t, StartTrainingResponse* resp) {
    StartTrainingRequest req;
    *req.mutable_sender() = MakeSender("chief", 0);
    *req.mutable_spec() = spec_;
    req.mutable_spec()->set_shard_index(spec_.task_queue() ? 0 : static_cast<int>(t));
    req.mutable_spec()->set_seed(config_.seed * 1000003 + t);
    if (static_cast<int>(t) == config_.slow_worker) {
      req.mutable_spec()->set_step_delay_ms(config_.slow_worker_delay_ms);
    }
    return CallWithRetry(
        config_.rpc_timeout, "StartTraining", TaskName("worker", t),
        [&](grpc::ClientContext* ctx) { return workers_[t]->StartTraining(ctx, req, resp); });
  }

  // The job's length in global steps, if the chief knows it.
  int64_t TotalSteps() const { return model_job_ != nullptr ? GlobalSteps() : 0; }

  absl::Status WaitForWorkers(absl::Time start, JobResult* result) {
    absl::Time last_line = absl::InfinitePast();
    absl::Time last_pass = absl::Now();
    // Per worker: the latest time it is known not to be silent (started, or seen at a barrier,
    // or the chief itself just resumed).
    std::vector<absl::Time> alive(workers_.size(), start);
    result->total_steps = TotalSteps();
    while (true) {
      const std::vector<WorkerProgress> progress = coordinator_->WaitForReport(absl::Seconds(1));
      const absl::Time now = absl::Now();
      if (std::optional<std::string> r = coordinator_->AbortReason()) return Stopped(*r);
      if (now - last_pass > kLoopStall) {
        spdlog::warn("the chief did not run for {}; worker silence is counted from now",
                     WholeSeconds(now - last_pass));
        std::fill(alive.begin(), alive.end(), now);
      }
      last_pass = now;
      for (size_t t = 0; t < progress.size(); ++t) {
        if (!progress[t].barrier.empty()) alive[t] = now;
      }
      if (config_.task_rows > 0) {
        if (absl::Status s = StartReplacements(&alive, now); !s.ok()) return s;
      }
      if (absl::Status s = CheckWorkers(progress, alive, now, config_.task_timeout); !s.ok()) {
        return s;
      }
      const bool all_done = Summarize(progress, result) || TasksDone(progress);
      if (checkpoints_ != nullptr && !all_done) checkpoints_->MaybeSave(result->global_step);
      const ProgressView view =
          ViewOf(progress, *result, model_job_ != nullptr ? config_.epochs : 0, now - start);
      status_->Progress(view);
      if (all_done || now - last_line >= absl::Milliseconds(500)) {
        // One line per update; the launcher shows these in place.
        if (print_progress_) {
          print_progress_(ProgressLine(view));
        } else {
          std::fprintf(stderr, "%s\n", ProgressLine(view).c_str());
          std::fflush(stderr);
        }
        last_line = now;
      }
      if (all_done) return absl::OkStatus();
    }
  }

  // Task queue: every task applied and every worker done or declared dead.
  bool TasksDone(const std::vector<WorkerProgress>& progress) const {
    if (config_.task_rows <= 0 || !coordinator_->TasksFinished()) return false;
    const std::vector<bool> live = coordinator_->LiveWorkers();
    for (size_t t = 0; t < progress.size(); ++t) {
      if (live[t] && !progress[t].done) return false;
    }
    return true;
  }

  // Sums the reports into *result; true once every worker is done.
  bool Summarize(const std::vector<WorkerProgress>& progress, JobResult* result) const {
    bool all_done = true;
    double loss = 0;  // the mean of the workers that reported a step
    int reporting = 0;
    int64_t max_steps = 0;
    result->steps = result->examples = result->nonfinite_skipped = result->worker_pushes = 0;
    result->worker_steps.clear();
    result->worker_stale_steps.clear();
    for (const WorkerProgress& p : progress) {
      all_done = all_done && p.done;
      if (p.steps > 0) {
        loss += p.loss;
        ++reporting;
      }
      result->steps += p.steps;
      result->examples += p.examples;
      result->nonfinite_skipped += p.nonfinite_skipped;
      result->worker_pushes += std::max<int64_t>(p.steps - p.nonfinite_skipped, 0);
      result->worker_steps.push_back(p.steps);
      result->worker_stale_steps.push_back(p.stale_dropped);
      max_steps = std::max(max_steps, p.steps);
    }
    result->final_loss = reporting > 0 ? loss / reporting : 0;
    // Sync: every worker steps with the model, so the fastest is at the global step. Async and
    // ssp: every push is an update.
    result->global_step = config_.mode == "sync" ? max_steps : result->worker_pushes;
    return all_done;
  }

  // Every PS's counters: sums, the largest clock gap, and the tables' counters.
  absl::Status CollectStats(JobResult* result) {
    PsClient client(ps_addresses_, {}, MakeSender("chief", 0), config_.rpc_timeout);
    absl::StatusOr<std::vector<StatsResponse>> stats;
    absl::Status s = RetryUntil(config_.rpc_timeout, "Stats of every ps", [&] {
      stats = client.Stats();
      return stats.status();
    });
    if (!s.ok()) return s;
    StatsResponse* total = &result->ps_stats;
    for (const StatsResponse& s : *stats) {
      total->set_pushes_applied(total->pushes_applied() + s.pushes_applied());
      total->set_updates_applied(total->updates_applied() + s.updates_applied());
      total->set_stale_dropped(total->stale_dropped() + s.stale_dropped());
      total->set_nonfinite_rejected(total->nonfinite_rejected() + s.nonfinite_rejected());
      total->set_max_clock_gap(std::max(total->max_clock_gap(), s.max_clock_gap()));
      total->set_pulls_waited(total->pulls_waited() + s.pulls_waited());
    }
    result->tables = SumTableStats(*stats);
    return absl::OkStatus();
  }

  // The held-out metrics of the model as trained.
  absl::Status Evaluate(JobResult* result) {
    absl::StatusOr<Metrics> m = model_job_->Evaluate(ps_addresses_);
    if (!m.ok()) return m.status();
    const bool classification = model_job_->model().task() == ModelTask::kClassification;
    result->classification = classification;
    result->binary = !classification;
    result->test_accuracy = m->accuracy;
    result->auc = m->auc;
    result->log_loss = m->log_loss;
    result->test_examples = m->examples;
    result->bad_lines_skipped += model_job_->test_bad_lines_skipped();
    return absl::OkStatus();
  }

  JobConfig config_;  // a copy: Run fills in what the flags left to the job
  Coordinator* const coordinator_;
  ModelJob* const model_job_;  // null for external programs
  VariablePlacer* const placer_;
  TableCreator* const tables_;
  StatusTracker* const status_;
  const std::function<void(const std::string&)> print_progress_;
  const std::vector<std::string> ps_addresses_;
  std::vector<std::unique_ptr<ParameterServerService::Stub>> ps_;
  std::vector<std::unique_ptr<WorkerService::Stub>> workers_;
  CheckpointManager* checkpoints_ = nullptr;
  const LoadedCheckpoint* restore_ = nullptr;
  TrainingSpec spec_;              // what StartWorkers sent, for replacements
  std::vector<uint64_t> started_;  // by worker: the incarnation started on spec_
};

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

absl::StatusOr<JobResult> RunJobSteps(const MasterOptions& options) {
  const JobConfig& config = options.job;
  const int num_workers = static_cast<int>(options.worker_addresses.size());
  const int num_ps = static_cast<int>(options.ps_addresses.size());
  if (absl::Status s = config.ValidateFor(num_ps, num_workers); !s.ok()) return s;
  std::unique_ptr<CheckpointManager> checkpoints;
  std::unique_ptr<LoadedCheckpoint> restore;
  if (absl::Status s = OpenCheckpoints(config, options.ps_addresses, &checkpoints, &restore);
      !s.ok()) {
    return s;
  }
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
  std::unique_ptr<grpc::Service> service = MakeMasterService(&coordinator);
  absl::StatusOr<std::unique_ptr<grpc::Server>> server =
      StartGrpcServer(options.listen_address, {service.get()});
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
  status.Finish(result.status());
  coordinator.RequestStop();
  job.ShutdownTasks(result.ok() ? "job finished" : std::string(result.status().message()),
                    result.ok());
  (*server)->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  return result;
}

}  // namespace
}  // namespace pstrain
