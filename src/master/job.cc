// RunJob: the chief's side of one training job, from registration to shutdown.
#include <cmath>
#include <cstdio>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/rpc.h"
#include "common/tensor.h"
#include "data/data.h"
#include "master/coordinator.h"
#include "master/master.h"
#include "model/model.h"
#include "nlohmann/json.hpp"
#include "ps.grpc.pb.h"
#include "spdlog/spdlog.h"
#include "worker.grpc.pb.h"

namespace pstrain {

JobConfig::JobConfig() {
  optimizer.set_name("adam");
  optimizer.set_learning_rate(0.001);
}

absl::Status JobConfig::Validate() const {
  for (int h : hidden) {
    if (h <= 0)
      return absl::InvalidArgumentError(
          absl::StrCat("hidden layer width ", h, " must be positive"));
  }
  if (mode != "async") {
    return absl::InvalidArgumentError(absl::StrCat("unknown mode \"", mode, "\" (known: async)"));
  }
  if (optimizer.name() != "sgd" && optimizer.name() != "adam") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown optimizer \"", optimizer.name(), "\" (known: sgd, adam)"));
  }
  if (!std::isfinite(optimizer.learning_rate()) || optimizer.learning_rate() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("learning rate ", optimizer.learning_rate(), " must be positive and finite"));
  }
  if (batch_size < 1) return absl::InvalidArgumentError("batch size must be at least 1");
  if (epochs < 1) return absl::InvalidArgumentError("epochs must be at least 1");
  if (report_every < 1) return absl::InvalidArgumentError("report_every must be at least 1");
  return absl::OkStatus();
}

std::string JobResult::ToJson() const {
  nlohmann::json j = {{"test_accuracy", test_accuracy},
                      {"examples_per_sec", examples_per_sec},
                      {"steps", steps},
                      {"examples", examples},
                      {"seconds", seconds},
                      {"final_loss", final_loss},
                      {"ps", num_ps},
                      {"workers", num_workers}};
  return j.dump();
}

namespace {

// The job after registration: placement, variables, workers, progress, evaluation.
class Job {
 public:
  Job(const MasterOptions& options, Coordinator* coordinator, const Dataset* test)
      : options_(options),
        config_(options.job),
        coordinator_(coordinator),
        test_(test),
        model_(Widths()) {
    for (const std::string& a : options.ps_addresses) {
      ps_.push_back(ParameterServerService::NewStub(MakeChannel(a)));
    }
    for (const std::string& a : options.worker_addresses) {
      workers_.push_back(WorkerService::NewStub(MakeChannel(a)));
    }
  }

  absl::StatusOr<JobResult> Run() {
    if (absl::Status s = CreateVariables(); !s.ok()) return s;
    const absl::Time start = absl::Now();
    if (absl::Status s = StartWorkers(); !s.ok()) return s;
    JobResult result;
    if (absl::Status s = WaitForWorkers(start, &result); !s.ok()) return s;
    result.seconds = absl::ToDoubleSeconds(absl::Now() - start);
    result.examples_per_sec = result.examples / std::max(result.seconds, 1e-9);
    absl::StatusOr<double> acc = Evaluate();
    if (!acc.ok()) return acc.status();
    result.test_accuracy = *acc;
    result.num_ps = static_cast<int>(ps_.size());
    result.num_workers = static_cast<int>(workers_.size());
    return result;
  }

  // Best effort: every task is told to stop, in parallel, each with a short deadline.
  void ShutdownTasks(const std::string& reason) {
    std::vector<std::thread> threads;
    ShutdownRequest req;
    *req.mutable_sender() = MakeSender("chief", 0);
    req.set_reason(reason);
    for (auto& stub : ps_) {
      threads.emplace_back([&req, s = stub.get()] {
        ShutdownResponse resp;
        s->Shutdown(ContextWithTimeout(absl::Seconds(3)).get(), req, &resp);
      });
    }
    for (auto& stub : workers_) {
      threads.emplace_back([&req, s = stub.get()] {
        ShutdownResponse resp;
        s->Shutdown(ContextWithTimeout(absl::Seconds(3)).get(), req, &resp);
      });
    }
    for (auto& t : threads) t.join();
  }

 private:
  std::vector<int> Widths() const {
    std::vector<int> w = {static_cast<int>(test_->features())};
    w.insert(w.end(), config_.hidden.begin(), config_.hidden.end());
    w.push_back(test_->num_classes);
    return w;
  }

  int PsOf(size_t param) const { return static_cast<int>(param % ps_.size()); }

  absl::Status CreateVariables() {
    const std::vector<Tensor> init = model_.Initialize(config_.seed);
    std::vector<CreateVariablesRequest> reqs(ps_.size());
    spdlog::info("placement (round-robin over {} ps):", ps_.size());
    for (size_t i = 0; i < init.size(); ++i) {
      const ParamSpec& p = model_.params()[i];
      CreateVariablesRequest& req = reqs[PsOf(i)];
      VariableDef* def = req.add_variables();
      def->set_name(p.name);
      EncodeTensor(init[i], def->mutable_initial_value());
      *def->mutable_optimizer() = config_.optimizer;
      spdlog::info("  {:<16} {:<12} -> ps:{}", p.name, ShapeString(p.shape), PsOf(i));
    }
    for (size_t t = 0; t < ps_.size(); ++t) {
      *reqs[t].mutable_sender() = MakeSender("chief", 0);
      CreateVariablesResponse resp;
      grpc::Status s =
          ps_[t]->CreateVariables(ContextWithTimeout(config_.rpc_timeout).get(), reqs[t], &resp);
      if (!s.ok()) return FromGrpcStatus(s, "CreateVariables", TaskName("ps", t));
    }
    return absl::OkStatus();
  }

  absl::Status StartWorkers() {
    TrainingSpec spec;
    spec.set_data_dir(config_.data_dir);
    for (int w : model_.widths()) spec.add_layers(w);
    for (size_t i = 0; i < model_.params().size(); ++i) {
      Placement* p = spec.add_placement();
      p->set_variable(model_.params()[i].name);
      p->set_ps_task(PsOf(i));
    }
    spec.set_num_shards(static_cast<int>(workers_.size()));
    spec.set_batch_size(config_.batch_size);
    spec.set_epochs(config_.epochs);
    spec.set_report_every(config_.report_every);
    spec.set_rpc_timeout_s(absl::ToDoubleSeconds(config_.rpc_timeout));
    for (size_t t = 0; t < workers_.size(); ++t) {
      StartTrainingRequest req;
      *req.mutable_sender() = MakeSender("chief", 0);
      *req.mutable_spec() = spec;
      req.mutable_spec()->set_shard_index(static_cast<int>(t));
      req.mutable_spec()->set_seed(config_.seed * 1000003 + t);
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
      result->steps = result->examples = 0;
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
      }
      result->final_loss = loss;
      if (all_done || now - last_line >= absl::Milliseconds(500)) {
        const double secs = std::max(absl::ToDoubleSeconds(now - start), 1e-9);
        // One line per update; the launcher shows these in place.
        std::fprintf(stderr, "progress epoch %d/%d step %lld loss %.4f examples/s %.0f\n", epoch,
                     config_.epochs, static_cast<long long>(result->steps), loss,
                     result->examples / secs);
        std::fflush(stderr);
        last_line = now;
      }
      if (all_done) return absl::OkStatus();
    }
  }

  absl::StatusOr<double> Evaluate() {
    const std::vector<ParamSpec>& params = model_.params();
    std::vector<PullResponse> pulled(ps_.size());
    std::vector<const float*> values(params.size());
    for (size_t t = 0; t < ps_.size(); ++t) {
      PullRequest req;
      *req.mutable_sender() = MakeSender("chief", 0);
      for (size_t i = t; i < params.size(); i += ps_.size()) req.add_names(params[i].name);
      grpc::Status s = ps_[t]->Pull(ContextWithTimeout(config_.rpc_timeout).get(), req, &pulled[t]);
      if (!s.ok()) return FromGrpcStatus(s, "Pull", TaskName("ps", t));
      for (int k = 0; k < pulled[t].values_size(); ++k) {
        const size_t i = t + k * ps_.size();
        absl::StatusOr<const float*> v =
            TensorData(pulled[t].values(k).value(), params[i].shape, params[i].name);
        if (!v.ok()) return v.status();
        values[i] = *v;
      }
    }
    return model_.Accuracy(values, test_->images, test_->labels.data());
  }

  const MasterOptions& options_;
  const JobConfig& config_;
  Coordinator* const coordinator_;
  const Dataset* const test_;
  Mlp model_;
  std::vector<std::unique_ptr<ParameterServerService::Stub>> ps_;
  std::vector<std::unique_ptr<WorkerService::Stub>> workers_;
};

}  // namespace

absl::StatusOr<JobResult> RunJob(const MasterOptions& options) {
  if (absl::Status s = options.job.Validate(); !s.ok()) return s;
  absl::StatusOr<Dataset> test = LoadMnist(options.job.data_dir, "t10k");
  if (!test.ok()) return test.status();

  Coordinator coordinator(options.ps_addresses.size(), options.worker_addresses.size());
  std::unique_ptr<grpc::Service> service = MakeMasterService(&coordinator);
  absl::StatusOr<std::unique_ptr<grpc::Server>> server =
      StartGrpcServer(options.listen_address, {service.get()});
  if (!server.ok()) return server.status();
  spdlog::info("chief listening on {}, waiting for {} ps and {} workers", options.listen_address,
               options.ps_addresses.size(), options.worker_addresses.size());

  Job job(options, &coordinator, &*test);
  absl::StatusOr<JobResult> result;
  if (absl::Status s = coordinator.WaitForRegistration(options.job.register_timeout); !s.ok()) {
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
