// ParameterServerImpl::Reset and ::AppliedTasks: what the chief's recovery (docs/recovery.md)
// asks of a PS: forget everything for a rollback, and list the task watermarks for the final
// check that every batch of every task was applied exactly once. Also the data plane's address.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ps/parameter_server_impl.h"

namespace pstrain {

absl::Status ParameterServerImpl::Reset(const ResetRequest& req, ResetResponse* resp) {
  if (absl::Status s = CheckSender(req.has_sender(), req.sender()); !s.ok()) return s;
  absl::MutexLock admin(&admin_mu_);  // no create, import or checkpoint copy meanwhile
  if (absl::Status s = CheckChief(req.sender(), "Reset"); !s.ok()) return s;
  resp->set_generation(consistency_.generation());
  std::vector<VariablePtr> removed;
  {
    absl::WriterMutexLock lock(&mu_);
    removed.reserve(vars_.size());
    for (auto& [name, var] : vars_) removed.push_back(std::move(var));
    vars_.clear();
  }
  for (const VariablePtr& var : removed) {
    absl::MutexLock lock(&var->mu);
    var->deleted = true;
  }
  {
    absl::WriterMutexLock lock(&tables_mu_);
    tables_.clear();
  }
  consistency_.Reset(
      absl::StrCat("the chief reset ", Where(), ": this generation is over (the job rolls back)"));
  return absl::OkStatus();
}

absl::Status ParameterServerImpl::AppliedTasks(const AppliedTasksRequest& req,
                                               AppliedTasksResponse* resp) {
  resp->Clear();
  if (absl::Status s = CheckSender(req.has_sender(), req.sender()); !s.ok()) return s;
  if (absl::Status s = CheckChief(req.sender(), "AppliedTasks"); !s.ok()) return s;
  std::vector<std::pair<std::string, VariablePtr>> vars;
  {
    absl::ReaderMutexLock lock(&mu_);
    vars.assign(vars_.begin(), vars_.end());
  }
  std::sort(vars.begin(), vars.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [name, var] : vars) {
    ::pstrain::AppliedTasks* out = resp->add_shards();
    out->set_name(name);
    absl::MutexLock lock(&var->mu);
    var->applied.ToProto(out->mutable_tasks());
  }
  for (const auto& [name, table] : AllTables()) {
    ::pstrain::AppliedTasks* out = resp->add_tables();
    out->set_name(name);
    absl::MutexLock lock(&table->mu);
    table->applied.ToProto(out->mutable_tasks());
  }
  return absl::OkStatus();
}

void ParameterServerImpl::SetDataPlane(const DataPlaneResponse& info) {
  absl::MutexLock lock(&data_plane_mu_);
  data_plane_ = info;
}

DataPlaneResponse ParameterServerImpl::DataPlane() const {
  absl::MutexLock lock(&data_plane_mu_);
  return data_plane_;
}

}  // namespace pstrain
