#include "worker/worker.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/raw_call.h"
#include "common/rpc.h"
#include "master.grpc.pb.h"
#include "spdlog/spdlog.h"
#include "worker.grpc.pb.h"
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
    stop_ = true;
    cancel_.Cancel();
    if (thread_.joinable()) thread_.join();
    if (heartbeat_.joinable()) heartbeat_.join();
  }

  grpc::Service* service() override { return this; }

  Progress progress() const override {
    absl::MutexLock lock(&progress_mu_);
    return progress_;
  }

  void ExpectChief(uint64_t incarnation) override {
    absl::MutexLock lock(&mu_);
    chief_incarnation_ = incarnation;
  }

  // Loading the data and training run on a thread of their own; the call is finished from there
  // once the spec and data are checked, so the chief learns about bad input at once. A repeated
  // call from the same chief (a retry) gets the first call's outcome, waiting for it if needed.
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
          }
          if (s.ok()) {
            stop_ = true;
            cancel_.Cancel();  // a pull or push in flight must not hold the worker up
            ShutdownOnce(q.reason(), q.job_succeeded());
          }
          done(s);
        });
  }

 private:
  // A repeated call from the same chief (a retry) gets the first call's outcome, waiting for it
  // if needed.
  void Start(const StartTrainingRequest& req, StartTrainingResponse* resp, FinishFn done) {
    absl::Status refused;
    std::optional<absl::Status> outcome;
    bool first = false;
    {
      absl::MutexLock lock(&mu_);
      refused = CheckChief(req.sender(), "StartTraining");
      if (refused.ok()) {
        if (start_status_) {
          outcome = *start_status_;
          *resp = start_response_;
        } else {
          waiting_starts_.push_back({resp, std::move(done)});
        }
        first = !started_;
        started_ = true;
      }
    }
    if (!refused.ok()) outcome = refused;
    if (outcome) done(*outcome);
    if (!first) return;
    if (req.spec().task_queue() && req.spec().heartbeat_interval_s() > 0) {
      const absl::Duration every = absl::Seconds(req.spec().heartbeat_interval_s());
      heartbeat_ = std::thread([this, every] { HeartbeatLoop(every); });
    }
    thread_ = std::thread([this, spec = req.spec()] { Run(spec); });
  }

  // Only the chief this worker obeys may start or stop it.
  absl::Status CheckChief(const Sender& sender, const std::string& method)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const std::string me = TaskName("worker", options_.task);
    if (sender.job() != "chief" || sender.task() != 0) {
      return absl::PermissionDeniedError(
          absl::StrCat(method, " from ", TaskName(sender.job(), sender.task()), " refused by ", me,
                       ": only the chief (chief:0) may call it"));
    }
    if (chief_incarnation_ == 0) chief_incarnation_ = sender.incarnation();
    if (sender.incarnation() != chief_incarnation_) {
      return absl::PermissionDeniedError(
          absl::StrCat(method, " from chief incarnation ", sender.incarnation(), " refused by ", me,
                       ": it obeys chief incarnation ", chief_incarnation_));
    }
    return absl::OkStatus();
  }

  // The training thread: checks the spec, reads this worker's shard of the data and checks it,
  // answers every StartTraining call waiting for that, then trains.
  void Run(const TrainingSpec& spec) {
    absl::Status s = ValidateSpec(spec, static_cast<int>(options_.ps_addresses.size()));
    absl::StatusOr<Examples> data = absl::UnknownError("not read");
    if (s.ok()) {
      data = ReadShard(spec);
      s = data.status();
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
      start_status_ = s;
      start_response_ = response;
      waiting.swap(waiting_starts_);
    }
    for (WaitingStart& w : waiting) {
      *w.response = response;
      w.done(s);
    }
    if (!s.ok()) {
      spdlog::error("cannot start training: {}", std::string(s.message()));
      return;
    }
    TrainerOptions topts;
    topts.task = options_.task;
    topts.ps_addresses = options_.ps_addresses;
    topts.stop = &stop_;
    topts.cancel = &cancel_;
    const absl::Duration timeout = absl::Seconds(spec.rpc_timeout_s());
    topts.report = [this, timeout](const ProgressRequest& r) {
      RecordProgress(r);
      return Report(r, timeout);
    };
    topts.next_task = [this, timeout] { return NextTask(timeout); };
    topts.task_done = [this, timeout](const TaskDoneRequest& r) { return TaskDone(r, timeout); };
    Train(spec, *data, topts);
  }

  // Every `every` until the worker stops: a Heartbeat to the chief. A refusal (this process was
  // declared dead) ends the worker: its task is someone else's now.
  void HeartbeatLoop(absl::Duration every) {
    HeartbeatRequest req;
    *req.mutable_sender() = MakeSender("worker", options_.task);
    while (!stop_) {
      HeartbeatResponse resp;
      const absl::Status s =
          FromGrpcStatus(master_->Heartbeat(ContextWithTimeout(every).get(), req, &resp),
                         "Heartbeat", "chief " + options_.chief_address);
      if (absl::IsFailedPrecondition(s) || absl::IsPermissionDenied(s)) {
        spdlog::error("{}", std::string(s.message()));
        stop_ = true;
        cancel_.Cancel();
        ShutdownOnce(std::string(s.message()), false);
        return;
      }
      if (s.ok() && resp.stop()) return;
      for (absl::Time end = absl::Now() + every; !stop_ && absl::Now() < end;) {
        absl::SleepFor(std::min(absl::Milliseconds(50), every));
      }
    }
  }

  // The next task of the chief's queue, asking again while it says WAIT; nullopt once every task
  // is applied (or the worker stops).
  absl::StatusOr<std::optional<TaskAssignment>> NextTask(absl::Duration timeout) {
    NextTaskRequest req;
    *req.mutable_sender() = MakeSender("worker", options_.task);
    while (!stop_) {
      NextTaskResponse resp;
      absl::Status s = RetryUntil(timeout, "the chief at " + options_.chief_address, [&] {
        return FromGrpcStatus(
            master_->NextTask(ContextWithTimeout(kReportAttempt, true).get(), req, &resp),
            "NextTask", "chief " + options_.chief_address);
      });
      if (!s.ok()) return s;
      if (resp.kind() == NextTaskResponse::TASK) return resp.task();
      if (resp.kind() == NextTaskResponse::FINISHED) break;
      absl::SleepFor(absl::Seconds(std::clamp(resp.retry_after_s(), 0.01, 1.0)));
    }
    return std::nullopt;
  }

  absl::Status TaskDone(const TaskDoneRequest& req, absl::Duration timeout) {
    return RetryUntil(timeout, "the chief at " + options_.chief_address, [&] {
      TaskDoneResponse resp;
      return FromGrpcStatus(
          master_->TaskDone(ContextWithTimeout(kReportAttempt, true).get(), req, &resp), "TaskDone",
          "chief " + options_.chief_address);
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
  bool Report(const ProgressRequest& r, absl::Duration timeout) {
    ProgressResponse resp;
    const absl::Time end = absl::Now() + timeout;
    absl::Status s =
        RetryUntil(timeout, "the chief at " + options_.chief_address, [&]() -> absl::Status {
          // Told to stop (the chief ended the job): no one is waiting for this report.
          if (stop_) return absl::CancelledError("the worker is stopping");
          const absl::Duration attempt = std::min(kReportAttempt, end - absl::Now());
          return FromGrpcStatus(
              master_->ReportProgress(ContextWithTimeout(attempt, /*wait_for_ready=*/true).get(), r,
                                      &resp),
              "ReportProgress", "chief " + options_.chief_address);
        });
    if (stop_) return false;
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

  std::atomic<bool> stop_{false};
  CallCanceller cancel_;  // ends the trainer's calls in flight when the job ends
  std::once_flag shutdown_once_;

  mutable absl::Mutex progress_mu_;
  Progress progress_ ABSL_GUARDED_BY(progress_mu_);
  absl::Time progress_at_ ABSL_GUARDED_BY(progress_mu_) = absl::InfinitePast();

  absl::Mutex mu_;
  uint64_t chief_incarnation_ ABSL_GUARDED_BY(mu_) = 0;  // 0: not known yet
  // The outcome of checking the first StartTraining's spec and data, once known.
  std::optional<absl::Status> start_status_ ABSL_GUARDED_BY(mu_);
  StartTrainingResponse start_response_ ABSL_GUARDED_BY(mu_);  // with an OK start_status_
  // StartTraining calls waiting for that outcome.
  struct WaitingStart {
    StartTrainingResponse* response;  // alive until `done` runs
    FinishFn done;
  };
  std::vector<WaitingStart> waiting_starts_ ABSL_GUARDED_BY(mu_);
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  // Started by the first StartTraining (started_ makes it the only one); joined on destruction,
  // after the server stopped calling.
  std::thread thread_;
  std::thread heartbeat_;  // with the task queue: started with thread_, joined on destruction
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
