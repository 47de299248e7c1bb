#include "master/job_status.h"

#include <algorithm>

#include "common/rpc.h"

namespace pstrain {
namespace {

// Seconds from `then` to `now`; -1 for never.
double SecondsSince(absl::Time now, absl::Time then) {
  if (then == absl::InfinitePast()) return -1;
  return std::max(0.0, absl::ToDoubleSeconds(now - then));
}

JobStatus::Task MakeTask(const std::string& job, int index, const std::string& address,
                         const std::string& state) {
  JobStatus::Task t;
  t.job = job;
  t.index = index;
  t.address = address;
  t.state = state;
  return t;
}

// A worker's state as the chief sees it: see JobStatus::Task.
void SetWorkerState(bool registered, const WorkerProgress& p, absl::Time seen, absl::Time now,
                    absl::Duration task_timeout, JobStatus::Task* t) {
  t->steps = p.steps;
  t->detail.clear();
  if (!registered) {
    t->state = "waiting";
  } else if (!p.error.empty()) {
    t->state = "failed";
    t->detail = p.error;
  } else if (p.done) {
    t->state = "done";
  } else if (p.barrier.empty() && now - seen > task_timeout) {
    t->state = "lost";
    t->detail = "sent no progress for " + WholeSeconds(now - seen);
  } else {
    t->state = "running";
    if (!p.barrier.empty()) t->detail = "at barrier \"" + p.barrier + "\"";
  }
}

}  // namespace

StatusTracker::StatusTracker(JobMonitor* monitor, const MasterOptions& options,
                             const Coordinator* coordinator, const VariablePlacer* placer,
                             absl::Duration refresh)
    : monitor_(monitor),
      coordinator_(coordinator),
      placer_(placer),
      refresh_(refresh),
      task_timeout_(options.job.task_timeout),
      ps_answered_(options.ps_addresses.size(), absl::InfinitePast()) {
  if (monitor_ == nullptr) return;
  SessionOptions o;
  o.ps_addresses = options.ps_addresses;
  o.sender = MakeSender("chief", 0);
  o.timeout = std::min(refresh * 2, options.job.rpc_timeout);
  ps_session_ = std::make_unique<ParameterSession>(std::move(o), std::vector<VariableRef>{},
                                                   std::vector<TableRef>{});
  monitor_->Update([&](JobStatus* s) {
    *s = JobStatus();
    s->mode = options.job.mode;
    s->model = options.job.model;
    if (options.job.BuiltInModel()) s->epochs = std::max(0, options.job.epochs);
    s->tasks.push_back(MakeTask(
        "chief", 0, options.address.empty() ? options.listen_address : options.address, "running"));
    s->tasks.back().seconds_since_seen = 0;
    for (size_t i = 0; i < options.ps_addresses.size(); ++i) {
      s->tasks.push_back(MakeTask("ps", i, options.ps_addresses[i], "waiting"));
    }
    for (size_t i = 0; i < options.worker_addresses.size(); ++i) {
      s->tasks.push_back(MakeTask("worker", i, options.worker_addresses[i], "waiting"));
    }
    s->ps_bytes.assign(options.ps_addresses.size(), 0);
    s->ps_table_bytes.assign(options.ps_addresses.size(), 0);
    s->ps_pushes.assign(options.ps_addresses.size(), 0);
  });
  thread_ = std::thread([this] { Loop(); });
}

StatusTracker::~StatusTracker() { Stop(); }

void StatusTracker::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

void StatusTracker::Loop() {
  for (int64_t n = 1; !stop_.WaitForNotificationWithTimeout(refresh_); ++n) Refresh(n % 2 == 0);
}

void StatusTracker::SetState(const std::string& state) {
  if (monitor_ == nullptr) return;
  {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    monitor_->Update([&](JobStatus* s) { s->state = state; });
  }
  // The tasks as they are now rather than at the next refresh, so that a page showing the job
  // running (and soon its first steps) shows its workers running too.
  Refresh(/*ask_ps=*/false);
}

void StatusTracker::Progress(const ProgressView& view) {
  if (monitor_ == nullptr) return;
  absl::MutexLock lock(&mu_);
  if (finished_) return;
  if (view.step > 0 && view.step != latest_.step) {
    latest_ = {absl::ToDoubleSeconds(view.elapsed), view.step, view.loss};
    latest_kept_ = curve_seen_++ % curve_stride_ == 0;
    if (latest_kept_) curve_.push_back(latest_);
    if (curve_.size() > static_cast<size_t>(kMaxLossPoints)) {
      std::vector<JobStatus::LossPoint> thinned;
      for (size_t i = 0; i < curve_.size(); i += 2) thinned.push_back(curve_[i]);
      curve_ = std::move(thinned);
      curve_stride_ *= 2;
    }
  }
  monitor_->Update([&](JobStatus* s) {
    s->epoch = view.epoch;
    s->epochs = view.epochs;
    s->global_step = view.step;
    s->total_steps = view.total;
    s->loss = view.loss;
    s->examples_per_sec = view.examples_per_sec;
    s->elapsed_seconds = absl::ToDoubleSeconds(view.elapsed);
    s->eta_seconds = EtaSeconds(view);
    s->loss_curve = curve_;
    // The latest point is always shown, kept or not.
    if (!latest_kept_) s->loss_curve.push_back(latest_);
  });
}

void StatusTracker::Refresh(bool ask_ps) {
  const absl::Time now = absl::Now();
  const ClusterView view = coordinator_->View();
  std::vector<StatsResponse> stats;
  const bool all_ps = std::all_of(view.ps_registered.begin(), view.ps_registered.end(),
                                  [](bool registered) { return registered; });
  if (ask_ps && all_ps) {
    absl::StatusOr<std::vector<StatsResponse>> s = ps_session_->Stats();
    if (s.ok()) stats = *std::move(s);
  }
  const std::vector<JobStatus::Shard> shards = placer_->Shards();
  const std::vector<int64_t> load = placer_->Load();
  absl::MutexLock lock(&mu_);
  if (!stats.empty()) std::fill(ps_answered_.begin(), ps_answered_.end(), now);
  monitor_->Update([&](JobStatus* s) {
    const size_t num_ps = view.ps_registered.size();
    for (size_t i = 0; i < num_ps; ++i) {
      JobStatus::Task& t = s->tasks[1 + i];
      t.state = view.ps_registered[i] ? "running" : "waiting";
      t.seconds_since_seen = SecondsSince(now, std::max(view.ps_seen[i], ps_answered_[i]));
    }
    s->workers_alive = 0;
    for (size_t i = 0; i < view.progress.size(); ++i) {
      JobStatus::Task& t = s->tasks[1 + num_ps + i];
      SetWorkerState(view.workers_registered[i], view.progress[i], view.workers_seen[i], now,
                     task_timeout_, &t);
      t.seconds_since_seen = SecondsSince(now, view.workers_seen[i]);
      if (t.state == "running" || t.state == "done") ++s->workers_alive;
    }
    if (s->placement.size() != shards.size()) s->placement = shards;
    s->ps_bytes = load;
    for (size_t i = 0; i < stats.size() && i < num_ps; ++i) {
      s->ps_pushes[i] = stats[i].pushes_applied();
      int64_t table_bytes = 0;
      for (const TableStats& t : stats[i].tables()) table_bytes += t.bytes();
      s->ps_table_bytes[i] = table_bytes;
    }
  });
}

void StatusTracker::Finish(const absl::Status& status) {
  if (monitor_ == nullptr) return;
  Stop();
  // The PS still run when the job succeeded; after a failure they may be gone.
  Refresh(/*ask_ps=*/status.ok());
  absl::MutexLock lock(&mu_);
  if (finished_) return;
  finished_ = true;
  monitor_->Update([&](JobStatus* s) {
    s->state = status.ok() ? "succeeded" : "failed";
    s->error = std::string(status.message());
    s->eta_seconds = status.ok() ? 0 : -1;
    for (JobStatus::Task& t : s->tasks) {
      if (t.job == "chief") t.state = status.ok() ? "done" : "failed";
      if (t.job == "chief" && !status.ok()) t.detail = s->error;
      if (status.ok()) t.state = "done";
    }
  });
}

}  // namespace pstrain
