#include "worker/worker.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/raw_call.h"
#include "common/rpc.h"
#include "master.grpc.pb.h"
#include "spdlog/spdlog.h"
#include "worker.grpc.pb.h"
#include "worker/shard_cache.h"
#include "worker/trainer.h"

namespace pstrain {
namespace {

// Longest single attempt of a progress report; a report is retried within the job's task timeout.
constexpr absl::Duration kReportAttempt = absl::Seconds(10);

using Raw = grpc::ByteBuffer;
using WorkerServiceBase = WorkerService::WithRawCallbackMethod_StartTraining<
    WorkerService::WithRawCallbackMethod_Shutdown<WorkerService::Service>>;

class WorkerImpl final : public Worker, public WorkerServiceBase {
 public:
  WorkerImpl(const WorkerOptions& options, ShutdownFn on_shutdown)
      : options_(options),
        on_shutdown_(std::move(on_shutdown)),
        master_(MasterService::NewStub(MakeChannel(options.chief_address))) {}

  ~WorkerImpl() override {
    shutting_down_ = true;
    std::unique_ptr<Run> run;
    {
      absl::MutexLock lock(&mu_);
      run = std::move(run_);
    }
    if (run != nullptr) {
      StopRun(run.get());
      run->thread.join();
    }
    if (heartbeat_.joinable()) heartbeat_.join();
  }

  grpc::Service* service() override { return this; }

  Progress progress() const override {
    absl::MutexLock lock(&progress_mu_);
    return progress_;
  }

  // A new chief (named by a Register answer) also stops the run the old one started.
  void ExpectChief(uint64_t incarnation) override {
    absl::MutexLock lock(&mu_);
    if (incarnation == chief_incarnation_) return;
    SwitchChief(incarnation);
    if (run_ != nullptr && run_->chief != incarnation) StopRun(run_.get());
  }

  // Loading the data and training run on a thread of their own; the call is finished from there
  // once the spec and data are checked, so the chief learns about bad input at once. A repeated
  // call for the same run (a retry) gets the first call's outcome, waiting for it if needed.
  grpc::ServerUnaryReactor* StartTraining(grpc::CallbackServerContext* ctx, const Raw* req,
                                          Raw* resp) override {
    return ServeRaw<StartTrainingRequest, StartTrainingResponse>(
        ctx, req, resp, "StartTraining",
        [this](const StartTrainingRequest& q, StartTrainingResponse* r, FinishFn done) {
          Start(q, r, std::move(done));
        });
  }

  grpc::ServerUnaryReactor* Shutdown(grpc::CallbackServerContext* ctx, const Raw* req,
                                     Raw* resp) override {
    return ServeRaw<ShutdownRequest, ShutdownResponse>(
        ctx, req, resp, "Shutdown",
        [this](const ShutdownRequest& q, ShutdownResponse*, FinishFn done) {
          absl::Status s;
          {
            absl::MutexLock lock(&mu_);
            s = CheckChief(q.sender(), "Shutdown");
            if (s.ok()) {
              shutting_down_ = true;
              // A pull or push in flight must not hold the worker up.
              if (run_ != nullptr) StopRun(run_.get());
            }
          }
          if (s.ok()) ShutdownOnce(q.reason(), q.job_succeeded());
          done(s);
        });
  }

 private:
  struct WaitingStart {
    StartTrainingResponse* response;  // alive until `done` runs
    FinishFn done;
  };
  // One training, started by a StartTraining of (chief incarnation, generation).
  struct Run {
    uint64_t chief = 0, generation = 0;
    TrainingSpec spec;
    std::atomic<bool> stop{false};
    CallCanceller cancel;  // ends the run's calls in flight when it is stopped
    // Guarded by mu_: the outcome of checking the spec and data, once known, and the
    // StartTraining calls waiting for it.
    std::optional<absl::Status> start_status;
    StartTrainingResponse start_response;
    std::vector<WaitingStart> waiting;
    // The run this one replaced (stopped): its thread is joined by this run's before it starts.
    std::unique_ptr<Run> previous;
    std::thread thread;
  };

  static void StopRun(Run* run) {
    run->stop = true;
    run->cancel.Cancel();
  }

  // A StartTraining for the run in progress (same chief and generation) is a retry; any other
  // stops that run and starts a new one.
  void Start(const StartTrainingRequest& req, StartTrainingResponse* resp, FinishFn done) {
    std::optional<absl::Status> outcome;
    {
      absl::MutexLock lock(&mu_);
      absl::Status refused = CheckChief(req.sender(), "StartTraining");
      if (refused.ok() && shutting_down_) {
        refused = absl::CancelledError("StartTraining refused: the worker is shutting down");
      }
      const uint64_t chief = req.sender().incarnation(), generation = req.sender().generation();
      if (!refused.ok()) {
        outcome = refused;
      } else if (run_ != nullptr && run_->chief == chief && run_->generation == generation) {
        if (run_->start_status) {
          outcome = *run_->start_status;
          *resp = run_->start_response;
        } else {
          run_->waiting.push_back({resp, std::move(done)});
        }
      } else {
        auto run = std::make_unique<Run>();
        run->chief = chief;
        run->generation = generation;
        run->spec = req.spec();
        run->waiting.push_back({resp, std::move(done)});
        if (run_ != nullptr) {
          spdlog::info("generation {} of chief incarnation {} replaces generation {}", generation,
                       chief, run_->generation);
          StopRun(run_.get());
          run->previous = std::move(run_);
        }
        run_ = std::move(run);
        generation_ = generation;
        const TrainingSpec& spec = run_->spec;
        if (!heartbeat_.joinable() && spec.task_queue() && spec.heartbeat_interval_s() > 0) {
          const absl::Duration every = absl::Seconds(spec.heartbeat_interval_s());
          heartbeat_ = std::thread([this, every] { HeartbeatLoop(every); });
        }
        Run* r = run_.get();
        r->thread = std::thread([this, r] { RunTraining(r); });
      }
    }
    if (outcome) done(*outcome);
  }

  // Only the chief this worker obeys may start or stop it: the first to call, until a Register
  // answer (of the chief's own address) names it (ExpectChief), which alone switches to a
  // restarted chief; a caller's claim to be a new chief is not believed.
  absl::Status CheckChief(const Sender& sender, const std::string& method)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const std::string me = TaskName("worker", options_.task);
    if (sender.job() != "chief" || sender.task() != 0) {
      return absl::PermissionDeniedError(
          absl::StrCat(method, " from ", TaskName(sender.job(), sender.task()), " refused by ", me,
                       ": only the chief (chief:0) may call it"));
    }
    if (chief_incarnation_ == 0) chief_incarnation_ = sender.incarnation();
    if (sender.incarnation() == chief_incarnation_) return absl::OkStatus();
    return absl::PermissionDeniedError(
        absl::StrCat(method, " from chief incarnation ", sender.incarnation(), " refused by ", me,
                     ": it obeys chief incarnation ", chief_incarnation_));
  }

  void SwitchChief(uint64_t incarnation) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (chief_incarnation_ != 0) {
      spdlog::info("{} now obeys chief incarnation {} (was {})", TaskName("worker", options_.task),
                   incarnation, chief_incarnation_);
    }
    chief_incarnation_ = incarnation;
  }

  // The run's thread: waits for the run it replaced to end, checks the spec, reads this
  // worker's shard of the data (or reuses it) and checks it, answers every StartTraining call
  // waiting for that, then trains.
  void RunTraining(Run* run) {
    if (run->previous != nullptr) {
      run->previous->thread.join();
      run->previous.reset();
    }
    const TrainingSpec& spec = run->spec;
    absl::Status s = ValidateSpec(spec, static_cast<int>(options_.ps_addresses.size()));
    std::shared_ptr<const Examples> data;
    if (s.ok()) {
      absl::StatusOr<std::shared_ptr<const Examples>> d = shards_.Get(spec);
      if (d.ok()) data = *std::move(d);
      s = d.status();
    }
    if (s.ok()) s = CheckShard(spec, *data);
    StartTrainingResponse response;
    if (s.ok()) {
      response.set_examples(data->size());
      response.set_bad_lines_skipped(data->bad_lines_skipped);
      if (data->bad_lines_skipped > 0) {
        spdlog::warn("skipped {} malformed lines of {}", data->bad_lines_skipped, spec.data());
      }
    }
    std::vector<WaitingStart> waiting;
    {
      absl::MutexLock lock(&mu_);
      run->start_status = s;
      run->start_response = response;
      waiting.swap(run->waiting);
    }
    for (WaitingStart& w : waiting) {
      *w.response = response;
      w.done(s);
    }
    if (!s.ok()) {
      spdlog::error("cannot start training: {}", std::string(s.message()));
      return;
    }
    if (run->stop) return;
    TrainerOptions topts;
    topts.task = options_.task;
    topts.ps_addresses = options_.ps_addresses;
    topts.sender = MakeSender("worker", options_.task);
    topts.sender.set_generation(run->generation);
    topts.stop = &run->stop;
    topts.cancel = &run->cancel;
    const absl::Duration timeout = absl::Seconds(spec.rpc_timeout_s());
    topts.report = [this, run, timeout](const ProgressRequest& r) {
      RecordProgress(r);
      return Report(run, r, timeout);
    };
    topts.next_task = [this, run, timeout, sender = topts.sender] {
      return NextTask(run, sender, timeout);
    };
    topts.task_done = [this, run, timeout](const TaskDoneRequest& r) {
      return TaskDone(run, r, timeout);
    };
    Train(spec, *data, topts);
  }

  // Every `every` until the worker shuts down: a Heartbeat to the chief with the current run's
  // generation. A refusal saying this process was declared dead ends the worker: its task is
  // someone else's now. `register_again` is the runtime's business (it registers on its own).
  void HeartbeatLoop(absl::Duration every) {
    while (!shutting_down_) {
      HeartbeatRequest req;
      *req.mutable_sender() = MakeSender("worker", options_.task);
      req.mutable_sender()->set_generation(generation_);
      HeartbeatResponse resp;
      const absl::Status s =
          FromGrpcStatus(master_->Heartbeat(ContextWithTimeout(every).get(), req, &resp),
                         "Heartbeat", "chief " + options_.chief_address);
      if ((absl::IsFailedPrecondition(s) && absl::StrContains(s.message(), "declared dead")) ||
          absl::IsPermissionDenied(s)) {
        spdlog::error("{}", std::string(s.message()));
        shutting_down_ = true;
        {
          absl::MutexLock lock(&mu_);
          if (run_ != nullptr) StopRun(run_.get());
        }
        ShutdownOnce(std::string(s.message()), false);
        return;
      }
      if (s.ok() && resp.stop()) return;
      for (absl::Time end = absl::Now() + every; !shutting_down_ && absl::Now() < end;) {
        absl::SleepFor(std::min(absl::Milliseconds(50), every));
      }
    }
  }

  // The chief's answer to NextTask, retried within `timeout` while it is unreachable.
  // One attempt of a call of `run` to the chief, `call(ctx)`, named `what`; its context ends
  // with the attempt or once the run is stopped.
  template <typename Call>
  absl::Status ChiefCall(Run* run, const char* what, absl::Duration attempt, Call call) {
    if (run->stop) return absl::CancelledError("the run is stopped");
    std::unique_ptr<grpc::ClientContext> ctx = ContextWithTimeout(attempt, /*wait_for_ready=*/true);
    run->cancel.Add(ctx.get());
    const grpc::Status s = call(ctx.get());
    run->cancel.Remove(ctx.get());
    return FromGrpcStatus(s, what, "chief " + options_.chief_address);
  }

  // The chief's answer to NextTask, retried within `timeout` while it is unreachable.
  absl::StatusOr<NextTaskResponse> NextTask(Run* run, const Sender& sender,
                                            absl::Duration timeout) {
    NextTaskRequest req;
    *req.mutable_sender() = sender;
    NextTaskResponse resp;
    absl::Status s = RetryUntil(timeout, "the chief at " + options_.chief_address, [&] {
      return ChiefCall(run, "NextTask", kReportAttempt, [&](grpc::ClientContext* ctx) {
        return master_->NextTask(ctx, req, &resp);
      });
    });
    if (!s.ok()) return s;
    return resp;
  }

  absl::Status TaskDone(Run* run, const TaskDoneRequest& req, absl::Duration timeout) {
    TaskDoneResponse resp;
    return RetryUntil(timeout, "the chief at " + options_.chief_address, [&] {
      return ChiefCall(run, "TaskDone", kReportAttempt, [&](grpc::ClientContext* ctx) {
        return master_->TaskDone(ctx, req, &resp);
      });
    });
  }

  void RecordProgress(const ProgressRequest& r) {
    const absl::Time now = absl::Now();
    absl::MutexLock lock(&progress_mu_);
    const double seconds = absl::ToDoubleSeconds(now - progress_at_);
    if (progress_at_ != absl::InfinitePast() && seconds > 0) {
      progress_.examples_per_sec = (r.examples() - progress_.examples) / seconds;
    }
    progress_at_ = now;
    progress_.steps = r.steps();
    progress_.examples = r.examples();
    progress_.epoch = r.epoch();
    progress_.loss = r.loss();
    progress_.done = r.done();
  }

  // Sends a report, retrying within `timeout` (the job's task timeout), so that a chief that is
  // briefly unreachable or paused does not end the job. Returns false when training should stop.
  bool Report(Run* run, const ProgressRequest& r, absl::Duration timeout) {
    ProgressResponse resp;
    const absl::Time end = absl::Now() + timeout;
    absl::Status s = RetryUntil(timeout, "the chief at " + options_.chief_address, [&] {
      return ChiefCall(
          run, "ReportProgress", std::min(kReportAttempt, end - absl::Now()),
          [&](grpc::ClientContext* ctx) { return master_->ReportProgress(ctx, r, &resp); });
    });
    // Stopped (the job ends, or a new run replaces this one), or refused for its generation (a
    // rollback: the next StartTraining says what now): no one waits for this run.
    if (run->stop || OtherGeneration(s)) return false;
    if (!s.ok()) {
      // Without the chief the job cannot finish: stop rather than train for nobody.
      ShutdownOnce(absl::StrCat("lost the chief: ", s.message()), false);
      return false;
    }
    return !resp.stop();
  }

  void ShutdownOnce(const std::string& reason, bool job_succeeded) {
    std::call_once(shutdown_once_, [&] { on_shutdown_(reason, job_succeeded); });
  }

  // Constant after construction.
  const WorkerOptions options_;
  const ShutdownFn on_shutdown_;
  const std::unique_ptr<MasterService::Stub> master_;

  std::atomic<bool> shutting_down_{false};  // the job ended or this process was declared dead
  std::atomic<uint64_t> generation_{0};     // of the latest run, for heartbeats
  std::once_flag shutdown_once_;

  mutable absl::Mutex progress_mu_;
  Progress progress_ ABSL_GUARDED_BY(progress_mu_);
  absl::Time progress_at_ ABSL_GUARDED_BY(progress_mu_) = absl::InfinitePast();

  absl::Mutex mu_;
  uint64_t chief_incarnation_ ABSL_GUARDED_BY(mu_) = 0;  // 0: not known yet
  std::unique_ptr<Run> run_ ABSL_GUARDED_BY(mu_);        // the latest run (running or ended)

  ShardCache shards_;  // the data of the runs

  std::thread heartbeat_;  // with the task queue: started by the first run, joined on destruction
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
