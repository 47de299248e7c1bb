// A whole small job in one test process, every part real and talking gRPC on 127.0.0.1: the
// chief's Coordinator behind its MasterService (the test plays the chief's job loop: it
// configures the PS, creates the variables and starts the workers), parameter servers
// (ParameterServer) and workers (Worker). Each PS is served through a thin service over the
// real ParameterServer that logs the tag and generation of every push, and can be stopped and
// served again on the same port (a restarted PS that kept its state).
#pragma once

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/rpc.h"
#include "common/tensor_codec.h"
#include "gtest/gtest.h"
#include "master/coordinator.h"
#include "model/model.h"
#include "ps.grpc.pb.h"
#include "ps/ps.h"
#include "testing.h"
#include "worker.grpc.pb.h"
#include "worker/worker.h"

namespace pstrain::worker_cluster {

// One push as a PS received it.
struct PushSeen {
  uint64_t generation = 0;
  bool tagged = false;
  int epoch = 0;
  int64_t task = 0, batch = 0;
};

// The pushes one PS received, in order. Thread-safe.
class PushLog {
 public:
  void Add(const PushRequest& req) {
    absl::MutexLock lock(&mu_);
    pushes_.push_back({req.sender().generation(), req.has_tag(), req.tag().epoch(),
                       req.tag().task(), req.tag().batch()});
  }
  std::vector<PushSeen> pushes() const {
    absl::MutexLock lock(&mu_);
    return pushes_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<PushSeen> pushes_ ABSL_GUARDED_BY(mu_);
};

// The ParameterServerService methods a worker of a dense model calls, over the real PS.
class LoggingPsService final : public ParameterServerService::CallbackService {
 public:
  LoggingPsService(ParameterServer* ps, PushLog* log) : ps_(ps), log_(log) {}
  // Pushes are answered this much later than they are applied.
  void set_answer_delay(absl::Duration d) { answer_delay_ms_ = absl::ToInt64Milliseconds(d); }
  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* ctx, const PullRequest* req,
                                 PullResponse* resp) override {
    grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
    ps_->PullAsync(*req, resp, [r](absl::Status s) { r->Finish(ToGrpcStatus(s)); });
    return r;
  }
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* ctx, const PushRequest* req,
                                 PushResponse* resp) override {
    const absl::Status s = ps_->Push(*req, resp);
    if (s.ok()) log_->Add(*req);
    // A slow answer: a push applied whose answer is still on its way.
    if (const int ms = answer_delay_ms_.load(); ms > 0) absl::SleepFor(absl::Milliseconds(ms));
    return Done(ctx, s);
  }
  grpc::ServerUnaryReactor* Leave(grpc::CallbackServerContext* ctx, const LeaveRequest* req,
                                  LeaveResponse* resp) override {
    return Done(ctx, ps_->Leave(*req, resp));
  }

 private:
  static grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx, const absl::Status& s) {
    grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
    r->Finish(ToGrpcStatus(s));
    return r;
  }
  ParameterServer* const ps_;
  PushLog* const log_;
  std::atomic<int64_t> answer_delay_ms_{0};
};

struct JobShape {
  std::string mode = "async";
  int staleness = 0;
  int64_t rows = 200;
  int64_t task_rows = 40;
  int batch = 10;
  int epochs = 2;
  int step_delay_ms = 0;  // every worker sleeps this long per step
};

class Cluster {
 public:
  static constexpr int kPs = 2, kWorkers = 2, kFeatures = 4;

  Cluster(const std::string& dir, const JobShape& shape) : dir_(dir), shape_(shape) {
    const std::vector<int> ports = testing::FreePorts(1 + kPs + 2 * kWorkers);
    auto addr = [&](int i) { return absl::StrCat("127.0.0.1:", ports[i]); };
    chief_address_ = addr(0);
    for (int p = 0; p < kPs; ++p) ps_addresses_.push_back(addr(1 + p));
    for (int w = 0; w < kWorkers; ++w) worker_addresses_.push_back(addr(1 + kPs + w));
    coordinator_ = std::make_unique<Coordinator>(ps_addresses_, kWorkers);
    master_service_ = MakeMasterService(coordinator_.get());
    chief_server_ = *StartGrpcServer(chief_address_, {master_service_.get()});
    for (int p = 0; p < kPs; ++p) {
      ps_.push_back(*ParameterServer::Create({p}));
      logs_.push_back(std::make_unique<PushLog>());
      ps_services_.emplace_back();
      ps_servers_.emplace_back();
      ServePs(p);
    }
    for (int w = 0; w < kWorkers; ++w) {
      WorkerOptions o;
      o.task = w;
      o.ps_addresses = ps_addresses_;
      o.chief_address = chief_address_;
      workers_.push_back(*Worker::Create(o, [](const std::string&, bool) {}));
      worker_servers_.push_back(*StartGrpcServer(worker_addresses_[w], {workers_[w]->service()}));
      worker_stubs_.push_back(WorkerService::NewStub(MakeChannel(worker_addresses_[w])));
    }
  }

  ~Cluster() {
    for (auto& s : worker_servers_) s->Shutdown(absl::ToChronoTime(absl::Now()));
    workers_.clear();
    for (int p = 0; p < kPs; ++p) StopPs(p);
    chief_server_->Shutdown(absl::ToChronoTime(absl::Now()));
  }

  // Serves PS `p` (again) on its port.
  void ServePs(int p) {
    ps_services_[p] = std::make_unique<LoggingPsService>(ps_[p].get(), logs_[p].get());
    absl::StatusOr<std::unique_ptr<grpc::Server>> s =
        StartGrpcServer(ps_addresses_[p], {ps_services_[p].get()});
    ASSERT_TRUE(s.ok()) << s.status();
    ps_servers_[p] = *std::move(s);
  }
  // Stops serving PS `p`; the calls still in flight after `grace` are cancelled, as a process
  // that dies drops its connections. The PS keeps its state.
  void StopPs(int p, absl::Duration grace = absl::Seconds(5)) {
    if (ps_servers_[p] == nullptr) return;
    ps_servers_[p]->Shutdown(absl::ToChronoTime(absl::Now() + grace));
    ps_servers_[p].reset();
  }
  LoggingPsService& ps_service(int p) { return *ps_services_[p]; }

  // Registers every task, configures the PS, creates the model's variables and turns the task
  // queue on: what the chief's job loop does before it starts the workers. The PS check the
  // workers' `generation` (0: they do not).
  void SetUpJob(uint64_t generation = 0) {
    WriteData();
    model_ = *Model::Create(Config());
    for (int p = 0; p < kPs; ++p) Register("ps", p, ps_addresses_[p]);
    for (int w = 0; w < kWorkers; ++w) {
      const RegisterResponse r = Register("worker", w, worker_addresses_[w]);
      workers_[w]->ExpectChief(r.chief_incarnation());
    }
    coordinator_->SetMode(shape_.mode);
    ASSERT_TRUE(coordinator_
                    ->EnableTasks({shape_.rows, shape_.task_rows, shape_.epochs, kWorkers},
                                  absl::Milliseconds(200), absl::Seconds(30))
                    .ok());
    coordinator_->SetReady();
    ASSERT_NO_FATAL_FAILURE(SetUpPs(generation));
    spec_.set_data("csv:" + DataPath());
    spec_.set_train_records(shape_.rows);
    spec_.mutable_model()->set_kind("mlp");
    spec_.mutable_model()->set_dense_features(kFeatures);
    spec_.mutable_model()->set_num_classes(2);
    spec_.mutable_model()->add_hidden(8);
    spec_.set_num_shards(1);
    spec_.set_batch_size(shape_.batch);
    spec_.set_epochs(shape_.epochs);
    spec_.set_report_every(5);
    spec_.set_rpc_timeout_s(30);
    spec_.set_mode(shape_.mode);
    spec_.set_task_queue(true);
    spec_.set_heartbeat_interval_s(0.2);
    spec_.set_step_delay_ms(shape_.step_delay_ms);
  }

  // Configures every PS for `generation` (0: unchecked) and creates the model's variables from
  // their initial values.
  void SetUpPs(uint64_t generation) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-0.1f, 0.1f);
    for (int p = 0; p < kPs; ++p) {
      ConfigureRequest c;
      *c.mutable_sender() = MakeSender("chief", 0);
      c.mutable_consistency()->set_mode(shape_.mode);
      c.mutable_consistency()->set_num_workers(kWorkers);
      c.mutable_consistency()->set_staleness(shape_.staleness);
      if (shape_.mode == "sync") c.mutable_consistency()->set_replicas_to_aggregate(kWorkers);
      c.set_wait_timeout_s(10);
      c.set_generation(generation);
      for (const Sender& s : coordinator_->Workers()) *c.add_workers() = s;
      ConfigureResponse cr;
      ps_[p]->ExpectChief(MakeSender("chief", 0).incarnation());
      ASSERT_TRUE(ps_[p]->Configure(c, &cr).ok());
    }
    for (size_t i = 0; i < model_->params().size(); ++i) {
      const ParamSpec& param = model_->params()[i];
      const int p = static_cast<int>(i % kPs);
      CreateVariablesRequest req;
      *req.mutable_sender() = MakeSender("chief", 0);
      VariableDef* def = req.add_variables();
      def->set_name(param.name);
      Tensor init(param.shape, 0.0f);
      for (float& v : init.values) v = u(rng);
      EncodeTensor(init, def->mutable_initial_value());
      def->mutable_optimizer()->set_name("sgd");
      def->mutable_optimizer()->set_learning_rate(0.1);
      CreateVariablesResponse resp;
      const absl::Status s = ps_[p]->CreateVariables(req, &resp);
      ASSERT_TRUE(s.ok()) << s;
      if (spec_.placement_size() > static_cast<int>(i)) continue;
      Placement* pl = spec_.add_placement();
      pl->set_variable(param.name);
      Shard* shard = pl->add_shards();
      shard->set_name(param.name);
      shard->set_ps_task(p);
      shard->set_row_end(param.shape.empty() ? 1 : param.shape[0]);
    }
  }

  // A rollback without a checkpoint, as the chief does it: every PS Reset (holding nothing, as
  // a restarted PS), `gap` later configured for `generation` with the variables created again.
  void ResetPs(uint64_t generation, absl::Duration gap = absl::ZeroDuration()) {
    for (int p = 0; p < kPs; ++p) {
      ResetRequest req;
      *req.mutable_sender() = MakeSender("chief", 0);
      ResetResponse resp;
      ASSERT_TRUE(ps_[p]->Reset(req, &resp).ok());
    }
    absl::SleepFor(gap);
    SetUpPs(generation);
  }

  // Per PS, the tagged pushes it dropped as duplicates.
  int64_t DuplicatesDropped(int p) {
    StatsRequest req;
    *req.mutable_sender() = MakeSender("chief", 0);
    StatsResponse resp;
    EXPECT_TRUE(ps_[p]->Stats(req, &resp).ok());
    return resp.duplicates_dropped();
  }

  // Every shard of every PS applied every batch of every task exactly once: its watermark of
  // each task is the task's number of batches.
  void ExpectEveryBatchAppliedOnce() {
    std::map<std::pair<int, int64_t>, int64_t> want;
    for (const auto& [batch, n] : EveryBatch(1)) {
      const auto& [e, t, b] = batch;
      want[{e, t}] = std::max(want[{e, t}], b + 1);
    }
    for (int p = 0; p < kPs; ++p) {
      AppliedTasksRequest req;
      *req.mutable_sender() = MakeSender("chief", 0);
      AppliedTasksResponse resp;
      ASSERT_TRUE(ps_[p]->AppliedTasks(req, &resp).ok());
      EXPECT_GT(resp.shards_size(), 0);
      for (const AppliedTasks& shard : resp.shards()) {
        std::map<std::pair<int, int64_t>, int64_t> got;
        for (const TaskWatermark& w : shard.tasks()) got[{w.epoch(), w.task()}] = w.next_batch();
        EXPECT_EQ(got, want) << "ps:" << p << " shard " << shard.name();
      }
    }
  }

  // StartTraining of worker `w` for `generation`, as the chief (of `chief_incarnation`, 0: this
  // process's) sends it.
  grpc::Status Start(int w, uint64_t generation, uint64_t chief_incarnation = 0) {
    StartTrainingRequest req;
    *req.mutable_sender() = MakeSender("chief", 0);
    req.mutable_sender()->set_generation(generation);
    if (chief_incarnation != 0) req.mutable_sender()->set_incarnation(chief_incarnation);
    *req.mutable_spec() = spec_;
    req.mutable_spec()->set_seed(1 * 1000003 + w);  // the chief's seed for worker w
    StartTrainingResponse resp;
    return worker_stubs_[w]->StartTraining(
        ContextWithTimeout(absl::Seconds(30), /*wait_for_ready=*/true).get(), req, &resp);
  }
  void StartAll(uint64_t generation) {
    for (int w = 0; w < kWorkers; ++w) {
      const grpc::Status s = Start(w, generation);
      ASSERT_TRUE(s.ok()) << s.error_message();
    }
  }

  // Waits until every worker reported done (or one reported an error, or `timeout`): "" or
  // what went wrong.
  std::string WaitForDone(absl::Duration timeout) {
    const absl::Time end = absl::Now() + timeout;
    while (absl::Now() < end) {
      const std::vector<WorkerProgress> progress = coordinator_->WaitForReport(absl::Seconds(1));
      bool all = true;
      for (size_t w = 0; w < progress.size(); ++w) {
        if (!progress[w].error.empty()) return absl::StrCat("worker:", w, ": ", progress[w].error);
        all = all && progress[w].done;
      }
      if (all) return "";
    }
    return "the workers did not finish in time";
  }

  // The tasks of an epoch, and the batches of task `t` (the last task may be shorter).
  int64_t tasks_per_epoch() const {
    return (shape_.rows + shape_.task_rows - 1) / shape_.task_rows;
  }
  int64_t batches_of(int64_t t) const {
    const int64_t rows = std::min(shape_.task_rows, shape_.rows - t * shape_.task_rows);
    return (rows + shape_.batch - 1) / shape_.batch;
  }

  // Per (epoch, task, batch): how many tagged pushes of it PS `p` received.
  std::map<std::tuple<int, int64_t, int64_t>, int> TagCounts(int p) const {
    std::map<std::tuple<int, int64_t, int64_t>, int> counts;
    for (const PushSeen& s : logs_[p]->pushes()) {
      EXPECT_TRUE(s.tagged) << "an untagged push on ps:" << p;
      ++counts[{s.epoch, s.task, s.batch}];
    }
    return counts;
  }
  // Every batch of every task of every epoch, each with count `n`.
  std::map<std::tuple<int, int64_t, int64_t>, int> EveryBatch(int n) const {
    std::map<std::tuple<int, int64_t, int64_t>, int> all;
    for (int e = 0; e < shape_.epochs; ++e) {
      for (int64_t t = 0; t < tasks_per_epoch(); ++t) {
        for (int64_t b = 0; b < batches_of(t); ++b) all[{e, t, b}] = n;
      }
    }
    return all;
  }

  Coordinator& coordinator() { return *coordinator_; }
  PushLog& log(int p) { return *logs_[p]; }
  ParameterServer& ps(int p) { return *ps_[p]; }
  Worker& worker(int w) { return *workers_[w]; }

 private:
  ModelConfig Config() const {
    ModelConfig c;
    c.kind = "mlp";
    c.dense_features = kFeatures;
    c.num_classes = 2;
    c.hidden = {8};
    return c;
  }
  std::string DataPath() const { return dir_ + "/train.csv"; }
  // Two linearly separable classes.
  void WriteData() const {
    std::ofstream out(DataPath());
    std::mt19937 rng(3);
    std::normal_distribution<float> n(0, 1);
    for (int64_t r = 0; r < shape_.rows; ++r) {
      const int label = r % 2;
      out << label;
      for (int f = 0; f < kFeatures; ++f) out << "," << n(rng) + (label ? 1.0f : -1.0f);
      out << "\n";
    }
  }
  RegisterResponse Register(const std::string& job, int task, const std::string& address) {
    RegisterRequest req;
    *req.mutable_sender() = MakeSender(job, task);
    req.set_address(address);
    RegisterResponse resp;
    const absl::Status s = coordinator_->Register(req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    return resp;
  }

  const std::string dir_;
  const JobShape shape_;
  std::string chief_address_;
  std::vector<std::string> ps_addresses_, worker_addresses_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<grpc::Service> master_service_;
  std::unique_ptr<grpc::Server> chief_server_;
  std::vector<std::unique_ptr<ParameterServer>> ps_;
  std::vector<std::unique_ptr<PushLog>> logs_;
  std::vector<std::unique_ptr<LoggingPsService>> ps_services_;
  std::vector<std::unique_ptr<grpc::Server>> ps_servers_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::unique_ptr<grpc::Server>> worker_servers_;
  std::vector<std::unique_ptr<WorkerService::Stub>> worker_stubs_;
  std::unique_ptr<Model> model_;
  TrainingSpec spec_;
};

}  // namespace pstrain::worker_cluster
