// The parameters client programs (--model external) create: each restored from the checkpoint
// the job started from when that holds one of its name (docs/checkpoints.md), and saved by the
// job's checkpoints from then on.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "master/job.h"
#include "master/specs.h"
#include "spdlog/spdlog.h"

namespace pstrain {

// CreateVariable of a client program: the spec is checked before anything is drawn or sent.
absl::StatusOr<Placement> Job::Create(const VariableSpec& spec) {
  absl::StatusOr<NewVariable> var = VariableFromSpec(spec, config_.optimizer);
  if (!var.ok()) return var.status();
  absl::MutexLock lock(&create_mu_);
  // Created before (by this program or another): the placer checks the shape.
  if (program_variables_.contains(var->name)) return placer_->GetOrCreate(*var, spec.partitioner());
  absl::StatusOr<Placement> placed = absl::NotFoundError("no checkpoint");
  if (restore_ != nullptr) {
    placed = RestoreVariable(*restore_, *var, spec.partitioner(), placer_, ps_addresses_,
                             config_.rpc_timeout);
    if (placed.ok()) spdlog::info("variable '{}' restored from {}", var->name, restore_->path);
  }
  if (absl::IsNotFound(placed.status())) placed = placer_->GetOrCreate(*var, spec.partitioner());
  if (!placed.ok()) return placed.status();
  program_variables_.insert(var->name);
  if (checkpoints_ != nullptr) checkpoints_->AddVariable(*placed, var->shape);
  return placed;
}

absl::Status Job::CreateTable(const TableDef& def) {
  absl::MutexLock lock(&create_mu_);
  if (program_tables_.contains(def.name())) return tables_->GetOrCreate(def);
  absl::Status s = absl::NotFoundError("no checkpoint");
  if (restore_ != nullptr) {
    s = RestoreTable(*restore_, def, tables_, ps_addresses_, config_.rpc_timeout);
    if (s.ok()) spdlog::info("table '{}' restored from {}", def.name(), restore_->path);
  }
  if (absl::IsNotFound(s)) s = tables_->GetOrCreate(def);
  if (!s.ok()) return s;
  program_tables_.insert(def.name());
  if (checkpoints_ != nullptr) checkpoints_->AddTable(def.name(), def.dim());
  return absl::OkStatus();
}

void Job::WarnNotCreated() {
  absl::MutexLock lock(&create_mu_);
  if (restore_ == nullptr || warned_not_created_) return;
  warned_not_created_ = true;
  std::vector<std::string> left;
  for (const LoadedCheckpoint::Variable& v : restore_->variables) {
    if (!program_variables_.contains(v.name))
      left.push_back(absl::StrCat("variable '", v.name, "'"));
  }
  for (const TableRecord& t : restore_->tables) {
    if (!program_tables_.contains(t.name)) left.push_back(absl::StrCat("table '", t.name, "'"));
  }
  if (left.empty()) return;
  spdlog::warn(
      "checkpoint {} holds {} that no program created by its first push: {}; the job's "
      "checkpoints hold only what its programs create",
      restore_->path, left.size() == 1 ? "one parameter" : absl::StrCat(left.size(), " parameters"),
      absl::StrJoin(left, ", "));
}

}  // namespace pstrain
