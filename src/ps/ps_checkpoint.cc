// ParameterServerImpl::Checkpoint and ::Import: the whole state of a PS copied into a PartFile
// (ps/snapshot.h) and restored from the chief's import, both checked against what the PS holds.
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "common/tensor_codec.h"
#include "ps/parameter_server_impl.h"
#include "ps/snapshot.h"

namespace pstrain {
namespace {

// `bytes` bytes of `src` copied to `dst`; either may be null when there are none (an empty
// vector's data()).
void CopyBytes(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}
void CopyBytes(void* dst, const std::string& src) { CopyBytes(dst, src.data(), src.size()); }

// The checks of one variable's import against the variable (its lock held by the caller).
absl::Status CheckVariableImport(const VariableImport& v, Variable* var, absl::string_view where)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(var->mu) {
  const auto slots = var->optimizer->slots();
  if (static_cast<size_t>(v.slots_size()) != slots.size()) {
    return InvalidArgument("import of variable ", Quoted(v.name()), " on ", where, ": ",
                           v.slots_size(), " slots, its optimizer ",
                           std::string(var->optimizer->name()), " has ", slots.size());
  }
  for (int i = 0; i < v.slots_size(); ++i) {
    if (v.slots(i).name() != slots[i].first) {
      return InvalidArgument("import of variable ", Quoted(v.name()), " on ", where, ": slot ", i,
                             " is ", Quoted(v.slots(i).name()), ", its optimizer ",
                             std::string(var->optimizer->name()), " names it ",
                             Quoted(slots[i].first));
    }
    absl::StatusOr<const float*> data = TensorData(v.slots(i).value(), var->shape, "slot");
    if (!data.ok()) {
      return InvalidArgument("import of variable ", Quoted(v.name()), " on ", where, ": slot ",
                             Quoted(slots[i].first), ": ", data.status().message());
    }
  }
  if (v.update_count() < 0) {
    return InvalidArgument("import of variable ", Quoted(v.name()), ": negative update_count");
  }
  return TaskWatermarks::CheckList(
      v.applied(), absl::StrCat("import of variable ", Quoted(v.name()), " on ", where));
}

}  // namespace

absl::Status ParameterServerImpl::Checkpoint(const CheckpointRequest& req,
                                             CheckpointResponse* resp) {
  if (absl::Status s = CheckSender(req.has_sender(), req.sender()); !s.ok()) return s;
  if (absl::Status s = CheckChief(req.sender(), "Checkpoint"); !s.ok()) return s;
  switch (req.phase()) {
    case CheckpointRequest::FREEZE:
      if (req.shards_size() > kMaxVariablesPerRequest || req.num_ps() < 1 ||
          req.num_ps() > kMaxTasks || !(req.freeze_timeout_s() >= 0) ||
          req.freeze_timeout_s() > 3600) {
        return InvalidArgument("checkpoint freeze on ", Where(), ": bad num_ps ", req.num_ps(),
                               ", freeze_timeout_s ", req.freeze_timeout_s(), " or ",
                               req.shards_size(), " shards");
      }
      return checkpoints_.Freeze(
          req, [&](PartFile* part) { return CopyState(req, part, resp); }, resp);
    case CheckpointRequest::RELEASE:
      if (req.dir().empty() || req.dir().size() > kMaxTextBytes) {
        return InvalidArgument("checkpoint release on ", Where(), ": a directory of ",
                               req.dir().size(), " bytes");
      }
      return checkpoints_.Release(req);
    case CheckpointRequest::ABORT:
      return checkpoints_.Abort(req);
    case CheckpointRequest::WAIT:
      return checkpoints_.Wait(req, resp);
    default:
      return InvalidArgument("checkpoint on ", Where(), ": unknown phase ",
                             static_cast<int>(req.phase()));
  }
}

absl::Status ParameterServerImpl::CopyState(const CheckpointRequest& req, PartFile* part,
                                            CheckpointResponse* resp) {
  absl::MutexLock admin(&admin_mu_);  // no create or delete while the state is copied
  absl::flat_hash_map<std::string, const CheckpointShard*> placed;
  for (const CheckpointShard& s : req.shards()) placed[s.name()] = &s;
  uint64_t min_version = ~uint64_t{0}, max_version = 0, stamp = 0;
  int64_t rows = 0;
  auto saw = [&](uint64_t v, const std::vector<TaskWatermarkRecord>& applied) {
    min_version = std::min(min_version, v);
    max_version = std::max(max_version, v);
    stamp += v;
    for (const TaskWatermarkRecord& w : applied) stamp += static_cast<uint64_t>(w.next_batch);
  };
  {
    absl::ReaderMutexLock lock(&mu_);
    if (placed.size() != vars_.size()) {
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint on ", Where(), ": the chief lists ", placed.size(),
                       " shards here, this PS holds ", vars_.size()));
    }
    part->shards.resize(vars_.size());  // records of an earlier copy are overwritten in place
    size_t i = 0;
    for (const auto& [name, var] : vars_) {
      auto it = placed.find(name);
      if (it == placed.end()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "checkpoint on ", Where(), ": the chief does not list shard ", Quoted(name)));
      }
      const CheckpointShard& s = *it->second;
      ShardRecord& r = part->shards[i++];
      r.name = name;
      r.variable = s.variable();
      r.shape.assign(s.shape().begin(), s.shape().end());
      r.row_begin = s.row_begin();
      r.row_end = s.row_end();
      absl::MutexLock vlock(&var->mu);
      r.version = var->version;
      r.update_count = var->optimizer->update_count();
      r.optimizer = std::string(var->optimizer->name());
      r.optimizer_config = var->optimizer->config().SerializeAsString();
      r.values.assign(var->values->begin(), var->values->end());
      const int64_t n = static_cast<int64_t>(var->values->size());
      const auto slots = var->optimizer->slots();
      r.slots.resize(slots.size());
      for (size_t j = 0; j < slots.size(); ++j) {
        r.slots[j].name = slots[j].first;
        r.slots[j].values.assign(slots[j].second, slots[j].second + n);
      }
      var->applied.Export(&r.applied);
      saw(r.version, r.applied);
    }
  }
  const auto tables = AllTables();
  part->tables.resize(tables.size());
  for (size_t t = 0; t < tables.size(); ++t) {
    const TablePtr& table = tables[t].second;
    TableRecord& r = part->tables[t];
    absl::MutexLock lock(&table->mu);  // its watermarks and rows at one update
    table->rows->Export(&r);
    table->applied.Export(&r.applied);
    r.table_def = table->def.SerializeAsString();
    saw(r.version, r.applied);
    rows += static_cast<int64_t>(r.keys.size());
  }
  resp->set_min_version(part->shards.empty() && part->tables.empty() ? 0 : min_version);
  resp->set_max_version(max_version);
  resp->set_state_stamp(stamp);
  resp->set_table_rows(rows);
  return absl::OkStatus();
}

absl::Status ParameterServerImpl::Import(const ImportRequest& req, ImportResponse* resp) {
  if (absl::Status s = CheckSender(req.has_sender(), req.sender()); !s.ok()) return s;
  absl::MutexLock admin(&admin_mu_);
  if (absl::Status s = CheckChief(req.sender(), "Import"); !s.ok()) return s;
  auto name_of = [](const VariableImport& v) -> const std::string& { return v.name(); };
  if (absl::Status s =
          CheckNames(req.variables(), name_of, "import", absl::StatusCode::kInvalidArgument);
      !s.ok()) {
    return s;
  }
  auto table_of = [](const TableImport& t) -> const std::string& { return t.table(); };
  if (absl::Status s = CheckNames(req.tables(), table_of, "import",
                                  absl::StatusCode::kInvalidArgument, "table", kMaxTables);
      !s.ok()) {
    return s;
  }
  // Everything is checked before anything is applied.
  std::vector<VariablePtr> vars;
  for (const VariableImport& v : req.variables()) {
    absl::StatusOr<VariablePtr> var = Find(v.name());
    if (!var.ok()) return var.status();
    absl::MutexLock lock(&(*var)->mu);
    if (absl::Status s = CheckVariableImport(v, var->get(), Where()); !s.ok()) return s;
    vars.push_back(*std::move(var));
  }
  std::vector<TablePtr> tables;
  for (const TableImport& t : req.tables()) {
    absl::StatusOr<TablePtr> table = FindTable(t.table());
    if (!table.ok()) return table.status();
    const int64_t n = static_cast<int64_t>(t.keys().size() / sizeof(uint64_t));
    const int64_t fpr = (*table)->rows->floats_per_row();
    const bool adam = (*table)->def.optimizer().name() == "adam";
    if (t.keys().size() % sizeof(uint64_t) != 0 || n > kMaxKeysPerRequest ||
        static_cast<int64_t>(t.floats().size()) != n * fpr * int64_t{sizeof(float)} ||
        static_cast<int64_t>(t.step_counts().size()) != (adam ? n * 4 : 0) ||
        static_cast<int64_t>(t.last_update().size()) != n * 8) {
      return InvalidArgument("import of ", TableWhere(t.table()), ": ", t.keys().size(),
                             " key bytes, ", t.floats().size(), " row bytes (", fpr,
                             " floats per row), ", t.step_counts().size(), " step-count bytes and ",
                             t.last_update().size(), " last-update bytes do not agree");
    }
    std::vector<uint64_t> keys(n);
    CopyBytes(keys.data(), t.keys());
    absl::flat_hash_set<uint64_t> seen(keys.begin(), keys.end());
    if (static_cast<int64_t>(seen.size()) != n) {
      return InvalidArgument("import of ", TableWhere(t.table()), ": a key is given twice");
    }
    if (absl::Status s = TaskWatermarks::CheckList(
            t.applied(), absl::StrCat("import of ", TableWhere(t.table())));
        !s.ok()) {
      return s;
    }
    tables.push_back(*std::move(table));
  }
  for (size_t i = 0; i < vars.size(); ++i) {
    const VariableImport& v = req.variables(i);
    absl::MutexLock lock(&vars[i]->mu);
    vars[i]->version = v.version();
    vars[i]->optimizer->set_update_count(v.update_count());
    const auto slots = vars[i]->optimizer->mutable_slots();
    for (int j = 0; j < v.slots_size(); ++j) {
      const float* data = *TensorData(v.slots(j).value(), vars[i]->shape, "slot");
      CopyBytes(slots[j].second, data, vars[i]->values->size() * sizeof(float));
    }
    vars[i]->applied.Replace(v.applied());
  }
  for (size_t i = 0; i < tables.size(); ++i) {
    const TableImport& t = req.tables(i);
    const int64_t n = static_cast<int64_t>(t.keys().size() / sizeof(uint64_t));
    std::vector<uint64_t> keys(n), last(n);
    std::vector<float> floats(t.floats().size() / sizeof(float));
    std::vector<uint32_t> steps(t.step_counts().size() / sizeof(uint32_t));
    CopyBytes(keys.data(), t.keys());
    CopyBytes(last.data(), t.last_update());
    CopyBytes(floats.data(), t.floats());
    CopyBytes(steps.data(), t.step_counts());
    absl::MutexLock lock(&tables[i]->mu);
    tables[i]->rows->Import(t.version(), keys.data(), n, floats.data(),
                            steps.empty() ? nullptr : steps.data(), last.data());
    tables[i]->applied.Replace(t.applied());
    tables[i]->Publish(t.version());
  }
  consistency_.Notify();
  return absl::OkStatus();
}

}  // namespace pstrain
