// Reading a checkpoint back whole, every part checked against the manifest (checkpoint_load.h).
#include "common/checkpoint_load.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <new>
#include <numeric>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/checkpoint_manifest.h"
#include "common/keys.h"
#include "common/limits.h"
#include "common/tensor.h"
#include "common/tensor_codec.h"
#include "spdlog/spdlog.h"

namespace pstrain {
namespace {

absl::Status Lost(const auto&... parts) { return absl::DataLossError(absl::StrCat(parts...)); }

// Fills `v` from its shards, checking first that they fit it and cover every row once: only
// then is the variable's memory taken, so its size is bounded by what the parts hold.
absl::Status Assemble(const std::string& dir, std::vector<const ShardRecord*> shards,
                      LoadedCheckpoint::Variable* v) {
  const int64_t elements = NumElements(v->shape);
  const int64_t rows = v->shape.empty() ? 1 : v->shape[0];
  const int64_t row = rows > 0 ? elements / rows : 0;
  std::sort(shards.begin(), shards.end(),
            [](const ShardRecord* a, const ShardRecord* b) { return a->row_begin < b->row_begin; });
  int64_t covered = 0;
  for (const ShardRecord* s : shards) {
    if (s->shape != v->shape || s->row_begin != covered || s->row_end > rows ||
        s->row_begin > s->row_end ||
        static_cast<int64_t>(s->values.size()) != (s->row_end - s->row_begin) * row) {
      return Lost(dir, ": shard '", s->name, "' (rows ", s->row_begin, " to ", s->row_end,
                  ") does not fit variable '", v->name, "' of shape ", ShapeString(v->shape),
                  " after row ", covered);
    }
    const ShardRecord* first = shards.front();
    bool same_slots = s->optimizer == first->optimizer && s->slots.size() == first->slots.size();
    for (size_t i = 0; same_slots && i < s->slots.size(); ++i) {
      same_slots = s->slots[i].name == first->slots[i].name;
    }
    if (!same_slots) {
      return Lost(dir, ": the shards of variable '", v->name, "' have different optimizers");
    }
    covered = s->row_end;
  }
  if (covered != rows) {
    return Lost(dir, ": the shards of variable '", v->name, "' cover ", covered, " of its ", rows,
                " rows (truncated)");
  }
  if (shards.empty()) return absl::OkStatus();  // a variable of no rows
  v->values.assign(elements, 0.0f);
  const ShardRecord* first = shards.front();
  v->optimizer = first->optimizer;
  v->optimizer_config = first->optimizer_config;
  for (const SlotValues& slot : first->slots) v->slots.push_back({slot.name, {}});
  for (SlotValues& slot : v->slots) slot.values.assign(elements, 0.0f);
  for (const ShardRecord* s : shards) {
    const int64_t at = s->row_begin * row;
    std::copy(s->values.begin(), s->values.end(), v->values.begin() + at);
    for (size_t i = 0; i < s->slots.size(); ++i) {
      std::copy(s->slots[i].values.begin(), s->slots[i].values.end(),
                v->slots[i].values.begin() + at);
    }
    v->version = std::max(v->version, s->version);
    v->update_count = std::max(v->update_count, s->update_count);
    v->pieces.push_back({s->row_begin, s->row_end, s->version, s->update_count, s->applied});
  }
  return absl::OkStatus();
}

// Gathers the rows of one table from every part; the parts must agree on its layout (their
// rows are laid side by side).
absl::Status MergeTable(const std::string& dir, TableRecord* into, TableRecord&& part) {
  if (into->keys.empty() && into->name.empty()) {
    *into = std::move(part);
    return absl::OkStatus();
  }
  if (part.dim != into->dim || part.floats_per_row != into->floats_per_row ||
      part.step_counts.empty() != into->step_counts.empty()) {
    return Lost(dir, ": the parts of table '", into->name, "' differ in dim (", into->dim, ", ",
                part.dim, "), floats per row or step counts");
  }
  into->version = std::max(into->version, part.version);
  into->keys.insert(into->keys.end(), part.keys.begin(), part.keys.end());
  into->floats.insert(into->floats.end(), part.floats.begin(), part.floats.end());
  into->step_counts.insert(into->step_counts.end(), part.step_counts.begin(),
                           part.step_counts.end());
  into->last_update.insert(into->last_update.end(), part.last_update.begin(),
                           part.last_update.end());
  return absl::OkStatus();
}

void SortByLastUpdate(TableRecord* t) {
  std::vector<size_t> order(t->keys.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return t->last_update[a] < t->last_update[b]; });
  TableRecord sorted = *t;
  const size_t fpr = static_cast<size_t>(t->floats_per_row);
  for (size_t i = 0; i < order.size(); ++i) {
    sorted.keys[i] = t->keys[order[i]];
    sorted.last_update[i] = t->last_update[order[i]];
    if (!t->step_counts.empty()) sorted.step_counts[i] = t->step_counts[order[i]];
    std::memcpy(&sorted.floats[i * fpr], &t->floats[order[i] * fpr], fpr * sizeof(float));
  }
  *t = std::move(sorted);
}

// Rewrites as pending every task the ledger says applied whose batches are not all in every
// shard and table (a push of it queued at a frozen PS when the cut was taken). Only for parts
// with watermarks (format 2 with the task queue's tagged pushes).
void ReconcileLedger(LoadedCheckpoint* ckpt) {
  if (!ckpt->ledger.is_object() || !ckpt->ledger.contains("ledger")) return;
  std::vector<const std::vector<TaskWatermarkRecord>*> lists;
  bool any = false;
  for (const LoadedCheckpoint::Variable& v : ckpt->variables) {
    for (const auto& p : v.pieces) {
      lists.push_back(&p.applied);
      any = any || !p.applied.empty();
    }
  }
  for (const TableRecord& t : ckpt->tables) lists.push_back(&t.applied);
  if (!any) return;  // no watermarks: nothing to compare with
  std::map<std::pair<int, int64_t>, int64_t> cut;
  for (const TaskWatermarkRecord& w : MinWatermarks(lists)) cut[{w.epoch, w.task}] = w.next_batch;
  nlohmann::json& epochs = ckpt->ledger["ledger"];
  int64_t rewritten = 0;
  for (size_t e = 0; epochs.is_array() && e < epochs.size(); ++e) {
    for (size_t id = 0; epochs[e].is_array() && id < epochs[e].size(); ++id) {
      nlohmann::json& t = epochs[e][id];
      // A field of the wrong type is left to TaskLedger::FromJson, which names it.
      if (!t.is_object() || !t.contains("state") || t["state"] != "applied" ||
          !t.contains("steps") || !t["steps"].is_number_integer()) {
        continue;
      }
      const int64_t steps = t["steps"].get<int64_t>();
      const auto it = cut.find({static_cast<int>(e), static_cast<int64_t>(id)});
      if (steps == 0 || (it != cut.end() && it->second >= steps)) continue;  // whole in the cut
      // Not applied in the parameters the cut holds: pending, and its application undone.
      t["state"] = "pending";
      t["worker"] = -1;
      if (t.contains("applications") && t["applications"].is_number_integer() &&
          t["applications"].get<int64_t>() > 0) {
        t["applications"] = t["applications"].get<int64_t>() - 1;
      }
      ++rewritten;
    }
  }
  if (rewritten == 0) return;
  if (ckpt->ledger.contains("applied") && ckpt->ledger["applied"].is_number_integer()) {
    ckpt->ledger["applied"] = ckpt->ledger["applied"].get<int64_t>() - rewritten;
  }
  spdlog::warn("{}: {} task(s) the ledger says applied are not whole in the cut; they are redone",
               ckpt->path, rewritten);
}

absl::StatusOr<LoadedCheckpoint> LoadOne(const std::string& dir) {
  absl::StatusOr<Manifest> m = ReadManifest(dir);
  if (!m.ok()) return m.status();
  LoadedCheckpoint ckpt;
  ckpt.path = dir;
  ckpt.global_step = m->global_step;
  ckpt.num_ps = m->num_ps;
  ckpt.signature = m->signature;
  ckpt.ledger = m->ledger;
  std::vector<PartFile> parts;
  for (const auto& [name, want] : m->files) {
    // ReadManifest allows only ps-<i>.ckpt: a file of this directory.
    const std::string path = dir + "/" + name;
    WrittenFile got;
    absl::StatusOr<PartFile> part = ReadPartFile(path, &got, want.bytes);
    if (!part.ok()) {
      if (absl::IsResourceExhausted(part.status())) return part.status();
      return Lost(part.status().message());
    }
    if (got.bytes != want.bytes || got.checksum != want.checksum) {
      return Lost(path, ": ", got.bytes, " bytes with checksum ", absl::Hex(got.checksum),
                  ", the manifest says ", want.bytes, " bytes with ", absl::Hex(want.checksum));
    }
    const uint32_t index = static_cast<uint32_t>(parts.size());
    if (part->ps_task != index || part->num_ps != static_cast<uint32_t>(m->num_ps) ||
        part->checkpoint_id != static_cast<uint64_t>(m->global_step)) {
      return Lost(path, ": part ", part->ps_task, " of ", part->num_ps, " PS at step ",
                  part->checkpoint_id, ", the manifest says part ", index, " of ", m->num_ps,
                  " at step ", m->global_step);
    }
    parts.push_back(*std::move(part));
  }
  absl::flat_hash_map<std::string, std::vector<const ShardRecord*>> shards;
  for (const PartFile& p : parts) {
    for (const ShardRecord& s : p.shards) shards[s.variable].push_back(&s);
  }
  for (const auto& [name, shape] : ckpt.signature.variables) {
    LoadedCheckpoint::Variable& v = ckpt.variables.emplace_back();
    v.name = name;
    v.shape = shape;
    if (absl::Status s = Assemble(dir, shards[name], &v); !s.ok()) return s;
  }
  for (const auto& [name, dim] : ckpt.signature.tables) {
    TableRecord& t = ckpt.tables.emplace_back();
    std::vector<std::vector<TaskWatermarkRecord>> applied(parts.size());  // by part
    for (size_t i = 0; i < parts.size(); ++i) {
      for (TableRecord& r : parts[i].tables) {
        if (r.name != name) continue;
        applied[i] = std::move(r.applied);
        if (absl::Status s = MergeTable(dir, &t, std::move(r)); !s.ok()) return s;
      }
    }
    std::vector<const std::vector<TaskWatermarkRecord>*> lists;
    for (const auto& a : applied) lists.push_back(&a);
    t.applied = MinWatermarks(lists);
    ckpt.table_part_applied.push_back(std::move(applied));
    if (t.name != name || t.dim != dim) {
      return Lost(dir, ": table '", name, "' of dim ", dim, " is in no part");
    }
    SortByLastUpdate(&t);
  }
  ReconcileLedger(&ckpt);
  return ckpt;
}

// LoadOne, failing rather than ending the process when a checkpoint that passed every check is
// larger than this machine's memory.
absl::StatusOr<LoadedCheckpoint> LoadOneInMemory(const std::string& dir) {
  try {
    return LoadOne(dir);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat(dir, ": the checkpoint does not fit in this process's memory"));
  }
}

}  // namespace

std::vector<TaskWatermarkRecord> MinWatermarks(
    const std::vector<const std::vector<TaskWatermarkRecord>*>& lists) {
  std::map<std::pair<int32_t, int64_t>, std::pair<int64_t, size_t>> seen;  // min, lists holding it
  for (const std::vector<TaskWatermarkRecord>* list : lists) {
    for (const TaskWatermarkRecord& w : *list) {
      auto [it, fresh] = seen.try_emplace({w.epoch, w.task}, w.next_batch, 0);
      it->second.first = std::min(it->second.first, w.next_batch);
      ++it->second.second;
    }
  }
  std::vector<TaskWatermarkRecord> out;
  for (const auto& [key, min] : seen) {
    if (min.second < lists.size() || min.first <= 0) continue;  // missing somewhere: 0
    out.push_back({key.first, key.second, min.first});
  }
  return out;
}

absl::StatusOr<LoadedCheckpoint> LoadCheckpoint(const std::string& path) {
  std::error_code ec;
  const std::string base = std::filesystem::path(path).lexically_normal().filename().string();
  if (base.rfind("ckpt-", 0) == 0) {
    absl::StatusOr<LoadedCheckpoint> ckpt = LoadOneInMemory(path);
    if (ckpt.ok()) {
      spdlog::info("restoring checkpoint {} (global step {})", path, ckpt->global_step);
    }
    return ckpt;
  }
  absl::Status newest_problem;  // of the newest checkpoint that is not usable
  for (const auto& [step, dir] : ListCheckpoints(path)) {
    absl::StatusOr<LoadedCheckpoint> ckpt = LoadOneInMemory(dir);
    if (ckpt.ok()) {
      spdlog::info("restoring checkpoint {} (global step {})", dir, step);
      return ckpt;
    }
    if (absl::IsNotFound(ckpt.status())) continue;  // never completed: not a checkpoint
    if (newest_problem.ok()) newest_problem = ckpt.status();
    spdlog::warn("checkpoint {} is not usable: {}; trying the one before it", dir,
                 std::string(ckpt.status().message()));
  }
  if (!newest_problem.ok()) {
    // Checkpoints are there but none can be read: never "no checkpoint" (which --resume takes
    // for a job to start from scratch).
    return absl::Status(newest_problem.code(),
                        absl::StrCat("--restore_from ", path, ": no valid checkpoint; the newest: ",
                                     newest_problem.message()));
  }
  return absl::NotFoundError(absl::StrCat("--restore_from ", path, ": no valid checkpoint"));
}

absl::StatusOr<LoadedCheckpoint> LoadCheckpointToRead(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such file or directory"));
  }
  absl::StatusOr<LoadedCheckpoint> c = LoadCheckpoint(path);
  if (!c.ok()) {
    return absl::Status(c.status().code(),
                        absl::StripPrefix(c.status().message(), "--restore_from "));
  }
  return c;
}

}  // namespace pstrain
