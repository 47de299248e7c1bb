#include "master/task_ledger.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/rpc.h"
#include "common/status.h"

namespace pstrain {
namespace {

std::string When(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

constexpr const char* kStateNames[] = {"pending", "in_flight", "applied"};

}  // namespace

TaskLedger::TaskLedger(const LedgerShape& shape, absl::Duration timeout)
    : shape_(shape),
      timeout_(timeout),
      tasks_per_epoch_((shape.rows + shape.task_rows - 1) / shape.task_rows),
      tasks_(tasks_per_epoch_ * shape.epochs),
      workers_(shape.num_workers) {}

absl::StatusOr<TaskLedger> TaskLedger::Create(const LedgerShape& shape,
                                              absl::Duration heartbeat_timeout) {
  if (shape.rows < 1) return InvalidArgument("task ledger: no training records");
  if (shape.task_rows < 1) return InvalidArgument("task ledger: task_rows must be at least 1");
  if (shape.epochs < 1) return InvalidArgument("task ledger: epochs must be at least 1");
  if (shape.num_workers < 1) return InvalidArgument("task ledger: no workers");
  if (heartbeat_timeout <= absl::ZeroDuration()) {
    return InvalidArgument("task ledger: the heartbeat timeout must be positive");
  }
  const int64_t per_epoch = (shape.rows + shape.task_rows - 1) / shape.task_rows;
  if (per_epoch > kMaxTasks / shape.epochs) {
    return InvalidArgument("task ledger: ", per_epoch, " tasks per epoch over ", shape.epochs,
                           " epochs exceed ", kMaxTasks, " tasks; raise task_rows");
  }
  return TaskLedger(shape, heartbeat_timeout);
}

absl::Status TaskLedger::CheckLive(int worker, uint64_t incarnation, const char* what) const {
  const std::string task = TaskName("worker", worker);
  if (worker < 0 || worker >= shape_.num_workers) {
    return InvalidArgument(what, " from unknown task ", task, ": the cluster has ",
                           shape_.num_workers, " worker task(s)");
  }
  const WorkerState& w = workers_[worker];
  if (auto it = w.dead.find(incarnation); it != w.dead.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " from ", task, " incarnation ", incarnation, ": declared dead at ",
                     When(it->second.at), " (", it->second.why, ")"));
  }
  if (w.incarnation == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " from ", task, ", which is not registered"));
  }
  if (w.incarnation != incarnation) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, " from ", task, " incarnation ", incarnation, ", but ", task,
        " is registered by incarnation ", w.incarnation, " (a stale or restarted process)"));
  }
  return absl::OkStatus();
}

absl::Status TaskLedger::Register(int worker, uint64_t incarnation, absl::Time now,
                                  bool replace_live) {
  if (incarnation == 0)
    return InvalidArgument("register from ", TaskName("worker", worker), " without an incarnation");
  absl::Status s = CheckLive(worker, incarnation, "register");
  if (s.ok()) {  // a retry
    workers_[worker].last_seen = now;
    return s;
  }
  if (absl::IsInvalidArgument(s) || workers_[worker].dead.contains(incarnation)) return s;
  WorkerState& w = workers_[worker];
  if (w.incarnation != 0 && replace_live) {
    DeclareDead(worker, now,
                absl::StrCat("replaced by its restarted process, incarnation ", incarnation));
  }
  if (w.incarnation != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(TaskName("worker", worker), " is already registered by incarnation ",
                     w.incarnation, ", which is alive (last heard from ",
                     absl::FormatDuration(absl::Trunc(now - w.last_seen, absl::Milliseconds(1))),
                     " ago); a restarted process is accepted once it is declared dead, after ",
                     absl::FormatDuration(timeout_), " of silence"));
  }
  w.incarnation = incarnation;
  w.last_seen = now;
  w.holding = -1;
  w.finished = false;
  return absl::OkStatus();
}

absl::Status TaskLedger::Heartbeat(int worker, uint64_t incarnation, absl::Time now) {
  if (absl::Status s = CheckLive(worker, incarnation, "heartbeat"); !s.ok()) return s;
  workers_[worker].last_seen = now;
  return absl::OkStatus();
}

TaskRef TaskLedger::RefOf(int64_t index) const {
  TaskRef r;
  r.epoch = static_cast<int>(index / tasks_per_epoch_);
  r.id = index % tasks_per_epoch_;
  r.begin = r.id * shape_.task_rows;
  r.end = std::min(shape_.rows, r.begin + shape_.task_rows);
  return r;
}

absl::StatusOr<NextTask> TaskLedger::Next(int worker, uint64_t incarnation, absl::Time now) {
  if (absl::Status s = CheckLive(worker, incarnation, "next task"); !s.ok()) return s;
  WorkerState& w = workers_[worker];
  w.last_seen = now;
  NextTask next;
  if (w.holding >= 0) {
    next.kind = NextTask::Kind::kTask;
    next.task = RefOf(w.holding);
    return next;
  }
  while (next_fresh_ < static_cast<int64_t>(tasks_.size()) &&
         tasks_[next_fresh_].state != State::kPending) {
    ++next_fresh_;
  }
  int64_t index = -1;
  if (!requeued_.empty()) {
    index = requeued_.front();
    requeued_.pop_front();
    ++redone_;
  } else if (next_fresh_ < static_cast<int64_t>(tasks_.size())) {
    index = next_fresh_++;
  }
  if (index < 0) {
    next.kind = Finished() ? NextTask::Kind::kFinished : NextTask::Kind::kWait;
    if (Finished()) w.finished = true;
    return next;
  }
  Task& t = tasks_[index];
  t.state = State::kInFlight;
  t.holder = worker;
  t.incarnation = incarnation;
  ++t.handouts;
  w.holding = index;
  next.kind = NextTask::Kind::kTask;
  next.task = RefOf(index);
  return next;
}

absl::Status TaskLedger::Done(int worker, uint64_t incarnation, const TaskReport& r,
                              absl::Time now) {
  if (absl::Status s = CheckLive(worker, incarnation, "task done"); !s.ok()) return s;
  const std::string task = TaskName("worker", worker);
  if (r.epoch < 0 || r.epoch >= shape_.epochs) {
    return InvalidArgument("task done from ", task, ": epoch ", r.epoch, " is not in [0, ",
                           shape_.epochs, ")");
  }
  if (r.id < 0 || r.id >= tasks_per_epoch_) {
    return InvalidArgument("task done from ", task, ": task ", r.id, " is not in [0, ",
                           tasks_per_epoch_, ") of epoch ", r.epoch);
  }
  const int64_t index = r.epoch * tasks_per_epoch_ + r.id;
  const TaskRef ref = RefOf(index);
  const int64_t rows = ref.end - ref.begin;
  // Every record of the task was read; a header or a bad line skipped gives no example, and a
  // task of no examples has no step.
  if (r.examples < 0 || r.examples > rows || r.steps < 0 || r.steps > r.examples ||
      (r.examples > 0) != (r.steps > 0)) {
    return InvalidArgument("task done from ", task, ": task ", r.id, " of epoch ", r.epoch, " has ",
                           rows, " rows; the report says ", r.examples, " examples in ", r.steps,
                           " steps");
  }
  WorkerState& w = workers_[worker];
  Task& t = tasks_[index];
  w.last_seen = now;
  if (t.state == State::kApplied && t.holder == worker && t.incarnation == incarnation) {
    return absl::OkStatus();  // a retry
  }
  if (w.holding != index) {
    return absl::FailedPreconditionError(
        absl::StrCat("task done from ", task, ": it does not hold task ", r.id, " of epoch ",
                     r.epoch, " (", kStateNames[static_cast<int>(t.state)],
                     t.holder >= 0 ? absl::StrCat(", last held by ", TaskName("worker", t.holder))
                                   : std::string(),
                     ")"));
  }
  t.state = State::kApplied;
  ++t.applications;
  t.steps = r.steps;
  t.examples = r.examples;
  w.holding = -1;
  ++w.tasks_done;
  ++applied_;
  return absl::OkStatus();
}

std::optional<TaskRef> TaskLedger::Requeue(int worker) {
  WorkerState& w = workers_[worker];
  if (w.holding < 0) return std::nullopt;
  const int64_t index = w.holding;
  tasks_[index].state = State::kPending;
  requeued_.push_back(index);
  w.holding = -1;
  return RefOf(index);
}

std::vector<TaskLedger::Death> TaskLedger::CheckDeadlines(absl::Time now) {
  std::vector<Death> dead;
  for (int i = 0; i < shape_.num_workers; ++i) {
    WorkerState& w = workers_[i];
    if (w.incarnation == 0 || w.finished || now - w.last_seen <= timeout_) continue;
    dead.push_back(
        {i, DeclareDead(i, now,
                        absl::StrCat("silent for more than ", absl::FormatDuration(timeout_)))});
  }
  return dead;
}

std::optional<TaskRef> TaskLedger::DeclareDead(int worker, absl::Time now, std::string why) {
  WorkerState& w = workers_[worker];
  w.dead[w.incarnation] = {now, std::move(why)};
  w.incarnation = 0;  // a restarted process may register
  ++deaths_;
  return Requeue(worker);
}

void TaskLedger::KeepWorkers(const TaskLedger& from, absl::Time now) {
  for (size_t i = 0; i < workers_.size() && i < from.workers_.size(); ++i) {
    WorkerState& w = workers_[i];
    w = WorkerState();
    w.incarnation = from.workers_[i].incarnation;
    w.dead = from.workers_[i].dead;
    w.last_seen = now;
  }
}

std::string TaskLedger::CheckExactlyOnce() const {
  for (size_t i = 0; i < tasks_.size(); ++i) {
    if (tasks_[i].applications != 1) {
      const TaskRef r = RefOf(static_cast<int64_t>(i));
      return absl::StrCat("task ", r.id, " of epoch ", r.epoch, " was applied ",
                          tasks_[i].applications, " times");
    }
  }
  return "";
}

nlohmann::json TaskLedger::ToJson() const {
  nlohmann::json j;
  j["rows"] = shape_.rows;
  j["task_rows"] = shape_.task_rows;
  j["epochs"] = shape_.epochs;
  j["tasks_per_epoch"] = tasks_per_epoch_;
  j["tasks"] = total_tasks();
  j["applied"] = applied_;
  j["redone"] = redone_;
  j["workers_declared_dead"] = deaths_;
  j["failures"] = {{"workers_replaced", failures_.workers_replaced},
                   {"rollbacks", failures_.rollbacks},
                   {"chief_restarts", failures_.chief_restarts}};
  nlohmann::json per_epoch = nlohmann::json::array();
  for (int e = 0; e < shape_.epochs; ++e) {
    nlohmann::json epoch = nlohmann::json::array();
    for (int64_t id = 0; id < tasks_per_epoch_; ++id) {
      const Task& t = tasks_[e * tasks_per_epoch_ + id];
      const bool applied = t.state == State::kApplied;
      epoch.push_back({{"state", applied ? "applied" : "pending"},
                       {"worker", applied ? t.holder : -1},
                       {"handouts", t.handouts},
                       {"applications", t.applications},
                       {"steps", t.steps},
                       {"examples", t.examples}});
    }
    per_epoch.push_back(std::move(epoch));
  }
  j["ledger"] = std::move(per_epoch);
  return j;
}

absl::StatusOr<TaskLedger> TaskLedger::FromJson(const nlohmann::json& j, const LedgerShape& shape,
                                                absl::Duration heartbeat_timeout) {
  absl::StatusOr<TaskLedger> made = Create(shape, heartbeat_timeout);
  if (!made.ok()) return made.status();
  TaskLedger& l = *made;
  auto int_field = [&](const char* name, int64_t want) -> absl::Status {
    if (!j.is_object() || !j.contains(name) || !j[name].is_number_integer()) {
      return InvalidArgument("task ledger: field \"", name, "\" is missing or not an integer");
    }
    if (j[name].get<int64_t>() != want) {
      return InvalidArgument("task ledger: \"", name, "\" is ", j[name].get<int64_t>(),
                             "; this job has ", want);
    }
    return absl::OkStatus();
  };
  for (auto [name, want] : {std::pair<const char*, int64_t>{"rows", shape.rows},
                            {"task_rows", shape.task_rows},
                            {"epochs", shape.epochs},
                            {"tasks_per_epoch", l.tasks_per_epoch_}}) {
    if (absl::Status s = int_field(name, want); !s.ok()) return s;
  }
  for (const char* name : {"redone", "workers_declared_dead"}) {
    if (!j.contains(name) || !j[name].is_number_integer() || j[name].get<int64_t>() < 0) {
      return InvalidArgument("task ledger: field \"", name, "\" is missing or not a count");
    }
  }
  l.redone_ = j["redone"].get<int64_t>();
  l.deaths_ = j["workers_declared_dead"].get<int64_t>();
  if (j.contains("failures")) {
    const nlohmann::json& f = j["failures"];
    for (auto [name, count] :
         {std::pair<const char*, int64_t*>{"workers_replaced", &l.failures_.workers_replaced},
          {"rollbacks", &l.failures_.rollbacks},
          {"chief_restarts", &l.failures_.chief_restarts}}) {
      if (!f.is_object() || !f.contains(name) || !f[name].is_number_integer() ||
          f[name].get<int64_t>() < 0) {
        return InvalidArgument("task ledger: \"failures\" field \"", name,
                               "\" is missing or not a count");
      }
      *count = f[name].get<int64_t>();
    }
  }
  const nlohmann::json& epochs = j.contains("ledger") ? j["ledger"] : nlohmann::json();
  if (!epochs.is_array() || static_cast<int>(epochs.size()) != shape.epochs) {
    return InvalidArgument("task ledger: \"ledger\" must list ", shape.epochs, " epochs");
  }
  for (int e = 0; e < shape.epochs; ++e) {
    const nlohmann::json& tasks = epochs[e];
    if (!tasks.is_array() || static_cast<int64_t>(tasks.size()) != l.tasks_per_epoch_) {
      return InvalidArgument("task ledger: epoch ", e, " must list ", l.tasks_per_epoch_, " tasks");
    }
    for (int64_t id = 0; id < l.tasks_per_epoch_; ++id) {
      const nlohmann::json& t = tasks[id];
      const std::string where = absl::StrCat("task ledger: task ", id, " of epoch ", e);
      try {
        Task& task = l.tasks_[e * l.tasks_per_epoch_ + id];
        const std::string state = t.at("state").get<std::string>();
        if (state != "applied" && state != "pending")
          return InvalidArgument(where, ": unknown state \"", state, "\"");
        task.handouts = t.at("handouts").get<int>();
        task.applications = t.at("applications").get<int>();
        task.steps = t.at("steps").get<int64_t>();
        task.examples = t.at("examples").get<int64_t>();
        task.holder = t.at("worker").get<int>();
        if (task.handouts < 0 || task.applications < 0 || task.steps < 0 || task.examples < 0) {
          return InvalidArgument(where, ": a negative count");
        }
        if (state == "applied") {
          if (task.holder < 0 || task.holder >= shape.num_workers) {
            return InvalidArgument(where, ": applied by unknown worker ", task.holder);
          }
          task.state = State::kApplied;
          ++l.applied_;
        } else {
          task.holder = -1;
        }
      } catch (const nlohmann::json::exception& ex) {
        return InvalidArgument(where, ": ", ex.what());
      }
    }
  }
  return made;
}

}  // namespace pstrain
