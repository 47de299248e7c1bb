// RunJob: the chief's side of one training job, from registration to shutdown.
#include <cstdio>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/ps_client.h"
#include "common/rpc.h"
#include "common/tensor.h"
#include "data/data.h"
#include "master/coordinator.h"
#include "master/master.h"
#include "master/variables.h"
#include "model/model.h"
#include "ps.grpc.pb.h"
#include "spdlog/spdlog.h"
#include "worker.grpc.pb.h"

namespace pstrain {
namespace {

class Job {
 public:
  Job(const MasterOptions& options, Coordinator* coordinator, const Dataset* test,
      VariablePlacer* placer)
      : config_(options.job),
        coordinator_(coordinator),
        test_(test),
        placer_(placer),
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
    std::vector<Placement> placement;
    std::unique_ptr<Mlp> model;
    if (config_.model == "mlp") {
      if (absl::Status s = PrepareMlpJob(); !s.ok()) return s;
      model = std::make_unique<Mlp>(Widths());
      absl::StatusOr<std::vector<Placement>> p = CreateMlpVariables(*model);
      if (!p.ok()) return p.status();
      placement = *std::move(p);
    } else {
      coordinator_->SetCreateVariable([this](const VariableSpec& spec) { return Create(spec); });
    }
    coordinator_->SetReady();
    const absl::Time start = absl::Now();
    if (model != nullptr) {
      if (absl::Status s = StartWorkers(*model, placement); !s.ok()) return s;
    }
    JobResult result;
    result.mode = config_.mode;
    if (absl::Status s = WaitForWorkers(start, &result); !s.ok()) return s;
    result.seconds = absl::ToDoubleSeconds(absl::Now() - start);
    result.examples_per_sec = result.examples / std::max(result.seconds, 1e-9);
    result.num_ps = static_cast<int>(ps_.size());
    result.num_workers = static_cast<int>(workers_.size());
    if (absl::Status s = CollectStats(&result.ps_stats); !s.ok()) return s;
    if (model != nullptr) {
      absl::StatusOr<double> acc = Evaluate(*model, placement);
      if (!acc.ok()) return acc.status();
      result.test_accuracy = *acc;
    }
    return result;
  }

  // Best effort: every task is told to stop, in parallel, each with a short deadline.
  void ShutdownTasks(const std::string& reason) {
    std::vector<std::thread> threads;
    ShutdownRequest req;
    *req.mutable_sender() = MakeSender("chief", 0);
    req.set_reason(reason);
    auto shutdown = [&req](auto* stub) {
      ShutdownResponse resp;
      stub->Shutdown(ContextWithTimeout(absl::Seconds(3)).get(), req, &resp);
    };
    for (auto& stub : ps_) threads.emplace_back([&, s = stub.get()] { shutdown(s); });
    for (auto& stub : workers_) threads.emplace_back([&, s = stub.get()] { shutdown(s); });
    for (auto& t : threads) t.join();
  }

 private:
  std::vector<int> Widths() const {
    std::vector<int> w = {static_cast<int>(test_->features())};
    w.insert(w.end(), config_.hidden.begin(), config_.hidden.end());
    w.push_back(test_->num_classes);
    return w;
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
      grpc::Status s = ps_[t]->Configure(ContextWithTimeout(config_.rpc_timeout).get(), req, &resp);
      if (!s.ok()) return FromGrpcStatus(s, "Configure", TaskName("ps", t));
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
    return config_.epochs * (((train_examples_ + workers - 1) / workers + b - 1) / b);
  }
  int64_t GlobalSteps() const {
    if (config_.mode == "sync") return SyncSteps();
    const int64_t workers = static_cast<int64_t>(workers_.size());
    const int64_t n = train_examples_, b = config_.batch_size;
    int64_t steps = 0;
    for (int64_t w = 0; w < workers; ++w) {
      const int64_t shard = n * (w + 1) / workers - n * w / workers;
      steps += config_.epochs * ((shard + b - 1) / b);
    }
    return steps;
  }

  // Counts the training set; a cosine schedule without --lr_total_steps then ends with the job.
  absl::Status PrepareMlpJob() {
    absl::StatusOr<int64_t> n = CountMnist(config_.data_dir, "train");
    if (!n.ok()) return n.status();
    train_examples_ = *n;
    LearningRateSchedule* s = config_.optimizer.mutable_schedule();
    if (s->kind() == "cosine" && s->total_steps() == 0) {
      s->set_total_steps(GlobalSteps());
      spdlog::info("cosine learning-rate schedule over {} global steps", s->total_steps());
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<Placement>> CreateMlpVariables(const Mlp& model) {
    std::vector<Tensor> init = model.Initialize(config_.seed);
    std::vector<NewVariable> vars;
    for (size_t i = 0; i < init.size(); ++i) {
      vars.push_back({model.params()[i].name, std::move(init[i]), config_.optimizer});
    }
    return placer_->CreateAll(vars);
  }

  absl::StatusOr<Placement> Create(const VariableSpec& spec) {
    Initializer init;
    const InitializerDef& d = spec.initializer();
    init.kind = d.kind().empty() ? "zeros" : d.kind();
    init.value = d.value();
    init.low = d.low();
    init.high = d.high();
    init.mean = d.mean();
    init.stddev = d.stddev();
    init.seed = d.seed();
    absl::StatusOr<Tensor> value =
        MakeInitialValue(std::vector<int64_t>(spec.shape().begin(), spec.shape().end()), init);
    if (!value.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("variable ", spec.name(), ": ", value.status().message()));
    }
    OptimizerConfig opt = spec.has_optimizer() ? spec.optimizer() : config_.optimizer;
    if (opt.name().empty()) opt = config_.optimizer;
    return placer_->GetOrCreate({spec.name(), *std::move(value), opt}, spec.partitioner());
  }

  absl::Status StartWorkers(const Mlp& model, const std::vector<Placement>& placement) {
    TrainingSpec spec;
    spec.set_data_dir(config_.data_dir);
    for (int w : model.widths()) spec.add_layers(w);
    for (const Placement& p : placement) *spec.add_placement() = p;
    spec.set_num_shards(static_cast<int>(workers_.size()));
    spec.set_batch_size(config_.batch_size);
    spec.set_epochs(config_.epochs);
    spec.set_report_every(config_.report_every);
    spec.set_rpc_timeout_s(absl::ToDoubleSeconds(config_.task_timeout));
    spec.set_mode(config_.mode);
    if (config_.mode == "sync") spec.set_total_steps(SyncSteps());
    spec.set_stop_on_nonfinite(config_.stop_on_nonfinite);
    for (size_t t = 0; t < workers_.size(); ++t) {
      StartTrainingRequest req;
      *req.mutable_sender() = MakeSender("chief", 0);
      *req.mutable_spec() = spec;
      req.mutable_spec()->set_shard_index(static_cast<int>(t));
      req.mutable_spec()->set_seed(config_.seed * 1000003 + t);
      if (static_cast<int>(t) == config_.slow_worker) {
        req.mutable_spec()->set_step_delay_ms(config_.slow_worker_delay_ms);
      }
      StartTrainingResponse resp;
      grpc::Status s =
          workers_[t]->StartTraining(ContextWithTimeout(config_.rpc_timeout).get(), req, &resp);
      if (!s.ok()) return FromGrpcStatus(s, "StartTraining", TaskName("worker", t));
    }
    return absl::OkStatus();
  }

  absl::Status WaitForWorkers(absl::Time start, JobResult* result) {
    absl::Time last_line = absl::InfinitePast();
    while (true) {
      const std::vector<WorkerProgress> progress = coordinator_->WaitForReport(absl::Seconds(1));
      const absl::Time now = absl::Now();
      bool all_done = true;
      int epoch = config_.epochs;
      double loss = 0;
      result->steps = result->examples = result->nonfinite_skipped = 0;
      result->worker_steps.clear();
      result->worker_stale_steps.clear();
      for (size_t t = 0; t < progress.size(); ++t) {
        const WorkerProgress& p = progress[t];
        if (!p.error.empty()) {
          return absl::AbortedError(absl::StrCat(TaskName("worker", t), " failed: ", p.error));
        }
        const absl::Time seen = std::max(p.last_report, start);
        if (!p.done && now - seen > config_.task_timeout) {
          return absl::DeadlineExceededError(
              absl::StrCat(TaskName("worker", t), " sent no progress for ",
                           absl::FormatDuration(config_.task_timeout)));
        }
        all_done = all_done && p.done;
        epoch = std::min(epoch, p.done ? config_.epochs : p.epoch + 1);
        loss += p.loss / progress.size();
        result->steps += p.steps;
        result->examples += p.examples;
        result->nonfinite_skipped += p.nonfinite_skipped;
        result->worker_steps.push_back(p.steps);
        result->worker_stale_steps.push_back(p.stale_dropped);
      }
      result->final_loss = loss;
      if (all_done || now - last_line >= absl::Milliseconds(500)) {
        const double secs = std::max(absl::ToDoubleSeconds(now - start), 1e-9);
        // One line per update; the launcher shows these in place.
        const std::string where =
            config_.model == "mlp" ? absl::StrCat("epoch ", epoch, "/", config_.epochs, " ") : "";
        std::fprintf(stderr, "progress %sstep %lld loss %.4f examples/s %.0f\n", where.c_str(),
                     static_cast<long long>(result->steps), loss, result->examples / secs);
        std::fflush(stderr);
        last_line = now;
      }
      if (all_done) return absl::OkStatus();
    }
  }

  // Every PS's counters: sums, and the largest clock gap.
  absl::Status CollectStats(StatsResponse* total) {
    PsClient client(ps_addresses_, {}, MakeSender("chief", 0), config_.rpc_timeout);
    absl::StatusOr<std::vector<StatsResponse>> stats = client.Stats();
    if (!stats.ok()) return stats.status();
    for (const StatsResponse& s : *stats) {
      total->set_pushes_applied(total->pushes_applied() + s.pushes_applied());
      total->set_updates_applied(total->updates_applied() + s.updates_applied());
      total->set_stale_dropped(total->stale_dropped() + s.stale_dropped());
      total->set_nonfinite_rejected(total->nonfinite_rejected() + s.nonfinite_rejected());
      total->set_max_clock_gap(std::max(total->max_clock_gap(), s.max_clock_gap()));
      total->set_pulls_waited(total->pulls_waited() + s.pulls_waited());
    }
    return absl::OkStatus();
  }

  absl::StatusOr<double> Evaluate(Mlp& model, const std::vector<Placement>& placement) {
    std::vector<VariableRef> vars;
    for (size_t i = 0; i < placement.size(); ++i) {
      absl::StatusOr<VariableRef> v =
          ToVariableRef(placement[i], model.params()[i].name, model.params()[i].shape,
                        static_cast<int>(ps_addresses_.size()));
      if (!v.ok()) return v.status();
      vars.push_back(*std::move(v));
    }
    PsClient client(ps_addresses_, std::move(vars), MakeSender("chief", 0), config_.rpc_timeout);
    std::vector<const float*> values;
    if (absl::Status s = client.Pull(&values); !s.ok()) return s;
    return model.Accuracy(values, test_->images, test_->labels.data());
  }

  JobConfig config_;            // a copy: Run fills in what the flags left to the job
  int64_t train_examples_ = 0;  // mlp jobs
  Coordinator* const coordinator_;
  const Dataset* const test_;
  VariablePlacer* const placer_;
  const std::vector<std::string> ps_addresses_;
  std::vector<std::unique_ptr<ParameterServerService::Stub>> ps_;
  std::vector<std::unique_ptr<WorkerService::Stub>> workers_;
};

}  // namespace

absl::StatusOr<JobResult> RunJob(const MasterOptions& options) {
  const JobConfig& config = options.job;
  if (absl::Status s = config.Validate(); !s.ok()) return s;
  const int num_workers = static_cast<int>(options.worker_addresses.size());
  if (config.replicas_to_aggregate > num_workers) {
    return absl::InvalidArgumentError(absl::StrCat("replicas_to_aggregate ",
                                                   config.replicas_to_aggregate, " exceeds the ",
                                                   num_workers, " workers"));
  }
  Dataset test;
  if (config.model == "mlp") {
    absl::StatusOr<Dataset> loaded = LoadMnist(config.data_dir, "t10k");
    if (!loaded.ok()) return loaded.status();
    test = *std::move(loaded);
  }
  absl::StatusOr<std::unique_ptr<VariablePlacer>> placer = VariablePlacer::Create(
      options.ps_addresses, config.partitioner, config.placement, config.rpc_timeout);
  if (!placer.ok()) return placer.status();

  Coordinator coordinator(options.ps_addresses.size(), num_workers);
  coordinator.SetMode(config.mode);
  std::unique_ptr<grpc::Service> service = MakeMasterService(&coordinator);
  absl::StatusOr<std::unique_ptr<grpc::Server>> server =
      StartGrpcServer(options.listen_address, {service.get()});
  if (!server.ok()) return server.status();
  spdlog::info("chief listening on {}, waiting for {} ps and {} workers", options.listen_address,
               options.ps_addresses.size(), num_workers);

  Job job(options, &coordinator, &test, placer->get());
  absl::StatusOr<JobResult> result;
  if (absl::Status s = coordinator.WaitForRegistration(config.register_timeout); !s.ok()) {
    result = s;
  } else {
    result = job.Run();
  }
  coordinator.RequestStop();
  job.ShutdownTasks(result.ok() ? "job finished" : std::string(result.status().message()));
  (*server)->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  return result;
}

}  // namespace pstrain
