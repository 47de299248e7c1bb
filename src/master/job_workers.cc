// The job loop's workers: their start, the wait for them (with rollbacks and replacements),
// their reports summed, the PS counters and the evaluation.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/session.h"
#include "common/checkpoint_manifest.h"
#include "common/limits.h"
#include "master/job.h"
#include "master/progress.h"
#include "master/specs.h"
#include "spdlog/spdlog.h"

namespace pstrain {
namespace {

// A gap this long between two passes of the job loop means the chief itself did not run
// (SIGSTOP, a starved machine): that time is not counted as silence of the workers.
constexpr absl::Duration kLoopStall = absl::Seconds(5);

}  // namespace

// Sync: one epoch is as many steps as the largest data shard needs (with the task queue: as
// the gradients of every task over the gradients per step), each step one update. Async and
// ssp: every push of every worker is an update.
int64_t Job::SyncSteps() const {
  const int64_t workers = static_cast<int64_t>(workers_.size());
  const int64_t b = config_.batch_size;
  const int64_t n = model_job_->train_records();
  if (task_rows_ > 0) {
    const int64_t replicas =
        config_.replicas_to_aggregate > 0 ? config_.replicas_to_aggregate : workers;
    int64_t batches = 0;
    for (int64_t begin = 0; begin < n; begin += task_rows_) {
      batches += CeilDiv(std::min(task_rows_, n - begin), b);
    }
    return config_.epochs * CeilDiv(batches, replicas);
  }
  return config_.epochs * CeilDiv(CeilDiv(n, workers), b);
}

int64_t Job::GlobalSteps() const {
  if (config_.mode == "sync") return SyncSteps();
  const int64_t n = model_job_->train_records(), b = config_.batch_size;
  // The pieces the data is cut into: tasks, or one shard per worker.
  const int64_t pieces =
      task_rows_ > 0 ? CeilDiv(n, task_rows_) : static_cast<int64_t>(workers_.size());
  int64_t steps = 0;
  for (int64_t p = 0; p < pieces; ++p) {
    const int64_t rows = task_rows_ > 0 ? std::min(task_rows_, n - p * task_rows_)
                                        : n * (p + 1) / pieces - n * p / pieces;
    steps += config_.epochs * CeilDiv(rows, b);
  }
  return steps;
}

// A cosine schedule without --lr_total_steps ends with the job.
void Job::SetScheduleLength() {
  LearningRateSchedule* s = config_.optimizer.mutable_schedule();
  if (s->kind() == "cosine" && s->total_steps() == 0) {
    s->set_total_steps(GlobalSteps());
    spdlog::info("cosine learning-rate schedule over {} global steps", s->total_steps());
  }
}

void Job::WarnIfUnbalanced() {
  if (std::optional<std::string> w = placer_->Imbalance()) spdlog::warn("{}", *w);
}

absl::Status Job::StartReplacements(std::vector<absl::Time>* alive, absl::Time now) {
  const std::vector<Sender> workers = coordinator_->Workers();
  const std::vector<bool> live = coordinator_->LiveWorkers();
  for (size_t t = 0; t < workers.size(); ++t) {
    if (!live[t]) (*alive)[t] = now;
    if (!live[t] || workers[t].incarnation() == started_[t]) continue;
    ReplaceWorkerRequest req;
    *req.mutable_sender() = Chief();
    *req.mutable_worker() = workers[t];
    for (size_t p = 0; p < ps_.size(); ++p) {
      ReplaceWorkerResponse resp;
      absl::Status s = CallWithRetry(
          config_.rpc_timeout, "ReplaceWorker", TaskName("ps", p),
          [&](grpc::ClientContext* ctx) { return ps_[p]->ReplaceWorker(ctx, req, &resp); });
      if (!s.ok()) return s;
    }
    coordinator_->AnnounceWorkers({workers[t]});
    started_[t] = workers[t].incarnation();
    (*alive)[t] = now;
    if (model_job_ == nullptr) {  // a client program: it takes tasks by itself
      spdlog::info("{} replaced by incarnation {}", TaskName("worker", t),
                   workers[t].incarnation());
      continue;
    }
    StartTrainingResponse resp;
    if (absl::Status s = StartWorker(t, &resp); !s.ok()) return s;
    spdlog::info("{} replaced by incarnation {}, started on the task queue", TaskName("worker", t),
                 workers[t].incarnation());
  }
  return absl::OkStatus();
}

absl::Status Job::StartWorkers(int64_t* bad_lines_skipped) {
  TrainingSpec spec;
  model_job_->FillSpec(&spec);
  spec.set_num_shards(static_cast<int>(workers_.size()));
  spec.set_batch_size(config_.batch_size);
  spec.set_epochs(config_.epochs);
  spec.set_report_every(config_.report_every);
  spec.set_rpc_timeout_s(absl::ToDoubleSeconds(config_.task_timeout));
  spec.set_mode(config_.mode);
  spec.set_stop_on_nonfinite(config_.stop_on_nonfinite);
  spec.set_push_dtype(config_.push_dtype);
  spec.set_overlap_pull(config_.overlap_pull);
  spec.set_pipeline_push(config_.pipeline_push);
  spec.set_push_bucket_bytes(config_.push_bucket_bytes);
  if (task_rows_ > 0) {
    // The ledger says when the job ends: no step count is fixed in advance.
    spec.set_num_shards(1);
    spec.set_task_queue(true);
    spec.set_heartbeat_interval_s(config_.heartbeat_secs);
  } else if (config_.mode == "sync") {
    spec.set_total_steps(SyncSteps());
  }
  spec_ = std::move(spec);
  const std::vector<Sender> registered = coordinator_->Workers();
  const std::vector<bool> live = coordinator_->LiveWorkers();
  started_.assign(workers_.size(), 0);
  // Every worker is started at once: a StartTraining is answered once the worker has read its
  // data, and the first worker answered trains while the others read theirs. Meanwhile the
  // checkpoint schedule is kept: a fast worker may train much of the job before the last one
  // is started (started one after another, a short job saved nothing before its end).
  const size_t n = workers_.size();
  std::vector<StartTrainingResponse> resp(n);
  std::vector<absl::Status> started(n);
  std::atomic<size_t> pending{0};
  std::vector<std::thread> starts;
  for (size_t t = 0; t < n; ++t) {
    // A worker declared dead is started once its replacement registers (StartReplacements).
    if (!live[t]) continue;
    ++pending;
    starts.emplace_back([this, t, &resp, &started, &pending] {
      started[t] = StartWorker(t, &resp[t]);
      --pending;
    });
  }
  while (pending > 0) KeepCheckpointSchedule(coordinator_->WaitForReport(absl::Milliseconds(50)));
  for (std::thread& s : starts) s.join();
  for (size_t t = 0; t < n; ++t) {
    if (!live[t]) continue;
    if (!started[t].ok()) return started[t];
    started_[t] = registered[t].incarnation();
    // With the task queue every worker reads every record: each skipped the same lines.
    *bad_lines_skipped = spec_.task_queue()
                             ? std::max(*bad_lines_skipped, resp[t].bad_lines_skipped())
                             : *bad_lines_skipped + resp[t].bad_lines_skipped();
  }
  return absl::OkStatus();
}

void Job::KeepCheckpointSchedule(const std::vector<WorkerProgress>& progress) {
  if (checkpoints_ == nullptr) return;
  JobResult so_far;
  Summarize(progress, &so_far);
  checkpoints_->MaybeSave(so_far.global_step);
}

// Starts worker `t` on spec_. Retried: a worker repeats nothing for a StartTraining it
// already took from this chief in this generation.
absl::Status Job::StartWorker(size_t t, StartTrainingResponse* resp) {
  StartTrainingRequest req;
  *req.mutable_sender() = Chief();
  *req.mutable_spec() = spec_;
  req.mutable_spec()->set_shard_index(spec_.task_queue() ? 0 : static_cast<int>(t));
  req.mutable_spec()->set_seed(config_.seed * 1000003 + t);
  if (static_cast<int>(t) == config_.slow_worker) {
    req.mutable_spec()->set_step_delay_ms(config_.slow_worker_delay_ms);
  }
  return CallAsNewChief(
      config_.rpc_timeout, "StartTraining", TaskName("worker", t),
      [&](grpc::ClientContext* ctx) { return workers_[t]->StartTraining(ctx, req, resp); });
}

absl::Status Job::WaitForWorkers(absl::Time start, absl::Time alive_since, JobResult* result) {
  absl::Time last_line = absl::InfinitePast();
  absl::Time last_pass = absl::Now();
  // Per worker: the latest time it is known not to be silent (started, or seen at a barrier,
  // or the chief itself just resumed).
  std::vector<absl::Time> alive(workers_.size(), alive_since);
  absl::Time done_since = absl::InfiniteFuture();
  result->total_steps = model_job_ != nullptr ? GlobalSteps() : 0;
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
    if (Recovery()) {
      if (std::optional<std::string> reason = coordinator_->RollbackReason()) {
        if (absl::Status s = Rollback(*reason, &alive); !s.ok()) return s;
        last_pass = absl::Now();
        continue;
      }
    }
    for (size_t t = 0; t < progress.size(); ++t) {
      if (!progress[t].barrier.empty()) alive[t] = now;
    }
    // Sync and ssp: a worker's new incarnation is a rollback (the coordinator asks for it).
    if (task_rows_ > 0 && config_.mode == "async") {
      if (absl::Status s = StartReplacements(&alive, now); !s.ok()) return s;
    }
    if (absl::Status s = CheckWorkers(progress, alive, now, config_.task_timeout); !s.ok()) {
      return s;
    }
    const bool all_done = Summarize(progress, result) || TasksDone(progress);
    if (absl::Status s = CheckLedgerMoves(progress, now, &done_since); !s.ok()) return s;
    SaveFinishedLedger();
    if (model_job_ == nullptr && result->global_step > 0) WarnNotCreated();
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

// Task queue: every live worker reported done while the ledger is not finished for longer than
// the task timeout (after a rollback they report the new run): an error saying what is left.
absl::Status Job::CheckLedgerMoves(const std::vector<WorkerProgress>& progress, absl::Time now,
                                   absl::Time* done_since) const {
  if (task_rows_ <= 0 || coordinator_->TasksFinished()) return absl::OkStatus();
  const std::vector<bool> live = coordinator_->LiveWorkers();
  bool any_live = false;
  for (size_t t = 0; t < progress.size(); ++t) {
    if (!live[t]) continue;
    any_live = true;
    if (!progress[t].done) {
      *done_since = absl::InfiniteFuture();
      return absl::OkStatus();
    }
  }
  if (!any_live) return absl::OkStatus();  // the replacements are awaited (CheckWorkers)
  *done_since = std::min(*done_since, now);
  if (now - *done_since <= config_.task_timeout) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("every worker is done but the task queue is not: ",
                                          coordinator_->LedgerCheck()));
}

// Saves of the finished ledger tried before the programs are told the tasks are finished
// without one.
constexpr int kFinishedSaveAttempts = 5;

void Job::SaveFinishedLedger() {
  if (!coordinator_->FinishedHeld() || !coordinator_->TasksFinished()) return;
  absl::StatusOr<std::string> saved = checkpoints_->SaveAndWait();
  if (saved.ok()) {
    // The checkpoint must hold the finished ledger itself: a rollback to one that holds less
    // would find tasks to redo and no program left in its task loop to redo them.
    absl::StatusOr<Manifest> m = ReadManifest(*saved);
    if (!m.ok()) {
      saved = m.status();
    } else if (!m->ledger.is_object() || !m->ledger.contains("tasks") ||
               m->ledger.value("applied", nlohmann::json()) != m->ledger["tasks"]) {
      saved =
          absl::FailedPreconditionError(absl::StrCat(*saved, " does not hold the finished ledger"));
    }
  }
  if (saved.ok()) {
    spdlog::info("every task is applied: {} holds it before the programs hear so", *saved);
  } else if (++finished_save_failures_ < kFinishedSaveAttempts) {
    return;  // tried again at the next pass (a PS that just died rolls the job back meanwhile)
  } else {
    spdlog::warn(
        "the checkpoint of the finished tasks failed {} times ({}); the programs end "
        "their task loops without it",
        finished_save_failures_, std::string(saved.status().message()));
  }
  finished_save_failures_ = 0;
  coordinator_->FinishedSaved();
}

// Task queue: the ledger is finished and every worker done or declared dead.
bool Job::TasksDone(const std::vector<WorkerProgress>& progress) const {
  if (task_rows_ <= 0 || !coordinator_->TasksFinished()) return false;
  const std::vector<bool> live = coordinator_->LiveWorkers();
  for (size_t t = 0; t < progress.size(); ++t) {
    if (live[t] && !progress[t].done) return false;
  }
  return true;
}

// Sums the reports into *result; true once every worker is done (without the task queue: with
// it the ledger decides).
bool Job::Summarize(const std::vector<WorkerProgress>& progress, JobResult* result) const {
  bool all_done = true;
  double loss = 0;  // the mean of the workers that reported a step
  int reporting = 0;
  int64_t max_steps = 0;
  result->steps = result->examples = result->nonfinite_skipped = result->worker_pushes = 0;
  result->worker_steps.clear();
  result->worker_stale_steps.clear();
  for (const WorkerProgress& p : progress) {
    all_done = all_done && p.done;
    if (p.steps > 0 && p.has_loss) {
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
  result->loss_reported = reporting > 0;
  // Sync: every worker steps with the model, so the fastest is at the global step. Async and
  // ssp: every push is an update.
  result->global_step = config_.mode == "sync" ? max_steps : result->worker_pushes;
  return all_done && task_rows_ <= 0;
}

// Every PS's counters: sums, the largest clock gap, and the tables' counters.
absl::Status Job::CollectStats(JobResult* result) {
  SessionOptions o;
  o.ps_addresses = ps_addresses_;
  o.sender = Chief();
  o.timeout = config_.rpc_timeout;
  ParameterSession client(std::move(o), {}, {});
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
    total->set_duplicates_dropped(total->duplicates_dropped() + s.duplicates_dropped());
  }
  result->tables = SumTableStats(*stats);
  return absl::OkStatus();
}

// The held-out metrics of the model as trained.
absl::Status Job::Evaluate(JobResult* result) {
  absl::StatusOr<Metrics> m = model_job_->Evaluate(ps_addresses_);
  if (!m.ok()) return m.status();
  const ModelTask task = model_job_->model().task();
  result->classification = task == ModelTask::kClassification;
  result->binary = task == ModelTask::kBinary || m->scored;  // or a classifier of two classes
  result->regression = task == ModelTask::kRegression;
  result->test_accuracy = m->accuracy;
  result->auc = m->auc;
  result->log_loss = m->log_loss;
  result->base_log_loss = m->base_log_loss;
  result->macro_f1 = m->macro_f1;
  result->rmse = m->rmse;
  result->mae = m->mae;
  result->test_examples = m->examples;
  result->bad_lines_skipped += model_job_->test_bad_lines_skipped();
  return absl::OkStatus();
}

}  // namespace pstrain
