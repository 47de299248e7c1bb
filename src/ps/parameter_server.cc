// ParameterServer: variables in a map guarded by a reader-writer lock, each variable with its own
// lock around its values, optimizer and version.
//
// Variables are never removed, so a Variable* found under the map's lock stays valid after the
// lock is released. Locks are never nested: a request looks each variable up under the map's lock,
// releases it, then holds one variable's lock at a time.

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/tensor.h"
#include "common/tensor_codec.h"
#include "ps/consistency.h"
#include "ps/optimizer.h"
#include "ps/ps.h"
#include "ps/ps_internal.h"

namespace pstrain {

absl::Status CheckSender(bool has_sender, const Sender& sender) {
  if (!has_sender || sender.job().empty()) {
    return absl::InvalidArgumentError("request has no sender");
  }
  return absl::OkStatus();
}

namespace {

struct Variable {
  Variable(std::vector<int64_t> s, std::vector<float> v, std::unique_ptr<Optimizer> opt)
      : shape(std::move(s)), values(std::move(v)), optimizer(std::move(opt)) {}

  const std::vector<int64_t> shape;  // fixed at creation; read without the lock
  absl::Mutex mu;
  std::vector<float> values ABSL_GUARDED_BY(mu);
  std::unique_ptr<Optimizer> optimizer ABSL_GUARDED_BY(mu);
  uint64_t version ABSL_GUARDED_BY(mu) = 0;  // number of updates applied: the global step
  // sync mode: the gradients accumulated for step `version`, and who sent them
  std::vector<float> accum ABSL_GUARDED_BY(mu);
  std::vector<std::pair<int, uint64_t>> contributors ABSL_GUARDED_BY(mu);  // (task, incarnation)
};

// Index of the first NaN or Inf in p[0, n), or -1. The first pass has no early exit so it
// vectorises; the second runs only for a bad tensor.
int64_t FirstNonFinite(const float* p, int64_t n) {
  constexpr float kMax = std::numeric_limits<float>::max();
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) bad |= !(std::fabs(p[i]) <= kMax);  // NaN compares false
  if (!bad) return -1;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(p[i])) return i;
  }
  return -1;
}

absl::Status WithPrefix(const absl::Status& s, absl::string_view prefix) {
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

std::string Quoted(absl::string_view name) { return absl::StrCat("'", name, "'"); }

class ParameterServerImpl final : public ParameterServer {
 public:
  explicit ParameterServerImpl(const Options& options) : options_(options) {}

  absl::Status Configure(const ConfigureRequest& req, ConfigureResponse* resp) override;
  absl::Status CreateVariables(const CreateVariablesRequest& req,
                               CreateVariablesResponse* resp) override;
  void PullAsync(const PullRequest& req, PullResponse* resp,
                 std::function<void(absl::Status)> done) override;
  absl::Status Push(const PushRequest& req, PushResponse* resp) override;
  absl::Status Leave(const LeaveRequest& req, LeaveResponse* resp) override;
  absl::Status Stats(const StatsRequest& req, StatsResponse* resp) override;
  void Stop() override { consistency_.Stop(); }

 private:
  // Applies one validated gradient under the variable's lock; returns whether it was dropped as
  // stale (sync) and whether an update was applied.
  // Returns the variable's version after this gradient, read under the same lock.
  uint64_t ApplyOne(Variable* var, const Gradient& g, const float* grad, int task,
                    uint64_t incarnation, Mode mode, int replicas, bool* dropped, bool* updated);
  // The named variable, or NotFound naming it and this task.
  absl::StatusOr<Variable*> Find(absl::string_view name) ABSL_LOCKS_EXCLUDED(mu_);
  std::string Where() const { return absl::StrCat("ps task ", options_.task); }

  const Options options_;
  Consistency consistency_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<Variable>> vars_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<Variable*> ParameterServerImpl::Find(absl::string_view name) {
  absl::ReaderMutexLock lock(&mu_);
  auto it = vars_.find(name);
  if (it == vars_.end()) {
    return absl::NotFoundError(absl::StrCat("variable ", Quoted(name), " not found on ", Where()));
  }
  return it->second.get();
}

absl::Status ParameterServerImpl::Configure(const ConfigureRequest& req, ConfigureResponse* resp) {
  if (absl::Status s = CheckSender(req.has_sender(), req.sender()); !s.ok()) return s;
  {
    absl::ReaderMutexLock lock(&mu_);
    if (!vars_.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("configure after variables were created on ", Where()));
    }
  }
  return consistency_.Configure(req);
}

absl::Status ParameterServerImpl::Leave(const LeaveRequest& req, LeaveResponse* resp) {
  if (absl::Status s = CheckSender(req.has_sender(), req.sender()); !s.ok()) return s;
  consistency_.Leave(req.sender());
  return absl::OkStatus();
}

absl::Status ParameterServerImpl::Stats(const StatsRequest& req, StatsResponse* resp) {
  if (absl::Status s = CheckSender(req.has_sender(), req.sender()); !s.ok()) return s;
  consistency_.FillStats(resp);
  return absl::OkStatus();
}

absl::Status ParameterServerImpl::CreateVariables(const CreateVariablesRequest& req,
                                                  CreateVariablesResponse* resp) {
  if (absl::Status s = CheckSender(req.has_sender(), req.sender()); !s.ok()) return s;

  // Build every variable (value and optimizer) outside the lock; insert all or none under it.
  std::vector<std::pair<std::string, std::unique_ptr<Variable>>> created;
  created.reserve(req.variables_size());
  absl::flat_hash_map<absl::string_view, int> seen;
  for (int i = 0; i < req.variables_size(); ++i) {
    const VariableDef& def = req.variables(i);
    const std::string& name = def.name();
    if (name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("variable ", i, " of the request has an empty name"));
    }
    if (!seen.emplace(name, i).second) {
      return absl::AlreadyExistsError(
          absl::StrCat("variable ", Quoted(name), " appears more than once in the request"));
    }
    absl::StatusOr<Tensor> value = DecodeTensor(def.initial_value());
    if (!value.ok()) {
      return WithPrefix(value.status(),
                        absl::StrCat("initial value of variable ", Quoted(name), ": "));
    }
    if (int64_t bad = FirstNonFinite(value->data(), value->size()); bad >= 0) {
      return absl::InvalidArgumentError(absl::StrCat("initial value of variable ", Quoted(name),
                                                     " has a non-finite value (",
                                                     value->values[bad], ") at index ", bad));
    }
    absl::StatusOr<std::unique_ptr<Optimizer>> opt =
        CreateOptimizer(def.optimizer(), value->size());
    if (!opt.ok()) {
      return WithPrefix(opt.status(), absl::StrCat("variable ", Quoted(name), ": "));
    }
    created.emplace_back(
        name, std::make_unique<Variable>(std::move(value->shape), std::move(value->values),
                                         *std::move(opt)));
  }

  absl::WriterMutexLock lock(&mu_);
  for (const auto& [name, var] : created) {
    if (vars_.contains(name)) {
      return absl::AlreadyExistsError(
          absl::StrCat("variable ", Quoted(name), " already exists on ", Where()));
    }
  }
  for (auto& [name, var] : created) vars_.emplace(std::move(name), std::move(var));
  return absl::OkStatus();
}

void ParameterServerImpl::PullAsync(const PullRequest& req, PullResponse* resp,
                                    std::function<void(absl::Status)> done) {
  resp->Clear();
  if (absl::Status s = CheckSender(req.has_sender(), req.sender()); !s.ok()) return done(s);
  auto vars = std::make_shared<std::vector<Variable*>>();
  vars->reserve(req.names_size());
  for (const std::string& name : req.names()) {
    absl::StatusOr<Variable*> var = Find(name);
    if (!var.ok()) return done(var.status());
    vars->push_back(*var);
  }
  const Mode mode = consistency_.mode();
  const uint64_t min_version = req.min_version();
  const int64_t clock = req.clock();
  const Sender sender = req.sender();
  const std::vector<std::string> names(req.names().begin(), req.names().end());
  Consistency::Wait wait;
  // Called under the consistency lock; takes variable locks after it, in that order. Sync: every
  // variable at min_version or later, and all at the same step, so the worker's gradients are for
  // one step. (They differ only while the last pushes of a step are still being applied.)
  wait.ready = [this, vars, mode, min_version, clock]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (mode == Mode::kSsp) return consistency_.ClockAllows(clock);
    if (mode != Mode::kSync) return true;
    std::optional<uint64_t> step;
    for (Variable* v : *vars) {
      absl::ReaderMutexLock lock(&v->mu);
      if (v->version < min_version || (step && *step != v->version)) return false;
      step = v->version;
    }
    return true;
  };
  wait.describe = [this, vars, names, mode, min_version, clock, sender]()
                      ABSL_NO_THREAD_SAFETY_ANALYSIS -> std::string {
    if (mode == Mode::kSsp) return consistency_.ClockWaitReason(sender, clock);
    for (size_t i = 0; i < vars->size(); ++i) {
      absl::ReaderMutexLock lock(&(*vars)[i]->mu);
      if ((*vars)[i]->version < min_version) {
        return absl::StrCat("step ", min_version, ": variable ", Quoted(names[i]), " is at step ",
                            (*vars)[i]->version, " on ", Where());
      }
    }
    return absl::StrCat("step ", min_version, ": the variables on ", Where(),
                        " to reach the same step");
  };
  wait.serve = [vars, names, resp, done = std::move(done)](absl::Status s) {
    if (!s.ok()) return done(s);
    for (size_t i = 0; i < vars->size(); ++i) {
      Variable* var = (*vars)[i];
      VariableValue* out = resp->add_values();
      out->set_name(names[i]);
      absl::ReaderMutexLock lock(&var->mu);
      out->set_version(var->version);
      EncodeTensor(var->shape, var->values.data(), out->mutable_value());
    }
    done(absl::OkStatus());
  };
  consistency_.PullOrWait(sender, clock, std::move(wait));
}

absl::Status ParameterServerImpl::Push(const PushRequest& req, PushResponse* resp) {
  resp->Clear();
  if (absl::Status s = CheckSender(req.has_sender(), req.sender()); !s.ok()) return s;
  if (absl::Status s = consistency_.CheckPusher(req.sender()); !s.ok()) return s;
  const Mode mode = consistency_.mode();
  const int replicas = consistency_.replicas_to_aggregate();
  const int task = req.sender().task();
  const uint64_t incarnation = req.sender().incarnation();

  // Validate everything first. What is checked cannot become invalid before the apply below:
  // shapes are fixed, the gradient belongs to the request, and versions only grow.
  const int n = req.gradients_size();
  std::vector<Variable*> vars(n);
  std::vector<const float*> grads(n);
  absl::flat_hash_map<absl::string_view, int> seen;
  for (int i = 0; i < n; ++i) {
    const Gradient& g = req.gradients(i);
    const std::string what = absl::StrCat("gradient for variable ", Quoted(g.name()));
    if (!seen.emplace(g.name(), i).second) {
      return absl::InvalidArgumentError(absl::StrCat(what, " appears more than once in the push"));
    }
    absl::StatusOr<Variable*> var = Find(g.name());
    if (!var.ok()) return var.status();
    absl::StatusOr<const float*> data = TensorData(g.gradient(), (*var)->shape, what);
    if (!data.ok()) return data.status();
    const int64_t size = NumElements((*var)->shape);
    if (int64_t bad = FirstNonFinite(*data, size); bad >= 0) {
      consistency_.counters.nonfinite_rejected++;
      return absl::InvalidArgumentError(
          absl::StrCat(what, " has a non-finite value (", (*data)[bad], ") at index ", bad));
    }
    {
      absl::ReaderMutexLock lock(&(*var)->mu);
      const uint64_t version = (*var)->version;
      if (g.read_version() > version) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, " was computed from version ", g.read_version(),
                         " but the variable is at version ", version, " on ", Where()));
      }
      if (mode == Mode::kSync && g.read_version() == version) {
        for (const auto& c : (*var)->contributors) {
          if (c == std::make_pair(task, incarnation)) {
            return absl::InvalidArgumentError(absl::StrCat(
                what, ": worker:", task, " already pushed a gradient for step ", version));
          }
        }
      }
    }
    vars[i] = *var;
    grads[i] = *data;
  }

  bool any_dropped = false, any_update = false;
  for (int i = 0; i < n; ++i) {
    bool dropped = false, updated = false;
    resp->add_versions(ApplyOne(vars[i], req.gradients(i), grads[i], task, incarnation, mode,
                                replicas, &dropped, &updated));
    if (dropped) resp->set_stale_dropped(resp->stale_dropped() + 1);
    any_dropped |= dropped;
    any_update |= updated;
  }
  if (any_dropped) consistency_.counters.stale_dropped++;
  consistency_.CountPush(consistency_.WorkerSlot(req.sender()), any_dropped);
  if (any_update) consistency_.Notify();
  return absl::OkStatus();
}

uint64_t ParameterServerImpl::ApplyOne(Variable* var, const Gradient& g, const float* grad,
                                       int task, uint64_t incarnation, Mode mode, int replicas,
                                       bool* dropped, bool* updated) {
  absl::MutexLock lock(&var->mu);
  const int64_t n = static_cast<int64_t>(var->values.size());
  if (mode != Mode::kSync) {
    var->optimizer->Apply(var->values.data(), grad, n, static_cast<int64_t>(var->version));
    ++var->version;
    consistency_.counters.pushes_applied++;
    consistency_.counters.updates_applied++;
    *updated = true;
    return var->version;
  }
  if (g.read_version() < var->version) {  // computed for a step that is already applied
    *dropped = true;
    return var->version;
  }
  if (var->accum.empty()) var->accum.assign(n, 0.0f);
  float* acc = var->accum.data();
  for (int64_t j = 0; j < n; ++j) acc[j] += grad[j];
  var->contributors.emplace_back(task, incarnation);
  consistency_.counters.pushes_applied++;
  if (static_cast<int>(var->contributors.size()) < replicas) return var->version;
  const float scale = 1.0f / static_cast<float>(replicas);
  for (int64_t j = 0; j < n; ++j) acc[j] *= scale;
  var->optimizer->Apply(var->values.data(), acc, n, static_cast<int64_t>(var->version));
  ++var->version;
  std::fill(var->accum.begin(), var->accum.end(), 0.0f);
  var->contributors.clear();
  consistency_.counters.updates_applied++;
  *updated = true;
  return var->version;
}

}  // namespace

absl::Status ParameterServer::Pull(const PullRequest& req, PullResponse* resp) {
  absl::Notification done;
  absl::Status status;
  PullAsync(req, resp, [&](absl::Status s) {
    status = std::move(s);
    done.Notify();
  });
  done.WaitForNotification();
  return status;
}

absl::StatusOr<std::unique_ptr<ParameterServer>> ParameterServer::Create(const Options& options) {
  if (options.task < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter server task must be non-negative, got ", options.task));
  }
  return std::make_unique<ParameterServerImpl>(options);
}

}  // namespace pstrain
