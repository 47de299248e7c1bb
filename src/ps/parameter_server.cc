// ParameterServer: variables in a map guarded by a reader-writer lock, each variable with its own
// lock around its values, optimizer and version.
//
// The map holds shared pointers: a request keeps the variables it looked up alive, so a delete
// while it runs is safe. Locks, outermost first: admin_mu_ (serialises the chief's Configure,
// CreateVariables and DeleteVariables, so a configure cannot race a create), then the map's lock
// or Consistency's lock, then one variable's lock. The map's lock is never held while another is
// taken, a request holds one variable's lock at a time, and chief_mu_ is a leaf.

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/limits.h"
#include "common/tensor.h"
#include "common/tensor_codec.h"
#include "ps/consistency.h"
#include "ps/optimizer.h"
#include "ps/ps.h"
#include "ps/ps_internal.h"
#include "ps/variable.h"

namespace pstrain {

// The first pass has no early exit so it vectorises; the second runs only for a bad tensor.
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

namespace {

absl::Status WithPrefix(const absl::Status& s, absl::string_view prefix) {
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

// InvalidArgument for more than kMaxVariablesPerRequest names, an empty or over-long name, or
// (with `repeated_code`) a name given twice. `what` names the request in messages.
template <typename Names, typename GetName>
absl::Status CheckNames(const Names& items, GetName name_of, absl::string_view what,
                        absl::StatusCode repeated_code) {
  if (items.size() > kMaxVariablesPerRequest) {
    return absl::InvalidArgumentError(absl::StrCat(what, " names ", items.size(),
                                                   " variables, over the limit of ",
                                                   kMaxVariablesPerRequest, " per request"));
  }
  absl::flat_hash_set<absl::string_view> seen;
  seen.reserve(items.size());
  for (int i = 0; i < items.size(); ++i) {
    const std::string& name = name_of(items[i]);
    if (name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("variable ", i, " of the ", what, " has an empty name"));
    }
    if (name.size() > kMaxNameBytes) {
      return absl::InvalidArgumentError(absl::StrCat("variable name ", Quoted(name), " in the ",
                                                     what, " is over the limit of ", kMaxNameBytes,
                                                     " bytes"));
    }
    if (!seen.insert(name).second) {
      return absl::Status(repeated_code, absl::StrCat("variable ", Quoted(name),
                                                      " appears more than once in the ", what));
    }
  }
  return absl::OkStatus();
}

class ParameterServerImpl final : public ParameterServer {
 public:
  explicit ParameterServerImpl(const Options& options) : options_(options) {}

  void ExpectChief(uint64_t incarnation) override;
  absl::Status Configure(const ConfigureRequest& req, ConfigureResponse* resp) override;
  absl::Status CreateVariables(const CreateVariablesRequest& req,
                               CreateVariablesResponse* resp) override;
  absl::Status DeleteVariables(const DeleteVariablesRequest& req,
                               DeleteVariablesResponse* resp) override;
  void PullAsync(const PullRequest& req, PullResponse* resp,
                 std::function<void(absl::Status)> done) override;
  absl::Status Push(const PushRequest& req, PushResponse* resp) override;
  absl::Status Leave(const LeaveRequest& req, LeaveResponse* resp) override;
  absl::Status Stats(const StatsRequest& req, StatsResponse* resp) override;
  absl::Status CheckShutdown(const ShutdownRequest& req) override;
  void Stop() override { consistency_.Stop(); }

 private:
  // PermissionDenied unless `s` is chief:0 with the pinned incarnation; the first chief call
  // pins its incarnation when ExpectChief has not.
  absl::Status CheckChief(const Sender& s, absl::string_view method) ABSL_LOCKS_EXCLUDED(chief_mu_);
  // The chief (as CheckChief), or a worker as Consistency::CheckWorker allows.
  absl::Status CheckChiefOrWorker(const Sender& s, absl::string_view method);
  // The checks of a pull before it looks at any variable's values; fills `vars` in request order.
  absl::Status ValidatePull(const PullRequest& req, std::vector<VariablePtr>* vars);
  // The sync-mode wait of a pull: what it waits for, and what it still lacks.
  bool SyncReady(const std::vector<VariablePtr>& vars, uint64_t min_version);
  std::string SyncWaitReason(const std::vector<VariablePtr>& vars,
                             const std::vector<std::string>& names, uint64_t min_version);
  // Applies one validated gradient under the variable's lock; returns whether it was dropped as
  // stale (sync) and whether an update was applied.
  // Returns the variable's version after this gradient, read under the same lock.
  uint64_t ApplyOne(Variable* var, const Gradient& g, const float* grad, int task,
                    uint64_t incarnation, Mode mode, bool* dropped, bool* updated);
  // sync: applies the accumulated step if it has enough gradients; returns whether it did.
  bool MaybeApplyStep(Variable* var) ABSL_EXCLUSIVE_LOCKS_REQUIRED(var->mu);
  // sync: MaybeApplyStep on every variable, after a worker stopped counting.
  void ApplyCompleteSteps() ABSL_LOCKS_EXCLUDED(mu_);
  // The named variable, or NotFound naming it and this task.
  absl::StatusOr<VariablePtr> Find(absl::string_view name) ABSL_LOCKS_EXCLUDED(mu_);
  std::string Where() const { return absl::StrCat("ps task ", options_.task); }
  absl::Status Refused(const absl::Status& s) const {
    return absl::Status(s.code(), absl::StrCat(s.message(), ", refused on ", Where()));
  }

  const Options options_;
  Consistency consistency_;
  absl::Mutex admin_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  absl::Mutex chief_mu_;
  std::optional<uint64_t> chief_incarnation_ ABSL_GUARDED_BY(chief_mu_);
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, VariablePtr> vars_ ABSL_GUARDED_BY(mu_);
};

void ParameterServerImpl::ExpectChief(uint64_t incarnation) {
  absl::MutexLock lock(&chief_mu_);
  chief_incarnation_ = incarnation;
}

absl::Status ParameterServerImpl::CheckChief(const Sender& s, absl::string_view method) {
  if (s.job() != "chief" || s.task() != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        method, " from ", SenderString(s), " refused on ", Where(), ": only chief:0 may call it"));
  }
  absl::MutexLock lock(&chief_mu_);
  if (!chief_incarnation_) chief_incarnation_ = s.incarnation();
  if (*chief_incarnation_ != s.incarnation()) {
    return absl::PermissionDeniedError(
        absl::StrCat(method, " from ", SenderString(s), " refused on ", Where(),
                     ": the job's chief is incarnation ", *chief_incarnation_));
  }
  return absl::OkStatus();
}

absl::Status ParameterServerImpl::CheckChiefOrWorker(const Sender& s, absl::string_view method) {
  if (s.job() == "chief") return CheckChief(s, method);
  if (absl::Status st = consistency_.CheckWorker(s, method); !st.ok()) return Refused(st);
  return absl::OkStatus();
}

absl::StatusOr<VariablePtr> ParameterServerImpl::Find(absl::string_view name) {
  absl::ReaderMutexLock lock(&mu_);
  auto it = vars_.find(name);
  if (it == vars_.end()) {
    return absl::NotFoundError(absl::StrCat("variable ", Quoted(name), " not found on ", Where()));
  }
  return it->second;
}

absl::Status ParameterServerImpl::Configure(const ConfigureRequest& req, ConfigureResponse* resp) {
  if (absl::Status s = CheckSender(req.has_sender(), req.sender()); !s.ok()) return s;
  absl::MutexLock admin(&admin_mu_);
  if (absl::Status s = CheckChief(req.sender(), "Configure"); !s.ok()) return s;
  {
    absl::ReaderMutexLock lock(&mu_);
    if (!vars_.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("configure after variables were created on ", Where()));
    }
  }
  return WithPrefix(consistency_.Configure(req), absl::StrCat("configure on ", Where(), ": "));
}

absl::Status ParameterServerImpl::Leave(const LeaveRequest& req, LeaveResponse* resp) {
  if (absl::Status s = CheckSender(req.has_sender(), req.sender()); !s.ok()) return s;
  if (absl::Status s = consistency_.CheckWorker(req.sender(), "leave"); !s.ok()) {
    return Refused(s);
  }
  if (consistency_.Leave(req.sender(), req.pause()) && consistency_.mode() == Mode::kSync) {
    ApplyCompleteSteps();
  }
  consistency_.Notify();
  return absl::OkStatus();
}

absl::Status ParameterServerImpl::Stats(const StatsRequest& req, StatsResponse* resp) {
  if (absl::Status s = CheckSender(req.has_sender(), req.sender()); !s.ok()) return s;
  if (absl::Status s = CheckChiefOrWorker(req.sender(), "stats"); !s.ok()) return s;
  consistency_.FillStats(resp);
  return absl::OkStatus();
}

absl::Status ParameterServerImpl::CheckShutdown(const ShutdownRequest& req) {
  if (absl::Status s = CheckSender(req.has_sender(), req.sender()); !s.ok()) return s;
  if (absl::Status s = CheckChief(req.sender(), "Shutdown"); !s.ok()) return s;
  if (req.reason().size() > kMaxTextBytes) {
    return absl::InvalidArgumentError(absl::StrCat("shutdown reason of ", req.reason().size(),
                                                   " bytes is over the limit of ", kMaxTextBytes));
  }
  return absl::OkStatus();
}

absl::Status ParameterServerImpl::CreateVariables(const CreateVariablesRequest& req,
                                                  CreateVariablesResponse* resp) {
  if (absl::Status s = CheckSender(req.has_sender(), req.sender()); !s.ok()) return s;
  absl::MutexLock admin(&admin_mu_);
  if (absl::Status s = CheckChief(req.sender(), "CreateVariables"); !s.ok()) return s;
  if (absl::Status s = CheckNames(
          req.variables(), [](const VariableDef& d) -> const std::string& { return d.name(); },
          "request", absl::StatusCode::kAlreadyExists);
      !s.ok()) {
    return s;
  }

  // Build every variable (value and optimizer) outside the lock; insert all or none under it.
  std::vector<std::pair<std::string, VariablePtr>> created;
  try {
    created.reserve(req.variables_size());
    for (const VariableDef& def : req.variables()) {
      const std::string& name = def.name();
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
      if (!opt.ok()) return WithPrefix(opt.status(), absl::StrCat("variable ", Quoted(name), ": "));
      created.emplace_back(
          name, std::make_shared<Variable>(std::move(value->shape), std::move(value->values),
                                           *std::move(opt)));
    }
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat("not enough memory on ", Where(),
                                                     " to create the ", req.variables_size(),
                                                     " variables of the request"));
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

absl::Status ParameterServerImpl::DeleteVariables(const DeleteVariablesRequest& req,
                                                  DeleteVariablesResponse* resp) {
  if (absl::Status s = CheckSender(req.has_sender(), req.sender()); !s.ok()) return s;
  absl::MutexLock admin(&admin_mu_);
  if (absl::Status s = CheckChief(req.sender(), "DeleteVariables"); !s.ok()) return s;
  if (req.names_size() > kMaxVariablesPerRequest) {
    return absl::InvalidArgumentError(absl::StrCat("delete names ", req.names_size(),
                                                   " variables, over the limit of ",
                                                   kMaxVariablesPerRequest, " per request"));
  }
  std::vector<VariablePtr> removed;
  {
    absl::WriterMutexLock lock(&mu_);
    for (const std::string& name : req.names()) {
      auto it = vars_.find(name);
      if (it == vars_.end()) continue;
      removed.push_back(std::move(it->second));
      vars_.erase(it);
    }
  }
  for (const VariablePtr& var : removed) {
    absl::MutexLock lock(&var->mu);
    var->deleted = true;
  }
  consistency_.Notify();  // pulls waiting on a removed variable end now
  return absl::OkStatus();
}

absl::Status ParameterServerImpl::ValidatePull(const PullRequest& req,
                                               std::vector<VariablePtr>* vars) {
  if (absl::Status s = CheckSender(req.has_sender(), req.sender()); !s.ok()) return s;
  if (absl::Status s = CheckChiefOrWorker(req.sender(), "pull"); !s.ok()) return s;
  if (absl::Status s = CheckNames(
          req.names(), [](const std::string& n) -> const std::string& { return n; }, "pull",
          absl::StatusCode::kInvalidArgument);
      !s.ok()) {
    return s;
  }
  vars->reserve(req.names_size());
  int64_t total = 0;
  for (const std::string& name : req.names()) {
    absl::StatusOr<VariablePtr> var = Find(name);
    if (!var.ok()) return var.status();
    // At most kMaxVariablesPerRequest * kMaxTensorBytes: cannot overflow, checked all the same.
    total = CheckedAdd(total, (*var)->bytes).value_or(std::numeric_limits<int64_t>::max());
    vars->push_back(*std::move(var));
  }
  if (total > kMaxPayloadBytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("pull of ", req.names_size(), " variables from ", Where(), " would return ",
                     total, " bytes, over the limit of ", kMaxPayloadBytes,
                     " bytes per response; the client must split the pull"));
  }
  return absl::OkStatus();
}

// Every variable at min_version or later, and all at the same step, so the worker's gradients are
// for one step. (They differ only while the last pushes of a step are still being applied.) A
// removed variable ends the wait: the pull is then answered NotFound.
bool ParameterServerImpl::SyncReady(const std::vector<VariablePtr>& vars, uint64_t min_version) {
  std::optional<uint64_t> step;
  for (const VariablePtr& v : vars) {
    absl::ReaderMutexLock lock(&v->mu);
    if (v->deleted) return true;
    if (v->version < min_version || (step && *step != v->version)) return false;
    step = v->version;
  }
  return true;
}

std::string ParameterServerImpl::SyncWaitReason(const std::vector<VariablePtr>& vars,
                                                const std::vector<std::string>& names,
                                                uint64_t min_version) {
  for (size_t i = 0; i < vars.size(); ++i) {
    absl::ReaderMutexLock lock(&vars[i]->mu);
    const uint64_t at = vars[i]->version;
    if (at >= min_version) continue;
    const Contributors& have = vars[i]->contributors;
    return absl::StrCat("step ", min_version, ": variable ", Quoted(names[i]), " is at step ", at,
                        " on ", Where(), "; step ", at + 1, " still lacks gradients from ",
                        consistency_.Lacking(have), " (it has ", have.size(), " of ",
                        consistency_.StepThreshold(have), ")");
  }
  return absl::StrCat("step ", min_version, ": the variables on ", Where(),
                      " to reach the same step");
}

void ParameterServerImpl::PullAsync(const PullRequest& req, PullResponse* resp,
                                    std::function<void(absl::Status)> done) {
  resp->Clear();
  auto vars = std::make_shared<std::vector<VariablePtr>>();
  if (absl::Status s = ValidatePull(req, vars.get()); !s.ok()) return done(s);
  const Mode mode = consistency_.mode();
  const uint64_t min_version = req.min_version();
  const int64_t clock = req.clock();
  const Sender sender = req.sender();
  auto names =
      std::make_shared<const std::vector<std::string>>(req.names().begin(), req.names().end());
  Consistency::Wait wait;
  // ready and describe are called under the consistency lock and take variable locks after it.
  wait.ready = [this, vars, mode, min_version, clock]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (mode == Mode::kSsp) return consistency_.ClockAllows(clock);
    return mode != Mode::kSync || SyncReady(*vars, min_version);
  };
  wait.describe = [this, vars, names, mode, min_version, clock, sender]()
                      ABSL_NO_THREAD_SAFETY_ANALYSIS -> std::string {
    if (mode == Mode::kSsp) return consistency_.ClockWaitReason(sender, clock);
    return SyncWaitReason(*vars, *names, min_version);
  };
  wait.serve = [this, vars, names, resp, done = std::move(done)](absl::Status s) {
    if (!s.ok()) return done(s);
    try {
      for (size_t i = 0; i < vars->size(); ++i) {
        Variable* var = (*vars)[i].get();
        absl::ReaderMutexLock lock(&var->mu);
        if (var->deleted) {
          resp->Clear();
          return done(absl::NotFoundError(absl::StrCat("variable ", Quoted((*names)[i]),
                                                       " was deleted from ", Where(),
                                                       " while the pull waited")));
        }
        VariableValue* out = resp->add_values();
        out->set_name((*names)[i]);
        out->set_version(var->version);
        EncodeTensor(var->shape, var->values.data(), out->mutable_value());
      }
    } catch (const std::bad_alloc&) {
      resp->Clear();
      return done(absl::ResourceExhaustedError(
          absl::StrCat("not enough memory on ", Where(), " to answer a pull")));
    }
    done(absl::OkStatus());
  };
  consistency_.PullOrWait(sender, clock, std::move(wait));
}

absl::Status ParameterServerImpl::Push(const PushRequest& req, PushResponse* resp) {
  resp->Clear();
  if (absl::Status s = CheckSender(req.has_sender(), req.sender()); !s.ok()) return s;
  if (absl::Status s = consistency_.CheckPusher(req.sender()); !s.ok()) return Refused(s);
  if (req.gradients_size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat("push from ", SenderString(req.sender()), " to ",
                                                   Where(), " carries no gradient"));
  }
  if (absl::Status s = CheckNames(
          req.gradients(), [](const Gradient& g) -> const std::string& { return g.name(); }, "push",
          absl::StatusCode::kInvalidArgument);
      !s.ok()) {
    return s;
  }
  const Mode mode = consistency_.mode();
  const int task = req.sender().task();
  const uint64_t incarnation = req.sender().incarnation();

  // Validate everything first. What is checked cannot become invalid before the apply below:
  // shapes are fixed, the gradient belongs to the request, and versions only grow.
  const int n = req.gradients_size();
  std::vector<VariablePtr> vars(n);
  std::vector<const float*> grads(n);
  for (int i = 0; i < n; ++i) {
    const Gradient& g = req.gradients(i);
    const std::string what = absl::StrCat("gradient for variable ", Quoted(g.name()));
    absl::StatusOr<VariablePtr> var = Find(g.name());
    if (!var.ok()) return var.status();
    absl::StatusOr<const float*> data = TensorData(g.gradient(), (*var)->shape, what);
    if (!data.ok()) return data.status();
    const int64_t size = (*var)->bytes / static_cast<int64_t>(sizeof(float));
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
    vars[i] = *std::move(var);
    grads[i] = *data;
  }

  consistency_.Rejoin(req.sender());  // a worker paused at a barrier counts again
  bool any_dropped = false, any_update = false;
  for (int i = 0; i < n; ++i) {
    bool dropped = false, updated = false;
    resp->add_versions(ApplyOne(vars[i].get(), req.gradients(i), grads[i], task, incarnation, mode,
                                &dropped, &updated));
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
                                       int task, uint64_t incarnation, Mode mode, bool* dropped,
                                       bool* updated) {
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
  *updated = MaybeApplyStep(var);
  return var->version;
}

bool ParameterServerImpl::MaybeApplyStep(Variable* var) {
  const size_t have = var->contributors.size();
  if (have == 0 || have < static_cast<size_t>(consistency_.StepThreshold(var->contributors))) {
    return false;
  }
  const int64_t n = static_cast<int64_t>(var->values.size());
  float* acc = var->accum.data();
  const float scale = 1.0f / static_cast<float>(have);  // the average of the gradients received
  for (int64_t j = 0; j < n; ++j) acc[j] *= scale;
  var->optimizer->Apply(var->values.data(), acc, n, static_cast<int64_t>(var->version));
  ++var->version;
  std::fill(var->accum.begin(), var->accum.end(), 0.0f);
  var->contributors.clear();
  consistency_.counters.updates_applied++;
  return true;
}

void ParameterServerImpl::ApplyCompleteSteps() {
  std::vector<VariablePtr> all;
  {
    absl::ReaderMutexLock lock(&mu_);
    all.reserve(vars_.size());
    for (const auto& [name, var] : vars_) all.push_back(var);
  }
  for (const VariablePtr& var : all) {
    absl::MutexLock lock(&var->mu);
    MaybeApplyStep(var.get());
  }
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
