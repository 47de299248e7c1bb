#include "ps/consistency.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/limits.h"
#include "ps/ps_internal.h"

namespace pstrain {

Consistency::Consistency()
    : counted_(std::make_unique<std::atomic<bool>[]>(kMaxTasks)),
      expirer_([this] { ExpireLoop(); }) {}

Consistency::~Consistency() {
  {
    absl::MutexLock lock(&mu_);
    exit_ = true;
  }
  expirer_.join();
}

namespace {

absl::StatusOr<Mode> ParseMode(const std::string& mode) {
  if (mode == "async" || mode.empty()) return Mode::kAsync;
  if (mode == "sync") return Mode::kSync;
  if (mode == "ssp") return Mode::kSsp;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown mode ", Quoted(mode), " (known: async, sync, ssp)"));
}

}  // namespace

absl::Status Consistency::Configure(const ConfigureRequest& req) {
  const ConsistencyConfig& c = req.consistency();
  auto bad = [](auto... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  absl::StatusOr<Mode> mode = ParseMode(c.mode());
  if (!mode.ok()) return mode.status();
  const int n = c.num_workers();
  if (n < 1 || n > kMaxTasks) return bad("num_workers ", n, " must be in [1, ", kMaxTasks, "]");
  if (*mode == Mode::kSync && (c.replicas_to_aggregate() < 1 || c.replicas_to_aggregate() > n)) {
    return bad("replicas_to_aggregate ", c.replicas_to_aggregate(), " must be in [1, ", n, "]");
  }
  if (*mode == Mode::kSsp && c.staleness() < 0) {
    return bad("staleness ", c.staleness(), " must be non-negative");
  }
  if (!(std::isfinite(req.wait_timeout_s()) && req.wait_timeout_s() >= 0)) {
    return bad("wait timeout ", req.wait_timeout_s(), " s must be finite and non-negative");
  }
  if (req.workers_size() > n) {
    return bad(req.workers_size(), " workers announced, but num_workers is ", n);
  }
  std::vector<bool> announced;
  std::vector<uint64_t> incarnations;
  if (req.workers_size() > 0) {
    announced.assign(n, false);
    incarnations.assign(n, 0);
    for (const Sender& w : req.workers()) {
      if (w.job() != "worker" || w.task() < 0 || w.task() >= n) {
        return bad("announced worker ", SenderString(w), " is not one of the ", n, " workers");
      }
      if (announced[w.task()]) {
        return bad("announced worker worker:", w.task(), " appears more than once");
      }
      announced[w.task()] = true;
      incarnations[w.task()] = w.incarnation();
    }
  }
  absl::MutexLock lock(&mu_);
  mode_ = *mode;
  generation_ = req.generation();
  num_workers_ = n;
  replicas_ = *mode == Mode::kSync ? c.replicas_to_aggregate() : 0;
  staleness_ = c.staleness();
  wait_timeout_ =
      req.wait_timeout_s() > 0 ? absl::Seconds(req.wait_timeout_s()) : absl::Seconds(60);
  announced_ = std::move(announced);
  incarnations_ = std::move(incarnations);
  states_.assign(n, WorkerState::kActive);
  clocks_.assign(n, 0);
  pushes_by_worker_.assign(n, 0);
  dropped_by_worker_.assign(n, 0);
  PublishLocked();
  return absl::OkStatus();
}

Mode Consistency::mode() const {
  absl::MutexLock lock(&mu_);
  return mode_;
}

uint64_t Consistency::generation() const {
  absl::MutexLock lock(&mu_);
  return generation_;
}

void Consistency::Reset(const std::string& why) {
  std::vector<Pending> ended;
  {
    absl::MutexLock lock(&mu_);
    mode_ = Mode::kAsync;
    generation_ = 0;
    num_workers_ = 0;
    replicas_ = 0;
    staleness_ = 0;
    wait_timeout_ = absl::Seconds(60);
    announced_.clear();
    incarnations_.clear();
    states_.clear();
    clocks_.clear();
    pushes_by_worker_.clear();
    dropped_by_worker_.clear();
    ended.swap(pending_);
    PublishLocked();
  }
  for (Pending& p : ended) p.wait.serve(absl::FailedPreconditionError(why));
}

int Consistency::SlotLocked(const Sender& s) const {
  if (s.job() != "worker" || s.task() < 0 || s.task() >= num_workers_) return -1;
  return s.task();
}

bool Consistency::CountsLocked(int slot) const {
  return states_[slot] == WorkerState::kActive && (announced_.empty() || announced_[slot]);
}

void Consistency::PublishLocked() {
  // Raise the count for slots that start counting before any flag changes, clear the flags of
  // slots that stop before setting those of slots that start, and lower the count last: every
  // intermediate state overestimates StepThreshold.
  int starting = 0, now = 0;
  for (int i = 0; i < kMaxTasks; ++i) {
    const bool counts = i < num_workers_ && CountsLocked(i);
    now += counts;
    starting += counts && !counted_[i].load();
  }
  counting_.fetch_add(starting);
  for (int i = 0; i < kMaxTasks; ++i) {
    if (!(i < num_workers_ && CountsLocked(i))) counted_[i].store(false);
  }
  for (int i = 0; i < num_workers_; ++i) {
    if (CountsLocked(i)) counted_[i].store(true);
  }
  counting_.store(now);
}

absl::Status Consistency::ReplaceWorker(const Sender& w) {
  absl::MutexLock lock(&mu_);
  if (mode_ != Mode::kAsync || announced_.empty()) {
    return absl::FailedPreconditionError(
        "a worker can be replaced only in async mode with announced workers");
  }
  if (w.job() != "worker" || w.task() < 0 || w.task() >= num_workers_ || w.incarnation() == 0) {
    return absl::InvalidArgumentError(absl::StrCat("replacement ", SenderString(w),
                                                   " is not one of the ", num_workers_,
                                                   " workers with an incarnation"));
  }
  announced_[w.task()] = true;
  incarnations_[w.task()] = w.incarnation();
  states_[w.task()] = WorkerState::kActive;
  PublishLocked();
  return absl::OkStatus();
}

int Consistency::WorkerSlot(const Sender& s) const {
  absl::MutexLock lock(&mu_);
  return SlotLocked(s);
}

absl::Status Consistency::CheckWorker(const Sender& s, absl::string_view method) const {
  absl::MutexLock lock(&mu_);
  if (announced_.empty()) return absl::OkStatus();
  const int slot = SlotLocked(s);
  if (slot >= 0 && announced_[slot] && incarnations_[slot] == s.incarnation()) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(
      absl::StrCat(method, " from ", SenderString(s), ", which the chief does not know"));
}

absl::Status Consistency::CheckPusher(const Sender& s) const {
  if (absl::Status st = CheckWorker(s, "push"); !st.ok()) return st;
  absl::MutexLock lock(&mu_);
  const int slot = SlotLocked(s);
  if (slot >= 0 && states_[slot] == WorkerState::kLeft) {
    return absl::FailedPreconditionError(
        absl::StrCat("push from ", SenderString(s), ", which left the job"));
  }
  return absl::OkStatus();
}

int Consistency::StepThreshold(const Contributors& contributors) const {
  int extra = 0;
  for (const auto& [task, incarnation] : contributors) {
    extra += task >= 0 && task < kMaxTasks && !counted_[task].load();
  }
  return std::max(1, std::min(replicas_.load(), counting_.load() + extra));
}

std::string Consistency::Lacking(const Contributors& contributors) const {
  std::vector<std::string> lacking;
  for (int i = 0; i < kMaxTasks; ++i) {
    if (!counted_[i].load()) continue;
    const bool sent = std::any_of(contributors.begin(), contributors.end(),
                                  [i](const auto& c) { return c.first == i; });
    if (!sent) lacking.push_back(absl::StrCat("worker:", i));
  }
  if (lacking.empty()) return "no worker that still counts";
  return absl::StrJoin(lacking, ", ");
}

bool Consistency::ClockAllows(int64_t clock) {
  if (mode_ != Mode::kSsp || clocks_.empty()) return true;
  std::optional<int64_t> slowest;
  for (int i = 0; i < num_workers_; ++i) {
    if (CountsLocked(i) && (!slowest || clocks_[i] < *slowest)) slowest = clocks_[i];
  }
  if (!slowest || clock - *slowest <= staleness_) {
    const int64_t gap = slowest ? clock - *slowest : 0;
    if (gap > counters.max_clock_gap.load()) counters.max_clock_gap.store(gap);
    return true;
  }
  return false;
}

std::string Consistency::ClockWaitReason(const Sender& s, int64_t clock) {
  int slowest = -1;
  for (int i = 0; i < num_workers_; ++i) {
    if (CountsLocked(i) && (slowest < 0 || clocks_[i] < clocks_[slowest])) slowest = i;
  }
  const std::string who = slowest < 0
                              ? std::string("none counts")
                              : absl::StrCat("worker:", slowest, " at clock ", clocks_[slowest]);
  return absl::StrCat("worker:", s.task(), " at clock ", clock, " to come within staleness ",
                      staleness_, " of the slowest worker (", who, ")");
}

void Consistency::PullOrWait(const Sender& sender, int64_t clock, Wait w) {
  std::vector<Pending> ready;
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    const int slot = SlotLocked(sender);
    if (slot >= 0 && states_[slot] == WorkerState::kPaused) {
      // A paused worker that pulls again is past its barrier, and a barrier releases every
      // worker at once: all of them count again, so the first step after it needs them all.
      for (WorkerState& st : states_) {
        if (st == WorkerState::kPaused) st = WorkerState::kActive;
      }
      PublishLocked();
    }
    bool clock_moved = false;
    if (mode_ == Mode::kSsp && slot >= 0 && states_[slot] != WorkerState::kLeft &&
        clock > clocks_[slot]) {
      clocks_[slot] = clock;
      clock_moved = true;
    }
    if (w.ready()) {
      ready.push_back({std::move(w), absl::InfiniteFuture()});
    } else if (stopped_) {
      refused = absl::UnavailableError("parameter server is shutting down");
    } else if (pending_.size() >= static_cast<size_t>(kMaxWaitingPulls)) {
      refused = absl::ResourceExhaustedError(
          absl::StrCat(pending_.size(), " pulls are already waiting, the limit"));
    } else {
      counters.pulls_waited++;
      pending_.push_back({std::move(w), absl::Now() + wait_timeout_});
    }
    if (clock_moved) ServeReady(&ready);  // a clock that moved may release others
  }
  if (!refused.ok()) w.serve(refused);
  for (Pending& p : ready) p.wait.serve(absl::OkStatus());
}

void Consistency::ServeReady(std::vector<Pending>* ready) {
  for (size_t i = 0; i < pending_.size();) {
    if (pending_[i].wait.ready()) {
      ready->push_back(std::move(pending_[i]));
      pending_.erase(pending_.begin() + i);
    } else {
      ++i;
    }
  }
}

void Consistency::Notify() {
  std::vector<Pending> ready;
  {
    absl::MutexLock lock(&mu_);
    ServeReady(&ready);
  }
  for (Pending& p : ready) p.wait.serve(absl::OkStatus());
}

bool Consistency::Leave(const Sender& s, bool pause) {
  absl::MutexLock lock(&mu_);
  const int slot = SlotLocked(s);
  if (slot < 0 || states_[slot] == WorkerState::kLeft) return false;
  const bool counted = CountsLocked(slot);
  states_[slot] = pause ? WorkerState::kPaused : WorkerState::kLeft;
  PublishLocked();
  return counted;
}

void Consistency::Rejoin(const Sender& s) {
  absl::MutexLock lock(&mu_);
  const int slot = SlotLocked(s);
  if (slot < 0 || states_[slot] != WorkerState::kPaused) return;
  states_[slot] = WorkerState::kActive;
  PublishLocked();
}

void Consistency::Stop() {
  std::vector<Pending> stopped;
  {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
    stopped.swap(pending_);
  }
  for (Pending& p : stopped)
    p.wait.serve(absl::UnavailableError("parameter server is shutting down"));
}

void Consistency::ExpireLoop() {
  absl::MutexLock lock(&mu_);
  while (!exit_) {
    mu_.AwaitWithTimeout(absl::Condition(&exit_), absl::Milliseconds(50));
    const absl::Time now = absl::Now();
    std::vector<Pending> expired;
    for (size_t i = 0; i < pending_.size();) {
      if (pending_[i].deadline <= now) {
        expired.push_back(std::move(pending_[i]));
        pending_.erase(pending_.begin() + i);
      } else {
        ++i;
      }
    }
    if (expired.empty()) continue;
    std::vector<std::string> reasons;
    for (Pending& p : expired) reasons.push_back(p.wait.describe());
    const absl::Duration waited = wait_timeout_;
    mu_.Unlock();
    for (size_t i = 0; i < expired.size(); ++i) {
      expired[i].wait.serve(absl::DeadlineExceededError(
          absl::StrCat("pull waited ", absl::FormatDuration(waited), " for ", reasons[i])));
    }
    mu_.Lock();
  }
}

void Consistency::CountPush(int slot, bool dropped) {
  absl::MutexLock lock(&mu_);
  if (slot < 0 || slot >= static_cast<int>(pushes_by_worker_.size())) return;
  pushes_by_worker_[slot]++;
  if (dropped) dropped_by_worker_[slot]++;
}

void Consistency::FillStats(StatsResponse* resp) const {
  resp->set_pushes_applied(counters.pushes_applied);
  resp->set_updates_applied(counters.updates_applied);
  resp->set_stale_dropped(counters.stale_dropped);
  resp->set_nonfinite_rejected(counters.nonfinite_rejected);
  resp->set_max_clock_gap(counters.max_clock_gap);
  resp->set_pulls_waited(counters.pulls_waited);
  resp->set_duplicates_dropped(counters.duplicates_dropped);
  absl::MutexLock lock(&mu_);
  for (int64_t v : pushes_by_worker_) resp->add_pushes_by_worker(v);
  for (int64_t v : dropped_by_worker_) resp->add_dropped_by_worker(v);
}

}  // namespace pstrain
