// Coordinator: recovery generations, rollback reasons and the failures survived
// (docs/recovery.md).
#include "absl/strings/str_cat.h"
#include "common/rpc.h"
#include "master/coordinator.h"
#include "spdlog/spdlog.h"

namespace pstrain {

void Coordinator::EnableRecovery() {
  absl::MutexLock lock(&mu_);
  recovery_ = true;
}

std::optional<std::string> Coordinator::RollbackReason() const {
  absl::MutexLock lock(&mu_);
  return rollback_reason_;
}

void Coordinator::AskRollback(const std::string& why) {
  spdlog::warn("{}: the job rolls back to its latest checkpoint", why);
  if (!rollback_reason_) rollback_reason_ = why;
}

void Coordinator::NoteRestart(const Sender& s, uint64_t old_incarnation) {
  const std::string task = TaskName(s.job(), s.task());
  const std::string restarted =
      absl::StrCat(task, " restarted (incarnation ", s.incarnation(), ")");
  if (job_ended_) {
    ++restarts_after_end_;
    spdlog::warn("{} after the job's result was made: nothing to roll back", restarted);
    return;
  }
  if (s.job() == "ps" || (recovery_ && mode_ != "async")) {
    AskRollback(restarted);
    return;
  }
  ++counted_.workers_replaced;
  SyncFailures();
  spdlog::warn("{} rejoined as incarnation {} in place of incarnation {}, declared dead", task,
               s.incarnation(), old_incarnation);
}

absl::Status Coordinator::CheckGeneration(const Sender& s, const std::string& what) const {
  if (generation_ == 0 || s.generation() == generation_) return absl::OkStatus();
  const std::string from = absl::StrCat(what, " from ", TaskName(s.job(), s.task()), ": ");
  const std::string runs = absl::StrCat("the chief runs generation ", generation_);
  if (s.generation() == 0) {
    return absl::FailedPreconditionError(absl::StrCat(from, "no generation given; ", runs));
  }
  if (s.generation() > generation_) {
    return absl::FailedPreconditionError(absl::StrCat(
        from, "generation ", s.generation(), " is not this chief's (a restarted chief); ", runs));
  }
  return absl::FailedPreconditionError(
      absl::StrCat(from, "generation ", s.generation(), " was rolled back; ", runs));
}

absl::StatusOr<uint64_t> Coordinator::BeginGeneration(const nlohmann::json& ledger,
                                                      uint64_t above) {
  absl::MutexLock lock(&mu_);
  if (!ledger_) return absl::FailedPreconditionError("BeginGeneration: this job has no task queue");
  absl::StatusOr<TaskLedger> next = ledger.is_null()
                                        ? TaskLedger::Create(shape_, ledger_timeout_)
                                        : TaskLedger::FromJson(ledger, shape_, ledger_timeout_);
  if (!next.ok()) return next.status();
  if (generation_ == 0) {
    const FailureCounts& f = next->failures();
    carried_ = {f.workers_replaced, f.rollbacks, f.chief_restarts};
  } else {
    ++counted_.rollbacks;
  }
  next->KeepWorkers(*ledger_, absl::Now());
  ledger_ = *std::move(next);
  SyncFailures();
  for (WorkerProgress& p : progress_) p.done = false;
  rollback_reason_.reset();
  finished_saved_ = false;
  std::fill(announced_.begin(), announced_.end(), 0);  // until the job announces them again
  // A rollback's generation is heartbeat to the programs once its parameters are back: a read
  // of theirs before then would find a PS without them, or with their initial values.
  generation_open_ = generation_ == 0;
  generation_ = std::max(generation_, above) + 1;
  spdlog::info("generation {} starts, from {}", generation_,
               ledger.is_null() ? std::string("a fresh ledger")
                                : absl::StrCat("a ledger of ", ledger_->applied(), " of ",
                                               ledger_->total_tasks(), " tasks applied"));
  return generation_;
}

uint64_t Coordinator::generation() const {
  absl::MutexLock lock(&mu_);
  return generation_;
}

std::vector<Sender> Coordinator::PsTasks() const {
  absl::MutexLock lock(&mu_);
  return ps_;
}

Coordinator::Failures Coordinator::FailuresLocked() const {
  return {carried_.workers_replaced + counted_.workers_replaced,
          carried_.rollbacks + counted_.rollbacks,
          carried_.chief_restarts + counted_.chief_restarts};
}

void Coordinator::SyncFailures() {
  if (!ledger_) return;
  const Failures f = FailuresLocked();
  ledger_->set_failures({f.workers_replaced, f.rollbacks, f.chief_restarts});
}

void Coordinator::EndJob() {
  absl::MutexLock lock(&mu_);
  job_ended_ = true;
}

int64_t Coordinator::restarts_after_end() const {
  absl::MutexLock lock(&mu_);
  return restarts_after_end_;
}

Coordinator::Failures Coordinator::failures() const {
  absl::MutexLock lock(&mu_);
  return FailuresLocked();
}

void Coordinator::CountChiefRestart() {
  absl::MutexLock lock(&mu_);
  if (chief_restart_counted_) return;
  chief_restart_counted_ = true;
  ++counted_.chief_restarts;
  SyncFailures();
}

}  // namespace pstrain
