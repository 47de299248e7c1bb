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
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/tensor.h"
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
  uint64_t version ABSL_GUARDED_BY(mu) = 0;  // number of gradients applied
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

  absl::Status CreateVariables(const CreateVariablesRequest& req,
                               CreateVariablesResponse* resp) override;
  absl::Status Pull(const PullRequest& req, PullResponse* resp) override;
  absl::Status Push(const PushRequest& req, PushResponse* resp) override;

 private:
  // The named variable, or NotFound naming it and this task.
  absl::StatusOr<Variable*> Find(absl::string_view name) ABSL_LOCKS_EXCLUDED(mu_);
  std::string Where() const { return absl::StrCat("ps task ", options_.task); }

  const Options options_;
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

absl::Status ParameterServerImpl::Pull(const PullRequest& req, PullResponse* resp) {
  resp->Clear();
  if (absl::Status s = CheckSender(req.has_sender(), req.sender()); !s.ok()) return s;
  std::vector<Variable*> vars;
  vars.reserve(req.names_size());
  for (const std::string& name : req.names()) {
    absl::StatusOr<Variable*> var = Find(name);
    if (!var.ok()) return var.status();
    vars.push_back(*var);
  }
  for (int i = 0; i < req.names_size(); ++i) {
    Variable* var = vars[i];
    VariableValue* out = resp->add_values();
    out->set_name(req.names(i));
    absl::ReaderMutexLock lock(&var->mu);
    out->set_version(var->version);
    EncodeTensor(var->shape, var->values.data(), out->mutable_value());
  }
  return absl::OkStatus();
}

absl::Status ParameterServerImpl::Push(const PushRequest& req, PushResponse* resp) {
  resp->Clear();
  if (absl::Status s = CheckSender(req.has_sender(), req.sender()); !s.ok()) return s;

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
      return absl::InvalidArgumentError(
          absl::StrCat(what, " has a non-finite value (", (*data)[bad], ") at index ", bad));
    }
    uint64_t version;
    {
      absl::ReaderMutexLock lock(&(*var)->mu);
      version = (*var)->version;
    }
    if (g.read_version() > version) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " was computed from version ", g.read_version(),
                       " but the variable is at version ", version, " on ", Where()));
    }
    vars[i] = *var;
    grads[i] = *data;
  }

  for (int i = 0; i < n; ++i) {
    Variable* var = vars[i];
    absl::MutexLock lock(&var->mu);
    var->optimizer->Apply(var->values.data(), grads[i], static_cast<int64_t>(var->values.size()));
    resp->add_versions(++var->version);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ParameterServer>> ParameterServer::Create(const Options& options) {
  if (options.task < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter server task must be non-negative, got ", options.task));
  }
  return std::make_unique<ParameterServerImpl>(options);
}

}  // namespace pstrain
