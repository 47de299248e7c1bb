#include "ps/consistency.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"

namespace pstrain {

constexpr int64_t kLeft = std::numeric_limits<int64_t>::max();

Consistency::Consistency() : expirer_([this] { ExpireLoop(); }) {}

Consistency::~Consistency() {
  {
    absl::MutexLock lock(&mu_);
    exit_ = true;
  }
  expirer_.join();
}

absl::Status Consistency::Configure(const ConfigureRequest& req) {
  const ConsistencyConfig& c = req.consistency();
  auto bad = [](auto... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  Mode mode;
  if (c.mode() == "async" || c.mode().empty()) {
    mode = Mode::kAsync;
  } else if (c.mode() == "sync") {
    mode = Mode::kSync;
  } else if (c.mode() == "ssp") {
    mode = Mode::kSsp;
  } else {
    return bad("unknown mode \"", c.mode(), "\" (known: async, sync, ssp)");
  }
  if (c.num_workers() < 1) return bad("num_workers ", c.num_workers(), " must be at least 1");
  if (mode == Mode::kSync &&
      (c.replicas_to_aggregate() < 1 || c.replicas_to_aggregate() > c.num_workers())) {
    return bad("replicas_to_aggregate ", c.replicas_to_aggregate(), " must be in [1, ",
               c.num_workers(), "]");
  }
  if (mode == Mode::kSsp && c.staleness() < 0) {
    return bad("staleness ", c.staleness(), " must be non-negative");
  }
  if (req.wait_timeout_s() < 0) return bad("wait timeout must be non-negative");
  std::vector<uint64_t> incarnations;
  if (req.workers_size() > 0) {
    incarnations.assign(c.num_workers(), 0);
    for (const Sender& w : req.workers()) {
      if (w.job() != "worker" || w.task() < 0 || w.task() >= c.num_workers()) {
        return bad("announced worker ", w.job(), ":", w.task(), " is not one of the ",
                   c.num_workers(), " workers");
      }
      incarnations[w.task()] = w.incarnation();
    }
  }
  absl::MutexLock lock(&mu_);
  mode_ = mode;
  num_workers_ = c.num_workers();
  replicas_ = c.replicas_to_aggregate();
  staleness_ = c.staleness();
  if (req.wait_timeout_s() > 0) wait_timeout_ = absl::Seconds(req.wait_timeout_s());
  incarnations_ = std::move(incarnations);
  clocks_.assign(num_workers_, 0);
  pushes_by_worker_.assign(num_workers_, 0);
  dropped_by_worker_.assign(num_workers_, 0);
  return absl::OkStatus();
}

Mode Consistency::mode() const {
  absl::MutexLock lock(&mu_);
  return mode_;
}

int Consistency::replicas_to_aggregate() const {
  absl::MutexLock lock(&mu_);
  return replicas_;
}

int Consistency::WorkerSlot(const Sender& s) const {
  absl::MutexLock lock(&mu_);
  if (s.job() != "worker" || s.task() < 0 || s.task() >= num_workers_) return -1;
  return s.task();
}

absl::Status Consistency::CheckPusher(const Sender& s) const {
  absl::MutexLock lock(&mu_);
  if (incarnations_.empty()) return absl::OkStatus();
  if (s.job() == "worker" && s.task() >= 0 && s.task() < num_workers_ &&
      incarnations_[s.task()] == s.incarnation()) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat("push from ", s.job(), ":", s.task(),
                                                  " (incarnation ", s.incarnation(),
                                                  "), which the chief does not know"));
}

bool Consistency::ClockAllows(int64_t clock) {
  if (mode_ != Mode::kSsp || clocks_.empty()) return true;
  const int64_t slowest = *std::min_element(clocks_.begin(), clocks_.end());
  if (slowest == kLeft || clock - slowest <= staleness_) {
    const int64_t gap = slowest == kLeft ? 0 : clock - slowest;
    if (gap > counters.max_clock_gap.load()) counters.max_clock_gap.store(gap);
    return true;
  }
  return false;
}

std::string Consistency::ClockWaitReason(const Sender& s, int64_t clock) {
  auto it = std::min_element(clocks_.begin(), clocks_.end());
  return absl::StrCat("worker:", s.task(), " at clock ", clock, " to come within staleness ",
                      staleness_, " of the slowest worker (worker:", it - clocks_.begin(),
                      " at clock ", *it, ")");
}

void Consistency::PullOrWait(const Sender& sender, int64_t clock, Wait w) {
  std::vector<Pending> ready;
  bool refused = false;
  {
    absl::MutexLock lock(&mu_);
    if (mode_ == Mode::kSsp && sender.job() == "worker" && sender.task() >= 0 &&
        sender.task() < num_workers_ && clocks_[sender.task()] != kLeft) {
      clocks_[sender.task()] = std::max(clocks_[sender.task()], clock);
    }
    if (w.ready()) {
      ready.push_back({std::move(w), absl::InfiniteFuture()});
    } else if (stopped_) {
      refused = true;
    } else {
      counters.pulls_waited++;
      pending_.push_back({std::move(w), absl::Now() + wait_timeout_});
    }
    ServeReady(&ready);  // a clock that moved may release others
  }
  if (refused) w.serve(absl::UnavailableError("parameter server is shutting down"));
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

void Consistency::Leave(const Sender& s) {
  {
    absl::MutexLock lock(&mu_);
    if (s.job() == "worker" && s.task() >= 0 && s.task() < static_cast<int>(clocks_.size())) {
      clocks_[s.task()] = kLeft;
    }
  }
  Notify();
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
  absl::MutexLock lock(&mu_);
  for (int64_t v : pushes_by_worker_) resp->add_pushes_by_worker(v);
  for (int64_t v : dropped_by_worker_) resp->add_dropped_by_worker(v);
}

}  // namespace pstrain
