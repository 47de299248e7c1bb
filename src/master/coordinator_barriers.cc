// Coordinator: barriers (Barrier, their release, the sweep that withdraws arrivals whose caller
// gave up) and what a barrier says of the workers that have not arrived.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/limits.h"
#include "common/rpc.h"
#include "master/coordinator.h"
#include "spdlog/spdlog.h"

namespace pstrain {
namespace {

constexpr char kStartBarrier[] = "pstrain/start";

// "3s", "2m5s"; "less than 1s" for shorter.
std::string Ago(absl::Duration d) {
  if (d < absl::Seconds(1)) return "less than 1s";
  return absl::FormatDuration(absl::Trunc(d, absl::Seconds(1)));
}

}  // namespace

void Coordinator::ReleaseBarriers(Finished* out) {
  for (auto it = barriers_.begin(); it != barriers_.end();) {
    BarrierState& b = it->second;
    const bool start = it->first == kStartBarrier;
    bool all = ready_ || !start;
    for (int t = 0; all && t < num_workers_; ++t) {
      all = b.arrivals.contains(t) || progress_[t].done;
    }
    // Once the job started, a worker that starts again (restarted) does not wait for the others.
    all = all || (start && start_released_);
    if (all) {
      start_released_ = start_released_ || start;
      for (auto& [task, call] : b.arrivals)
        out->emplace_back(std::move(call.done), absl::OkStatus());
      it = barriers_.erase(it);
    } else {
      ++it;
    }
  }
}

std::string Coordinator::Missing(const std::string& name, absl::Time now) const {
  std::vector<std::string> missing;
  const auto it = barriers_.find(name);
  for (int t = 0; t < num_workers_; ++t) {
    const WorkerProgress& p = progress_[t];
    if (p.done || (it != barriers_.end() && it->second.arrivals.contains(t))) continue;
    std::string doing;
    if (workers_[t].incarnation() == 0) {
      doing = "not registered";
    } else if (name == kStartBarrier && !ready_) {
      doing = "registered; the chief is still configuring the PS";
    } else if (p.last_report == absl::InfinitePast()) {
      doing = "training, no progress reported yet";
    } else {
      doing = absl::StrCat("training, last progress ", Ago(now - p.last_report), " ago");
    }
    for (const auto& [other, b] : barriers_) {
      if (other != name && b.arrivals.contains(t))
        doing = absl::StrCat("waits at barrier \"", other, "\"");
    }
    missing.push_back(absl::StrCat(TaskName("worker", t), " (", doing, ")"));
  }
  return missing.empty() ? "no worker" : absl::StrJoin(missing, ", ");
}

void Coordinator::Barrier(const BarrierRequest& req, BarrierCall call) {
  Finished finished;
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    const std::string what = "barrier";
    refused = CheckSenderPresent(req.has_sender(), req.sender(), what);
    if (refused.ok()) refused = CheckAndSee(req.sender(), what);
    if (!refused.ok()) {
    } else if (req.name().empty()) {
      refused = absl::InvalidArgumentError("a barrier needs a name");
    } else if (req.name().size() > static_cast<size_t>(kMaxNameBytes)) {
      refused = absl::InvalidArgumentError(
          absl::StrCat("barrier name of ", req.name().size(), " bytes exceeds ", kMaxNameBytes));
    } else if (stop_) {
      refused =
          absl::CancelledError(absl::StrCat("barrier \"", req.name(), "\": the job is ending"));
    } else if (!barriers_.contains(req.name()) &&
               barriers_.size() >= static_cast<size_t>(kMaxOpenBarriers)) {
      refused = absl::ResourceExhaustedError(absl::StrCat(
          "barrier \"", req.name(), "\": ", kMaxOpenBarriers, " barriers are open already"));
    } else {
      const int task = req.sender().task();
      workers_seen_[task] = absl::Now();
      BarrierState& b = barriers_[req.name()];
      if (auto old = b.arrivals.find(task); old != b.arrivals.end()) {
        finished.emplace_back(std::move(old->second.done),
                              absl::AbortedError(absl::StrCat(
                                  "barrier \"", req.name(), "\": ", TaskName("worker", task),
                                  " arrived again; this earlier arrival no longer counts")));
        b.arrivals.erase(old);
      }
      b.arrivals.emplace(task, std::move(call));
      ReleaseBarriers(&finished);
    }
  }
  if (!refused.ok()) call.done(refused);
  Run(finished);
}

int Coordinator::OpenBarriers() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(barriers_.size());
}

void Coordinator::Sweep(absl::Time now, Finished* out) {
  for (auto it = barriers_.begin(); it != barriers_.end();) {
    auto& arrivals = it->second.arrivals;
    for (auto a = arrivals.begin(); a != arrivals.end();) {
      const bool cancelled = a->second.cancelled && a->second.cancelled();
      if (!cancelled && now < a->second.deadline) {
        ++a;
        continue;
      }
      BarrierCall call = std::move(a->second);
      a = arrivals.erase(a);  // withdrawn first, so Missing names this worker too
      out->emplace_back(std::move(call.done),
                        cancelled ? absl::CancelledError(absl::StrCat("barrier \"", it->first,
                                                                      "\": the call was cancelled"))
                                  : absl::DeadlineExceededError(absl::StrCat(
                                        "barrier \"", it->first, "\": deadline passed waiting for ",
                                        Missing(it->first, now))));
    }
    it = arrivals.empty() ? barriers_.erase(it) : std::next(it);
  }
}

void Coordinator::SweepLoop() {
  Finished finished;
  mu_.Lock();
  while (!closing_) {
    mu_.AwaitWithTimeout(absl::Condition(&closing_), sweep_interval_);
    Sweep(absl::Now(), &finished);
    if (ledger_) {
      for (const TaskLedger::Death& d : ledger_->CheckDeadlines(absl::Now())) {
        spdlog::warn("{} declared dead: silent for more than {}; {}", TaskName("worker", d.worker),
                     absl::FormatDuration(ledger_timeout_),
                     d.requeued
                         ? absl::StrCat("task ", d.requeued->id, " of epoch ", d.requeued->epoch,
                                        ", which it held, goes back to the queue")
                         : std::string("it held no task"));
      }
    }
    if (finished.empty()) continue;
    mu_.Unlock();
    Run(finished);
    mu_.Lock();
  }
  mu_.Unlock();
}

}  // namespace pstrain
