// The parameters client programs (--model external) create: each restored from the checkpoint
// the job started from when that holds one of its name (docs/checkpoints.md), and saved by the
// job's checkpoints from then on.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "master/job.h"
#include "master/specs.h"
#include "spdlog/spdlog.h"

namespace pstrain {

// CreateVariable of a client program: the spec is checked before anything is drawn or sent.
absl::StatusOr<Placement> Job::Create(const VariableSpec& spec) {
  absl::MutexLock lock(&create_mu_);
  return CreateVariableLocked(spec);
}

absl::Status Job::CreateTable(const TableDef& def) {
  absl::MutexLock lock(&create_mu_);
  return CreateTableLocked(def);
}

absl::StatusOr<Placement> Job::CreateVariableLocked(const VariableSpec& spec) {
  absl::StatusOr<NewVariable> var = VariableFromSpec(spec, config_.optimizer);
  if (!var.ok()) return var.status();
  // Created before (by this program or another): the placer checks the shape.
  if (program_variables_.contains(var->name)) return placer_->GetOrCreate(*var, spec.partitioner());
  absl::StatusOr<Placement> placed = absl::NotFoundError("no checkpoint");
  if (source_ != nullptr) {
    placed = RestoreVariable(*source_, *var, spec.partitioner(), placer_, ps_addresses_,
                             config_.rpc_timeout);
    if (placed.ok()) spdlog::info("variable '{}' restored from {}", var->name, source_->path);
  }
  if (absl::IsNotFound(placed.status())) placed = placer_->GetOrCreate(*var, spec.partitioner());
  if (!placed.ok()) return placed.status();
  program_variables_.insert(var->name);
  program_specs_.push_back(spec);
  if (checkpoints_ != nullptr) checkpoints_->AddVariable(*placed, var->shape);
  return placed;
}

absl::Status Job::CreateTableLocked(const TableDef& def) {
  if (program_tables_.contains(def.name())) return tables_->GetOrCreate(def);
  absl::Status s = absl::NotFoundError("no checkpoint");
  if (source_ != nullptr) {
    s = RestoreTable(*source_, def, tables_, ps_addresses_, config_.rpc_timeout);
    if (s.ok()) spdlog::info("table '{}' restored from {}", def.name(), source_->path);
  }
  if (absl::IsNotFound(s)) s = tables_->GetOrCreate(def);
  if (!s.ok()) return s;
  program_tables_.insert(def.name());
  program_table_defs_.push_back(def);
  if (checkpoints_ != nullptr) checkpoints_->AddTable(def.name(), def.dim());
  return absl::OkStatus();
}

absl::Status Job::RecreateProgramParameters(const LoadedCheckpoint* ckpt) {
  absl::MutexLock lock(&create_mu_);
  // The PS were Reset: nothing created before is there.
  placer_->Forget();
  tables_->Forget();
  if (checkpoints_ != nullptr) checkpoints_->SetModel({}, {});
  source_ = ckpt;
  const std::vector<VariableSpec> specs = std::exchange(program_specs_, {});
  const std::vector<TableDef> defs = std::exchange(program_table_defs_, {});
  program_variables_.clear();
  program_tables_.clear();
  // In the programs' order, so that each variable is placed where they know it is.
  for (const VariableSpec& spec : specs) {
    if (absl::StatusOr<Placement> p = CreateVariableLocked(spec); !p.ok()) return p.status();
  }
  for (const TableDef& def : defs) {
    if (absl::Status s = CreateTableLocked(def); !s.ok()) return s;
  }
  spdlog::info("the programs' {} variables and {} tables are back, from {}", specs.size(),
               defs.size(), ckpt != nullptr ? ckpt->path : std::string("their initializers"));
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
