// The Coordinator's task queue: EnableTasks and the NextTask, TaskDone and Heartbeat calls, over
// a TaskLedger held under the Coordinator's lock.
#include "absl/strings/str_cat.h"
#include "common/keys.h"
#include "common/rpc.h"
#include "master/coordinator.h"

namespace pstrain {
namespace {

// How long a worker told WAIT waits before it asks again.
constexpr double kRetryAfterSeconds = 0.05;

}  // namespace

absl::Status Coordinator::EnableTasks(const LedgerShape& shape, absl::Duration heartbeat_interval,
                                      absl::Duration heartbeat_timeout) {
  if (heartbeat_interval <= absl::ZeroDuration() || heartbeat_interval >= heartbeat_timeout) {
    return absl::InvalidArgumentError(
        absl::StrCat("the heartbeat interval (", absl::FormatDuration(heartbeat_interval),
                     ") must be positive and shorter than its timeout (",
                     absl::FormatDuration(heartbeat_timeout), ")"));
  }
  absl::StatusOr<TaskLedger> ledger = TaskLedger::Create(shape, heartbeat_timeout);
  if (!ledger.ok()) return ledger.status();
  absl::MutexLock lock(&mu_);
  if (ledger_) return absl::FailedPreconditionError("the task queue is on already");
  if (shape.num_workers != num_workers_) {
    return absl::InvalidArgumentError(absl::StrCat("a task ledger for ", shape.num_workers,
                                                   " workers in a job of ", num_workers_));
  }
  const absl::Time now = absl::Now();
  for (int t = 0; t < num_workers_; ++t) {
    if (workers_[t].incarnation() == 0) continue;
    if (absl::Status s = ledger->Register(t, workers_[t].incarnation(), now); !s.ok()) return s;
  }
  ledger_ = *std::move(ledger);
  SyncFailures();
  shape_ = shape;
  heartbeat_interval_ = heartbeat_interval;
  ledger_timeout_ = heartbeat_timeout;
  return absl::OkStatus();
}

void Coordinator::SetTaskSeed(uint64_t job_seed) {
  absl::MutexLock lock(&mu_);
  task_seed_ = job_seed;
}

void Coordinator::AnnounceWorkers(const std::vector<Sender>& workers) {
  absl::MutexLock lock(&mu_);
  generation_open_ = true;
  announced_.resize(workers_.size(), 0);
  for (const Sender& w : workers) {
    // An unregistered worker (incarnation 0) has nothing to announce.
    if (w.incarnation() != 0 && w.task() >= 0 && w.task() < num_workers_) {
      announced_[w.task()] = w.incarnation();
    }
  }
}

void Coordinator::HoldFinishedUntilSaved() {
  absl::MutexLock lock(&mu_);
  hold_finished_ = true;
}

bool Coordinator::FinishedHeld() const {
  absl::MutexLock lock(&mu_);
  return hold_finished_ && !finished_saved_;
}

void Coordinator::FinishedSaved() {
  absl::MutexLock lock(&mu_);
  finished_saved_ = true;
}

void Coordinator::WaitUntilToldStop(absl::Duration timeout) {
  auto told = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    for (int t = 0; t < num_workers_; ++t) {
      if (progress_[t].done && !told_stop_[t]) return false;
    }
    return true;
  };
  absl::MutexLock lock(&mu_);
  if (!ledger_) return;  // without tasks a program's Done does not wait to hear it
  mu_.AwaitWithTimeout(absl::Condition(&told), timeout);
}

absl::Status Coordinator::NoTaskQueue(const Sender& s, const std::string& what) const {
  if (ready_)
    return absl::FailedPreconditionError(absl::StrCat(what, ": this job has no task queue"));
  // A worker's run for a chief that died, before this one (restarted) starts its own: the run
  // is over, as one of a rolled-back generation is.
  return absl::FailedPreconditionError(
      absl::StrCat(what, " from ", TaskName(s.job(), s.task()), " of generation ", s.generation(),
                   ": this chief runs no generation yet (it is starting)"));
}

absl::Status Coordinator::NextTask(const NextTaskRequest& req, NextTaskResponse* resp) {
  if (absl::Status s = CheckSenderPresent(req.has_sender(), req.sender(), "NextTask"); !s.ok()) {
    return s;
  }
  // A sender outside the cluster is refused as such, whether or not the job has a task queue.
  if (absl::Status s = CheckWorkerTask(req.sender(), "NextTask"); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  if (!ledger_) return NoTaskQueue(req.sender(), "NextTask");
  if (absl::Status s = CheckWorker(req.sender(), "NextTask"); !s.ok()) return s;
  if (absl::Status s = CheckGeneration(req.sender(), "NextTask"); !s.ok()) return s;
  if (absl::Status s = CheckAndSee(req.sender(), "NextTask"); !s.ok()) return s;
  const int w = req.sender().task();
  if (!announced_.empty() && announced_[w] != req.sender().incarnation()) {
    // A restarted worker that the PS do not know yet (the job loop tells them within a second).
    resp->set_kind(NextTaskResponse::WAIT);
    resp->set_retry_after_s(kRetryAfterSeconds);
    return absl::OkStatus();
  }
  absl::StatusOr<pstrain::NextTask> next =
      ledger_->Next(req.sender().task(), req.sender().incarnation(), absl::Now());
  if (!next.ok()) return next.status();
  switch (next->kind) {
    case pstrain::NextTask::Kind::kTask: {
      resp->set_kind(NextTaskResponse::TASK);
      TaskAssignment* t = resp->mutable_task();
      t->set_epoch(next->task.epoch);
      t->set_task(next->task.id);
      t->set_begin(next->task.begin);
      t->set_end(next->task.end);
      t->set_seed(TaskSeed(task_seed_, next->task.epoch, next->task.id));
      break;
    }
    case pstrain::NextTask::Kind::kFinished:
      if (!hold_finished_ || finished_saved_) {
        resp->set_kind(NextTaskResponse::FINISHED);
        break;
      }
      [[fallthrough]];  // until the finished ledger is saved
    case pstrain::NextTask::Kind::kWait:
      resp->set_kind(NextTaskResponse::WAIT);
      resp->set_retry_after_s(kRetryAfterSeconds);
      break;
  }
  return absl::OkStatus();
}

absl::Status Coordinator::TaskDone(const TaskDoneRequest& req) {
  if (absl::Status s = CheckSenderPresent(req.has_sender(), req.sender(), "TaskDone"); !s.ok()) {
    return s;
  }
  // A sender outside the cluster is refused as such, whether or not the job has a task queue.
  if (absl::Status s = CheckWorkerTask(req.sender(), "TaskDone"); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  if (!ledger_) return NoTaskQueue(req.sender(), "TaskDone");
  if (absl::Status s = CheckWorker(req.sender(), "TaskDone"); !s.ok()) return s;
  if (absl::Status s = CheckGeneration(req.sender(), "TaskDone"); !s.ok()) return s;
  if (absl::Status s = CheckAndSee(req.sender(), "TaskDone"); !s.ok()) return s;
  return ledger_->Done(req.sender().task(), req.sender().incarnation(),
                       {req.epoch(), req.task(), req.steps(), req.examples()}, absl::Now());
}

absl::Status Coordinator::Heartbeat(const HeartbeatRequest& req, HeartbeatResponse* resp) {
  if (absl::Status s = CheckSenderPresent(req.has_sender(), req.sender(), "Heartbeat"); !s.ok()) {
    return s;
  }
  const Sender& s = req.sender();
  if (absl::Status st = CheckWorkerTask(s, "Heartbeat"); !st.ok()) return st;
  absl::MutexLock lock(&mu_);
  const uint64_t known =
      ledger_ ? ledger_->incarnation(s.task()) : workers_[s.task()].incarnation();
  if (known != s.incarnation() && !(ledger_ && ledger_->DeclaredDead(s.task(), s.incarnation()))) {
    resp->set_register_again(true);  // a chief that does not know this process
  } else if (absl::Status st = CheckAndSee(s, "Heartbeat"); !st.ok()) {
    return st;
  }
  resp->set_stop(stop_);
  if (stop_) told_stop_[s.task()] = true;
  resp->set_generation(generation_open_ ? generation_ : 0);
  if (ledger_) resp->set_heartbeat_interval_s(absl::ToDoubleSeconds(heartbeat_interval_));
  return absl::OkStatus();
}

nlohmann::json Coordinator::LedgerJson() const {
  absl::MutexLock lock(&mu_);
  return ledger_ ? ledger_->ToJson() : nlohmann::json();
}

std::string Coordinator::LedgerCheck() const {
  absl::MutexLock lock(&mu_);
  return ledger_ ? ledger_->CheckExactlyOnce() : "this job has no task queue";
}

bool Coordinator::TasksFinished() const {
  absl::MutexLock lock(&mu_);
  return ledger_ && ledger_->Finished();
}

std::vector<bool> Coordinator::LiveWorkers() const {
  absl::MutexLock lock(&mu_);
  std::vector<bool> live(num_workers_);
  for (int t = 0; t < num_workers_; ++t) {
    live[t] = ledger_ ? ledger_->Alive(t) : workers_[t].incarnation() != 0;
  }
  return live;
}

}  // namespace pstrain
