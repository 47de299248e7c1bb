// Internal to src/ps: the ParameterServer implementation, whose methods live in
// parameter_server.cc (roles, configuration, creating and deleting variables) and
// ps_data_path.cc (pulls, pushes and sync steps).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/limits.h"
#include "ps/consistency.h"
#include "ps/ps.h"
#include "ps/ps_internal.h"
#include "ps/variable.h"

namespace pstrain {

// `s` with `prefix` before its message.
inline absl::Status WithPrefix(const absl::Status& s, absl::string_view prefix) {
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

// See parameter_server.cc for the locks and their order.
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

}  // namespace pstrain
