// The task queue of a Client (a chief started with --rows N, docs/recovery.md): heartbeats,
// NextTask and TaskDone, and the tags of the pushes made inside a task.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "client/client_impl.h"
#include "common/limits.h"

namespace pstrain {
namespace {

// The longest a WAIT answer makes NextTask sleep before it asks again.
constexpr absl::Duration kLongestWait = absl::Seconds(1);

std::string TaskString(const Task& t) {
  return absl::StrCat("task ", t.index, " of epoch ", t.epoch);
}

}  // namespace

std::vector<int64_t> Task::Rows() const {
  std::vector<int64_t> rows(static_cast<size_t>(std::max<int64_t>(0, end - begin)));
  std::iota(rows.begin(), rows.end(), begin);
  // Fisher-Yates with mt19937_64, spelled out so that every platform draws the same order.
  std::mt19937_64 rng(seed);
  for (size_t i = rows.size(); i > 1; --i) std::swap(rows[i - 1], rows[rng() % i]);
  return rows;
}

int64_t Task::num_batches() const {
  if (batch_size < 1 || end <= begin) return 0;
  return CeilDiv(end - begin, batch_size);
}

std::vector<int64_t> Task::Batch(int64_t k) const {
  if (k < 0 || k >= num_batches()) return {};
  const std::vector<int64_t> rows = Rows();
  const int64_t from = k * batch_size;
  const int64_t to = std::min<int64_t>(from + batch_size, static_cast<int64_t>(rows.size()));
  return {rows.begin() + from, rows.begin() + to};
}

Client::Impl::~Impl() { StopHeartbeats(); }

absl::Status Client::Impl::JoinTasks() {
  HeartbeatRequest req;
  *req.mutable_sender() = sender_;
  HeartbeatResponse resp;
  // With tasks (a heartbeat interval), generation 0 is a rollback restoring the parameters:
  // the program starts in the generation that follows.
  const absl::Time until = absl::Now() + options_.timeout;
  for (;;) {
    absl::Status s =
        FromGrpcStatus(master_->Heartbeat(Context().get(), req, &resp), "Heartbeat", chief_);
    if (!s.ok()) return s;
    if (resp.generation() != 0 || resp.heartbeat_interval_s() <= 0 || resp.stop() ||
        absl::Now() > until) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  sender_.set_generation(resp.generation());
  const double interval = resp.heartbeat_interval_s();
  if (std::isfinite(interval) && interval > 0) {
    heartbeat_interval_ =
        std::clamp(absl::Seconds(interval), absl::Milliseconds(10), absl::Seconds(60));
    heartbeat_ = std::thread([this] { SendHeartbeats(); });
  }
  RebuildPsClient();  // its requests carry the generation
  return absl::OkStatus();
}

void Client::Impl::SendHeartbeats() {
  HeartbeatRequest req;
  *req.mutable_sender() = sender_;  // set before this thread started, constant since
  absl::MutexLock lock(&heartbeat_mu_);
  while (!heartbeat_mu_.AwaitWithTimeout(absl::Condition(&heartbeat_stop_), heartbeat_interval_)) {
    heartbeat_mu_.Unlock();
    // A failed heartbeat is not this thread's to report: a chief that is gone shows in the
    // program's next call. A restarted chief waits for every worker to register before it
    // starts: this thread registers while the program's own thread may be busy.
    (void)Beat(req.sender(), heartbeat_interval_);
    heartbeat_mu_.Lock();
  }
}

std::optional<HeartbeatResponse> Client::Impl::Beat(const Sender& sender, absl::Duration timeout,
                                                    bool* registered) {
  HeartbeatRequest req;
  *req.mutable_sender() = sender;
  HeartbeatResponse resp;
  if (!master_->Heartbeat(ContextWithTimeout(timeout).get(), req, &resp).ok()) return std::nullopt;
  const bool again = resp.register_again() && RegisterAgain(sender).ok();
  if (registered != nullptr) *registered = again;
  return resp;
}

absl::Status Client::Impl::RegisterAgain(const Sender& sender) {
  RegisterRequest req;
  *req.mutable_sender() = sender;
  RegisterResponse resp;
  absl::Status s = FromGrpcStatus(
      master_->Register(ContextWithTimeout(std::max(heartbeat_interval_, absl::Seconds(5))).get(),
                        req, &resp),
      "Register", chief_);
  if (!s.ok()) return s;
  absl::MutexLock lock(&chief_mu_);
  if (resp.chief_incarnation() != chief_incarnation_) {
    chief_incarnation_ = resp.chief_incarnation();
    new_chief_ = true;
  }
  return absl::OkStatus();
}

absl::Status Client::Impl::CreateAgain() {
  for (size_t i = 0; i < var_specs_.size(); ++i) {
    absl::StatusOr<VariableRef> ref = SendCreateVariable(var_specs_[i], variables_[i].shape);
    if (!ref.ok()) return ref.status();
    variables_[i] = *std::move(ref);  // placed anew by the chief, the same for every program
  }
  for (const TableDef& def : table_defs_) {
    if (absl::Status s = SendCreateTable(def); !s.ok()) return s;
  }
  return absl::OkStatus();
}

void Client::Impl::StopHeartbeats() {
  {
    absl::MutexLock lock(&heartbeat_mu_);
    heartbeat_stop_ = true;
  }
  if (heartbeat_.joinable()) heartbeat_.join();
}

absl::Status Client::Impl::AbandonIfRolledBack(absl::Status s) {
  if (s.ok() || !has_tasks()) return s;
  // What a PS that died (or was restarted, or reset by a rollback) answers: the chief then
  // rolls the job back, which this worker waits for, within its timeout. Any other error is
  // the caller's.
  const bool ps_lost = absl::IsNotFound(s) || absl::IsUnavailable(s) ||
                       absl::IsDeadlineExceeded(s) || absl::IsFailedPrecondition(s) ||
                       absl::IsAborted(s) || absl::IsCancelled(s);
  absl::Time until = absl::Now() + (ps_lost ? options_.timeout : absl::ZeroDuration());
  for (absl::Duration pause = absl::Milliseconds(20);; pause = std::min(2 * pause, kLongestWait)) {
    const std::optional<HeartbeatResponse> resp = Beat(sender_, options_.timeout);
    // A restarted chief runs no generation (0) until it has reset the PS.
    if (resp && resp->generation() != 0 && resp->generation() != sender_.generation()) {
      abandoned_in_task_ = abandoned_in_task_ || task_.has_value();
      abandoned_ = true;
      next_generation_ = resp->generation();
      task_.reset();
      return absl::OkStatus();
    }
    // Generation 0: a rollback is restoring the parameters (or a restarted chief resetting the
    // PS), which a large checkpoint makes long. Waited for while the chief answers.
    if (ps_lost && resp && resp->generation() == 0) {
      until = std::max(until, absl::Now() + options_.timeout);
    }
    if ((resp && resp->stop()) || absl::Now() + pause > until) return s;
    absl::SleepFor(pause);
  }
}

absl::Status Client::Impl::AdoptGeneration() {
  if (!abandoned_) return absl::OkStatus();
  sender_.set_generation(next_generation_);
  bool new_chief = false;
  {
    absl::MutexLock lock(&chief_mu_);
    new_chief = std::exchange(new_chief_, false);
  }
  if (new_chief) {
    if (absl::Status s = CreateAgain(); !s.ok()) {
      absl::MutexLock lock(&chief_mu_);
      new_chief_ = true;  // the next NextTask tries again
      return s;
    }
  }
  RebuildPsClient();
  if (!tables_.empty()) RebuildTableClient();
  // The PS restored their state: the next reads take the step that is there.
  after_barrier_ = tables_after_barrier_ = true;
  next_min_version_ = next_table_version_ = 0;
  pushed_ = Pushed::kNone;
  abandoned_ = abandoned_in_task_ = false;
  return absl::OkStatus();
}

absl::Status Client::Impl::AdoptOutsideTask() {
  return abandoned_ && !abandoned_in_task_ ? AdoptGeneration() : absl::OkStatus();
}

absl::Status Client::Impl::DoneWithTasks(const absl::Status& outcome) {
  StopHeartbeats();  // this loop sends them
  // The PS may be gone (the chief ended the job) or restarted: the job's end is the chief's.
  if (!stopping_) (void)session_->Leave();
  const std::string error = outcome.ok() ? "" : std::string(outcome.message());
  bool reported = false;
  absl::Time until = absl::Now() + options_.timeout;  // the chief silent for this long: gone
  while (!stopping_) {
    if (!reported) reported = Report(outcome.ok(), error).ok();
    if (stopping_) break;
    bool registered = false;
    if (const std::optional<HeartbeatResponse> resp = Beat(sender_, options_.timeout, &registered);
        resp) {
      until = absl::Now() + options_.timeout;
      if (resp->stop()) break;
      if (registered) reported = false;
      // A rollback (or a restarted chief) forgets who was done: report again.
      if (resp->generation() != 0 && resp->generation() != sender_.generation()) {
        sender_.set_generation(resp->generation());
        reported = false;
      }
    }
    if (absl::Now() > until) {
      return absl::DeadlineExceededError(absl::StrCat("Done: the ", chief_, " did not answer for ",
                                                      absl::FormatDuration(options_.timeout),
                                                      " after this worker was done"));
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<PushTag>> Client::Impl::TagFor(Pushed kind) const {
  if (!has_tasks()) return std::optional<PushTag>();
  if (!task_) {
    return absl::FailedPreconditionError(
        "a push outside a task: this job hands out tasks (its chief has --rows); push inside "
        "one (Client::NextTask and TaskDone; Python: for task in client.tasks(batch_size))");
  }
  const Pushed other = kind == Pushed::kDense ? Pushed::kSparse : Pushed::kDense;
  // The second push of a step (dense and sparse) carries the step's batch.
  const int64_t batch = pushed_ == other ? task_steps_ - 1 : task_steps_;
  if (batch >= task_->num_batches()) {
    return absl::FailedPreconditionError(
        absl::StrCat(TaskString(*task_), " has ", task_->num_batches(), " batches of ",
                     task_->batch_size, " rows, all pushed: call TaskDone, then NextTask"));
  }
  PushTag tag;
  tag.set_epoch(task_->epoch);
  tag.set_task(task_->index);
  tag.set_batch(batch);
  return std::optional<PushTag>(std::move(tag));
}

absl::StatusOr<std::optional<Task>> Client::Impl::NextTask(int64_t batch_size) {
  if (absl::Status s = CheckUsable(); !s.ok()) return s;
  if (!has_tasks()) {
    return absl::FailedPreconditionError(
        "NextTask: this job has no task queue (start its chief with --rows N, the rows of the "
        "programs' data)");
  }
  if (batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("NextTask: batch size ", batch_size, " must be at least 1"));
  }
  if (absl::Status s = CheckIdle("NextTask"); !s.ok()) return s;
  if (absl::Status s = AdoptGeneration(); !s.ok()) return s;
  // Sync and ssp: a worker with no task must not hold back the steps or clocks of the others.
  const bool pause_when_waiting = mode_ == "sync" || mode_ == "ssp";
  bool paused = false;
  while (true) {
    NextTaskRequest req;
    *req.mutable_sender() = sender_;
    NextTaskResponse resp;
    absl::Status s =
        FromGrpcStatus(master_->NextTask(Context().get(), req, &resp), "NextTask", chief_);
    if (!s.ok()) {
      // Rolled back while this worker waited for a task: ask the new generation.
      if (absl::Status a = AbandonIfRolledBack(s); !a.ok()) return a;
      if (absl::Status a = AdoptGeneration(); !a.ok()) return a;
      paused = false;  // the PS of the new generation hold this worker in their steps again
      continue;
    }
    if (resp.kind() == NextTaskResponse::FINISHED) {
      task_.reset();
      return std::optional<Task>();
    }
    if (resp.kind() == NextTaskResponse::TASK) {
      const TaskAssignment& a = resp.task();
      if (a.begin() < 0 || a.end() <= a.begin() || a.epoch() < 0 || a.task() < 0) {
        return absl::InternalError(absl::StrCat("the ", chief_, " handed out rows [", a.begin(),
                                                ", ", a.end(), ") as task ", a.task(), " of epoch ",
                                                a.epoch()));
      }
      // The task in hand again (not finished) starts over: the PS drop the batches it applied.
      task_ = Task{.epoch = a.epoch(),
                   .index = a.task(),
                   .begin = a.begin(),
                   .end = a.end(),
                   .seed = a.seed(),
                   .batch_size = batch_size};
      task_steps_ = 0;
      pushed_ = Pushed::kNone;
      return task_;
    }
    if (pause_when_waiting && !paused) {
      absl::Status left = session_->Leave(/*pause=*/true);
      // A restarted worker the PS do not know yet holds back no step: nothing to leave.
      if (absl::IsPermissionDenied(left)) left = absl::OkStatus();
      left = AbandonIfRolledBack(std::move(left));
      if (!left.ok()) return left;
      if (abandoned_) {
        if (absl::Status a = AdoptGeneration(); !a.ok()) return a;
        continue;
      }
      after_barrier_ = tables_after_barrier_ = true;  // the next reads do not wait for a step
      paused = true;
    }
    const double after = std::isfinite(resp.retry_after_s()) ? resp.retry_after_s() : 0;
    absl::SleepFor(std::clamp(absl::Seconds(after), absl::Milliseconds(10), kLongestWait));
  }
}

absl::Status Client::Impl::TaskDone() {
  if (absl::Status s = CheckUsable(); !s.ok()) return s;
  if (!has_tasks()) {
    return absl::FailedPreconditionError(
        "TaskDone: this job has no task queue (start its chief with --rows N)");
  }
  if (abandoned_) return absl::OkStatus();  // nothing to report: the job rolled back
  if (!task_) {
    return absl::FailedPreconditionError("TaskDone without a task in hand: NextTask first");
  }
  if (absl::Status s = CheckIdle("TaskDone"); !s.ok()) return s;
  const int64_t batches = task_->num_batches();
  if (task_steps_ != batches) {
    return absl::InvalidArgumentError(absl::StrCat("TaskDone: ", TaskString(*task_), " has ",
                                                   batches, " batches of ", task_->batch_size,
                                                   " rows; ", task_steps_, " were pushed"));
  }
  TaskDoneRequest req;
  *req.mutable_sender() = sender_;
  req.set_epoch(task_->epoch);
  req.set_task(task_->index);
  req.set_steps(batches);
  req.set_examples(task_->end - task_->begin);
  TaskDoneResponse resp;
  absl::Status s = AbandonIfRolledBack(
      FromGrpcStatus(master_->TaskDone(Context().get(), req, &resp), "TaskDone", chief_));
  if (s.ok()) task_.reset();
  return s;
}

}  // namespace pstrain
