// ParameterServer: variables in a map guarded by a reader-writer lock, each variable with its own
// lock around its values, optimizer and version; embedding tables likewise in their own map, each
// table thread-safe on its own plus a lock for its sync step.
//
// The maps hold shared pointers: a request keeps the variables and tables it looked up alive, so
// a delete while it runs is safe. Locks, outermost first: admin_mu_ (serialises the chief's
// Configure, CreateVariables, DeleteVariables and CreateTables, so a configure cannot race a
// create), then a map's lock (mu_ or tables_mu_) or Consistency's lock, then one variable's lock
// or one table's step lock (Table::mu), then the EmbeddingTable's own locks (leaves, taken inside
// its methods). A map's lock is never held while another is taken, a request holds one variable's
// or table's lock at a time (except an async or ssp push, which holds the locks of all its
// variables at once, taken in address order: ApplyAtOnce in ps_data_path.cc), and chief_mu_ is a
// leaf. No lock is held across a wait: a pull or
// lookup that waits is queued in Consistency and served, outside every lock, by the call that
// made it ready. A shard's task watermarks are guarded by its variable's lock and a table's by
// Table::mu, which a sparse push takes in sync mode and, when tagged, in every mode: a watermark
// changes with the update it stands for, and a checkpoint's copy, which takes the same locks,
// sees both or neither. Whether a waiting lookup is ready is read from its tables' published
// versions (atomics), so that check never waits for a table's lock; only the message of a lookup
// that timed out takes Table::mu (for the step's contributors) under Consistency's lock.

#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/limits.h"
#include "common/tensor.h"
#include "common/tensor_codec.h"
#include "ps/optimizer.h"
#include "ps/parameter_server_impl.h"

namespace pstrain {

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

absl::Status ParameterServerImpl::CheckGeneration(const Sender& s, absl::string_view what) const {
  if (s.job() == "chief") return absl::OkStatus();
  const uint64_t runs = consistency_.generation();
  if (runs == 0 || s.generation() == runs) return absl::OkStatus();
  // A sender outside the cluster is denied as such (docs/semantics.md), not told to roll back.
  if (consistency_.WorkerSlot(s) < 0) {
    return absl::PermissionDeniedError(absl::StrCat(what, " from ", SenderString(s),
                                                    " refused by ps:", options_.task,
                                                    ": not a worker of the job"));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      what, " from ", SenderString(s), " of generation ", s.generation(),
      " refused by ps:", options_.task, ": it runs generation ", runs, " (the job rolled back)"));
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

absl::Status ParameterServerImpl::ReplaceWorker(const ReplaceWorkerRequest& req) {
  if (absl::Status s = CheckSender(req.has_sender(), req.sender()); !s.ok()) return s;
  absl::MutexLock admin(&admin_mu_);
  if (absl::Status s = CheckChief(req.sender(), "ReplaceWorker"); !s.ok()) return s;
  return WithPrefix(consistency_.ReplaceWorker(req.worker()),
                    absl::StrCat("replace worker on ", Where(), ": "));
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
  {
    absl::ReaderMutexLock lock(&tables_mu_);
    if (!tables_.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("configure after tables were created on ", Where()));
    }
  }
  return WithPrefix(consistency_.Configure(req), absl::StrCat("configure on ", Where(), ": "));
}

absl::Status ParameterServerImpl::Leave(const LeaveRequest& req, LeaveResponse* resp) {
  if (absl::Status s = CheckSender(req.has_sender(), req.sender()); !s.ok()) return s;
  if (absl::Status s = CheckGeneration(req.sender(), "leave"); !s.ok()) return s;
  if (absl::Status s = consistency_.CheckWorker(req.sender(), "leave"); !s.ok()) {
    return Refused(s);
  }
  if (consistency_.Leave(req.sender(), req.pause()) && consistency_.mode() == Mode::kSync) {
    ApplyCompleteSteps();
    ApplyCompleteTableSteps();
  }
  consistency_.Notify();
  return absl::OkStatus();
}

absl::Status ParameterServerImpl::Stats(const StatsRequest& req, StatsResponse* resp) {
  if (absl::Status s = CheckSender(req.has_sender(), req.sender()); !s.ok()) return s;
  if (absl::Status s = CheckChiefOrWorker(req.sender(), "stats"); !s.ok()) return s;
  consistency_.FillStats(resp);
  FillTableStats(resp);
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

namespace {

// Starts an asynchronous call with the callback it must call once, and waits for it.
absl::Status WaitFor(const std::function<void(std::function<void(absl::Status)>)>& start) {
  absl::Notification done;
  absl::Status status;
  start([&](absl::Status s) {
    status = std::move(s);
    done.Notify();
  });
  done.WaitForNotification();
  return status;
}

}  // namespace

absl::Status ParameterServer::Pull(const PullRequest& req, PullResponse* resp) {
  return WaitFor(
      [&](std::function<void(absl::Status)> done) { PullAsync(req, resp, std::move(done)); });
}

absl::Status ParameterServer::Lookup(const LookupRequest& req, LookupResponse* resp) {
  return WaitFor(
      [&](std::function<void(absl::Status)> done) { LookupAsync(req, resp, std::move(done)); });
}

absl::StatusOr<std::unique_ptr<ParameterServer>> ParameterServer::Create(const Options& options) {
  if (options.task < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter server task must be non-negative, got ", options.task));
  }
  return std::make_unique<ParameterServerImpl>(options);
}

}  // namespace pstrain
