#include "master/coordinator.h"

#include <algorithm>
#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/limits.h"
#include "common/rpc.h"
#include "spdlog/spdlog.h"

namespace pstrain {
// InvalidArgument unless the request names a sender with a job of sane length.
absl::Status CheckSenderPresent(bool has_sender, const Sender& s, const std::string& what) {
  if (!has_sender || s.job().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " without a sender"));
  }
  if (s.job().size() > static_cast<size_t>(kMaxNameBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": sender job name of ", s.job().size(),
                                                   " bytes exceeds ", kMaxNameBytes));
  }
  return absl::OkStatus();
}

Coordinator::Coordinator(std::vector<std::string> ps_addresses, int num_workers,
                         absl::Duration sweep_interval)
    : ps_addresses_(std::move(ps_addresses)),
      num_ps_(static_cast<int>(ps_addresses_.size())),
      num_workers_(num_workers),
      chief_incarnation_(MakeSender("chief", 0).incarnation()),
      sweep_interval_(sweep_interval),
      ps_(num_ps_),
      workers_(num_workers),
      ps_seen_(num_ps_, absl::InfinitePast()),
      workers_seen_(num_workers, absl::InfinitePast()),
      progress_(num_workers),
      told_stop_(num_workers, false),
      sweeper_([this] { SweepLoop(); }) {}

Coordinator::~Coordinator() {
  RequestStop();
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
  }
  sweeper_.join();
}

void Coordinator::Run(Finished& finished) {
  for (auto& [done, status] : finished) done(status);
  finished.clear();
}

absl::Status Coordinator::Register(const RegisterRequest& req, RegisterResponse* resp) {
  const Sender& s = req.sender();
  if (absl::Status st = CheckSenderPresent(req.has_sender(), s, "Register"); !st.ok()) return st;
  if (req.address().size() > static_cast<size_t>(kMaxNameBytes)) {
    return absl::InvalidArgumentError(absl::StrCat("register from ", TaskName(s.job(), s.task()),
                                                   ": address of ", req.address().size(),
                                                   " bytes exceeds ", kMaxNameBytes));
  }
  absl::MutexLock lock(&mu_);
  std::vector<Sender>* table = nullptr;
  if (s.job() == "ps") table = &ps_;
  if (s.job() == "worker") table = &workers_;
  if (table == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat("register from job \"", s.job(), "\": only ps and worker tasks register"));
  }
  const std::string task = TaskName(s.job(), s.task());
  // A task outside the cluster is a sender the chief does not obey (docs/semantics.md, "Who
  // may call what"), like a job that does not register: PERMISSION_DENIED, not a bad argument.
  if (s.task() < 0 || s.task() >= static_cast<int>(table->size())) {
    return absl::PermissionDeniedError(absl::StrCat("register from unknown task ", task,
                                                    ": the cluster has ", table->size(), " ",
                                                    s.job(), " task(s)"));
  }
  if (s.incarnation() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("register from ", task, " without an incarnation"));
  }
  Sender& registered = (*table)[s.task()];
  const uint64_t old = registered.incarnation();
  const bool restarted = old != 0 && old != s.incarnation();
  if (ledger_ && s.job() == "worker") {
    // The ledger accepts a new incarnation once the old one is declared dead; with recovery on,
    // the restarted process proves it dead.
    if (absl::Status st = ledger_->Register(s.task(), s.incarnation(), absl::Now(), recovery_);
        !st.ok()) {
      return st;
    }
  } else if (restarted && !(recovery_ && s.job() == "ps")) {
    return absl::FailedPreconditionError(
        absl::StrCat(task, " is already registered by another process (incarnation ", old,
                     "); this job does not accept restarted tasks"));
  }
  if (restarted) NoteRestart(s, old);
  registered = s;
  (s.job() == "ps" ? ps_seen_ : workers_seen_)[s.task()] = absl::Now();
  resp->set_mode(mode_);
  resp->set_chief_incarnation(chief_incarnation_);
  if (ledger_) resp->set_heartbeat_interval_s(absl::ToDoubleSeconds(heartbeat_interval_));
  for (const std::string& a : ps_addresses_) resp->add_ps_addresses(a);
  resp->set_num_workers(static_cast<int32_t>(workers_.size()));
  return absl::OkStatus();
}

std::vector<Sender> Coordinator::Workers() const {
  absl::MutexLock lock(&mu_);
  return workers_;
}

void Coordinator::SetMode(const std::string& mode) {
  absl::MutexLock lock(&mu_);
  mode_ = mode;
}

absl::Status Coordinator::CheckWorkerTask(const Sender& s, const std::string& what) const {
  const std::string task = TaskName(s.job(), s.task());
  if (s.job() != "worker") {
    return absl::PermissionDeniedError(
        absl::StrCat(what, " from ", task, ": only workers may call it"));
  }
  if (s.task() < 0 || s.task() >= num_workers_) {
    return absl::PermissionDeniedError(absl::StrCat(
        what, " from unknown task ", task, ": the cluster has ", num_workers_, " worker task(s)"));
  }
  return absl::OkStatus();
}

absl::Status Coordinator::CheckWorker(const Sender& s, const std::string& what) const {
  if (absl::Status st = CheckWorkerTask(s, what); !st.ok()) return st;
  const std::string task = TaskName(s.job(), s.task());
  if (s.generation() != 0 && workers_[s.task()].incarnation() == 0) {
    // A run started by another chief (this one was restarted): it is over; the worker registers
    // again and this chief starts it on its own generation.
    return absl::FailedPreconditionError(
        absl::StrCat(what, " from ", task, " of generation ", s.generation(),
                     ": not registered with this chief (a restarted chief); that run is over"));
  }
  if (ledger_) return ledger_->Check(s.task(), s.incarnation(), what.c_str());
  const uint64_t registered = workers_[s.task()].incarnation();
  if (registered == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " from ", task, ", which is not registered"));
  }
  if (registered != s.incarnation()) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, " from ", task, " incarnation ", s.incarnation(), ", but ", task,
        " is registered by incarnation ", registered, " (a stale or restarted process)"));
  }
  return absl::OkStatus();
}

absl::Status Coordinator::CheckAndSee(const Sender& s, const std::string& what) {
  if (absl::Status st = CheckWorker(s, what); !st.ok()) return st;
  const absl::Time now = absl::Now();
  workers_seen_[s.task()] = now;
  return ledger_ ? ledger_->Heartbeat(s.task(), s.incarnation(), now) : absl::OkStatus();
}

void Coordinator::SetReady() {
  Finished finished;
  {
    absl::MutexLock lock(&mu_);
    ready_ = true;
    ReleaseBarriers(&finished);
  }
  Run(finished);
}

namespace {

// A program that asks a restarted chief before it has reset the PS and begun its generation
// retries (docs/recovery.md, "Client programs").
absl::Status NotReady(const std::string& what) {
  return absl::UnavailableError(
      absl::StrCat(what, ": the chief is not ready yet (it is starting, or restarting)"));
}

}  // namespace

void Coordinator::SetCreateVariable(CreateVariableFn fn) {
  absl::MutexLock lock(&mu_);
  create_variable_ = std::move(fn);
}

absl::Status Coordinator::CreateVariable(const CreateVariableRequest& req,
                                         CreateVariableResponse* resp) {
  CreateVariableFn fn;
  {
    absl::MutexLock lock(&mu_);
    const std::string what = "CreateVariable";
    if (absl::Status s = CheckSenderPresent(req.has_sender(), req.sender(), what); !s.ok()) {
      return s;
    }
    if (absl::Status s = CheckAndSee(req.sender(), what); !s.ok()) return s;
    workers_seen_[req.sender().task()] = absl::Now();
    fn = create_variable_;
    if (!ready_) return NotReady(what);
  }
  if (!fn) {
    return absl::FailedPreconditionError(
        "this job creates its own variables: CreateVariable needs a chief run with --model "
        "external");
  }
  absl::StatusOr<Placement> p = fn(req.spec());
  if (!p.ok()) return p.status();
  *resp->mutable_placement() = *std::move(p);
  return absl::OkStatus();
}

void Coordinator::SetCreateTable(CreateTableFn fn) {
  absl::MutexLock lock(&mu_);
  create_table_ = std::move(fn);
}

absl::Status Coordinator::CreateTable(const CreateTableRequest& req, CreateTableResponse*) {
  CreateTableFn fn;
  {
    absl::MutexLock lock(&mu_);
    const std::string what = "CreateTable";
    if (absl::Status s = CheckSenderPresent(req.has_sender(), req.sender(), what); !s.ok()) {
      return s;
    }
    if (absl::Status s = CheckAndSee(req.sender(), what); !s.ok()) return s;
    workers_seen_[req.sender().task()] = absl::Now();
    fn = create_table_;
    if (!ready_) return NotReady(what);
  }
  if (!fn) {
    return absl::FailedPreconditionError(
        "this job creates its own tables: CreateTable needs a chief run with --model external");
  }
  // Called without the lock: creating a table waits for every PS.
  return fn(req.table());
}

absl::Status Coordinator::Report(const ProgressRequest& req, bool* stop) {
  const Sender& s = req.sender();
  const std::string what = "progress report";
  if (absl::Status st = CheckSenderPresent(req.has_sender(), s, what); !st.ok()) return st;
  if (req.error().size() > static_cast<size_t>(kMaxTextBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " from ", TaskName(s.job(), s.task()),
                                                   ": error text of ", req.error().size(),
                                                   " bytes exceeds ", kMaxTextBytes));
  }
  if (req.epoch() < 0 || req.steps() < 0 || req.examples() < 0 || req.nonfinite_skipped() < 0 ||
      req.stale_dropped() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " from ", TaskName(s.job(), s.task()), ": negative epoch or count"));
  }
  // The chief sums the counts of up to kMaxTasks workers: each is bounded so the sums cannot
  // overflow (no job steps or reads 2^50 of anything).
  constexpr int64_t kMaxProgressCount = int64_t{1} << 50;
  static_assert(kMaxProgressCount < INT64_MAX / (kMaxTasks + 1));
  for (const int64_t n :
       std::initializer_list<int64_t>{req.epoch(), req.steps(), req.examples(),
                                      req.nonfinite_skipped(), req.stale_dropped()}) {
    if (n > kMaxProgressCount) {
      return absl::InvalidArgumentError(absl::StrCat(what, " from ", TaskName(s.job(), s.task()),
                                                     ": a count of ", n, " is past 2^50"));
    }
  }
  Finished finished;
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status st = CheckAndSee(s, what); !st.ok()) return st;
    WorkerProgress& p = progress_[s.task()];
    p.epoch = req.epoch();
    p.steps = req.steps();
    p.examples = req.examples();
    p.loss = req.loss();
    p.has_loss = req.has_loss();
    p.done = p.done || req.done();
    if (!req.error().empty()) p.error = req.error();
    p.nonfinite_skipped = req.nonfinite_skipped();
    p.stale_dropped = req.stale_dropped();
    p.last_report = absl::Now();
    workers_seen_[s.task()] = p.last_report;
    ++reports_;
    *stop = stop_;
    if (stop_) told_stop_[s.task()] = true;
    if (p.done) ReleaseBarriers(&finished);
  }
  Run(finished);
  return absl::OkStatus();
}

absl::Status Coordinator::WaitForRegistration(absl::Duration timeout) {
  auto all = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    if (abort_) return true;
    for (const Sender& s : ps_)
      if (s.incarnation() == 0) return false;
    for (const Sender& s : workers_)
      if (s.incarnation() == 0) return false;
    return true;
  };
  absl::MutexLock lock(&mu_);
  const bool registered = mu_.AwaitWithTimeout(absl::Condition(&all), timeout);
  if (abort_) return absl::CancelledError(absl::StrCat("stopped by ", *abort_));
  if (registered) return absl::OkStatus();
  std::vector<std::string> missing;
  for (int i = 0; i < num_ps_; ++i) {
    if (ps_[i].incarnation() == 0) missing.push_back(TaskName("ps", i));
  }
  for (int i = 0; i < num_workers_; ++i) {
    if (workers_[i].incarnation() == 0) missing.push_back(TaskName("worker", i));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("timed out after ", absl::FormatDuration(timeout),
                   " waiting for tasks to register: ", absl::StrJoin(missing, ", ")));
}

std::vector<WorkerProgress> Coordinator::WaitForReport(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  const int64_t seen = reports_;
  auto changed = [this, seen]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return reports_ != seen || abort_.has_value();
  };
  mu_.AwaitWithTimeout(absl::Condition(&changed), timeout);
  return ProgressLocked();
}

std::vector<WorkerProgress> Coordinator::ProgressLocked() const {
  std::vector<WorkerProgress> snapshot = progress_;
  for (const auto& [name, b] : barriers_) {
    for (const auto& [task, call] : b.arrivals) snapshot[task].barrier = name;
  }
  return snapshot;
}

ClusterView Coordinator::View() const {
  absl::MutexLock lock(&mu_);
  ClusterView v;
  for (const Sender& s : ps_) v.ps_registered.push_back(s.incarnation() != 0);
  for (const Sender& s : workers_) v.workers_registered.push_back(s.incarnation() != 0);
  v.ps_seen = ps_seen_;
  v.workers_seen = workers_seen_;
  v.progress = ProgressLocked();
  return v;
}

void Coordinator::RequestStop() {
  Finished finished;
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    for (auto& [name, b] : barriers_) {
      for (auto& [task, call] : b.arrivals) {
        finished.emplace_back(
            std::move(call.done),
            absl::CancelledError(absl::StrCat("barrier \"", name, "\": the job is ending")));
      }
    }
    barriers_.clear();
  }
  Run(finished);
}

void Coordinator::Abort(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  if (!abort_) abort_ = reason;
}

std::optional<std::string> Coordinator::AbortReason() const {
  absl::MutexLock lock(&mu_);
  return abort_;
}

}  // namespace pstrain
