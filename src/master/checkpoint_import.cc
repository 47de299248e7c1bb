// RestoreParameters: a loaded checkpoint into today's PS. The dense variables are created with
// the saved values (placed and partitioned for today's PS), then every PS imports the slots and
// versions of its shards (cut from the reassembled variables by row range) and the rows of the
// keys it holds (PsOfKey over today's number of PS).
#include <algorithm>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/keys.h"
#include "common/limits.h"
#include "common/rpc.h"
#include "common/tensor.h"
#include "common/tensor_codec.h"
#include "master/checkpoints.h"
#include "spdlog/spdlog.h"

namespace pstrain {
namespace {

// Import requests for one PS, each within the limits of a message.
class ImportBatches {
 public:
  // The request to add `bytes` to (`fresh`: a new one).
  ImportRequest* For(int64_t bytes, bool fresh = false) {
    if (fresh || reqs_.empty() || bytes_ + bytes > kMaxPayloadBytes / 2 ||
        reqs_.back().variables_size() >= kMaxVariablesPerRequest) {
      reqs_.emplace_back();
      *reqs_.back().mutable_sender() = MakeSender("chief", 0);
      bytes_ = 0;
    }
    bytes_ += bytes;
    return &reqs_.back();
  }
  const std::vector<ImportRequest>& requests() const { return reqs_; }

 private:
  std::vector<ImportRequest> reqs_;
  int64_t bytes_ = 0;
};

template <typename T>
void AppendBytes(std::string* out, const T* p, size_t n) {
  out->append(reinterpret_cast<const char*>(p), n * sizeof(T));
}

// The version and update count of rows [begin, end) of `v`: the largest of the saved shards it
// overlaps (they differ only in async mode, by the pushes in flight at the cut).
std::pair<uint64_t, int64_t> CountsOf(const LoadedCheckpoint::Variable& v, int64_t begin,
                                      int64_t end) {
  uint64_t version = 0;
  int64_t count = 0;
  for (const auto& p : v.pieces) {
    if (p.begin < end && begin < p.end) {
      version = std::max(version, p.version);
      count = std::max(count, p.update_count);
    }
  }
  if (v.shape.empty() || v.pieces.empty()) return {v.version, v.update_count};
  return {version, count};
}

// The task watermarks of rows [begin, end) of `v`: per (epoch, task) the smallest of the saved
// shards it overlaps (with today's placement the same as the saving job's, the shard's own).
std::vector<TaskWatermarkRecord> AppliedOf(const LoadedCheckpoint::Variable& v, int64_t begin,
                                           int64_t end) {
  std::vector<const std::vector<TaskWatermarkRecord>*> lists;
  for (const auto& p : v.pieces) {
    if (v.shape.empty() || (p.begin < end && begin < p.end)) lists.push_back(&p.applied);
  }
  return MinWatermarks(lists);
}

void AddWatermarks(const std::vector<TaskWatermarkRecord>& applied,
                   google::protobuf::RepeatedPtrField<TaskWatermark>* out) {
  for (const TaskWatermarkRecord& w : applied) {
    TaskWatermark* t = out->Add();
    t->set_epoch(w.epoch);
    t->set_task(w.task);
    t->set_next_batch(w.next_batch);
  }
}

void AddVariables(const LoadedCheckpoint::Variable& v, const Placement& p,
                  std::vector<ImportBatches>* batches) {
  const int64_t rows = v.shape.empty() ? 1 : v.shape[0];
  const int64_t row = rows > 0 ? NumElements(v.shape) / rows : 0;
  for (const Shard& s : p.shards()) {
    std::vector<int64_t> shape = v.shape;
    if (!shape.empty()) shape[0] = s.row_end() - s.row_begin();
    const int64_t n = (s.row_end() - s.row_begin()) * row;
    ImportRequest* req = batches->at(s.ps_task()).For(n * 4 * static_cast<int64_t>(v.slots.size()));
    VariableImport* imp = req->add_variables();
    imp->set_name(s.name());
    const auto [version, count] = CountsOf(v, s.row_begin(), s.row_end());
    imp->set_version(version);
    imp->set_update_count(count);
    AddWatermarks(AppliedOf(v, s.row_begin(), s.row_end()), imp->mutable_applied());
    for (const SlotValues& slot : v.slots) {
      SlotValue* out = imp->add_slots();
      out->set_name(slot.name);
      EncodeTensor(shape, slot.values.data() + s.row_begin() * row, out->mutable_value());
    }
  }
}

// The rows of `ckpt`'s table `index` for today's PS, each with the table's version and its task
// watermarks: into as many PS as saved it, each part's own (its keys go back to it); into
// another number, the smallest of the parts (a batch in flight at an async cut may then be
// applied again to the rows of a part that held it).
void AddTable(const LoadedCheckpoint& ckpt, size_t index, std::vector<ImportBatches>* batches) {
  const TableRecord& t = ckpt.tables[index];
  const int num_ps = static_cast<int>(batches->size());
  const std::vector<std::vector<TaskWatermarkRecord>>* own =
      index < ckpt.table_part_applied.size() &&
              ckpt.table_part_applied[index].size() == static_cast<size_t>(num_ps)
          ? &ckpt.table_part_applied[index]
          : nullptr;
  std::vector<std::vector<size_t>> rows_of(num_ps);
  for (size_t i = 0; i < t.keys.size(); ++i) rows_of[PsOfKey(t.keys[i], num_ps)].push_back(i);
  const size_t fpr = static_cast<size_t>(t.floats_per_row);
  const int64_t row_bytes = static_cast<int64_t>(fpr * 4 + 8 + 8 + 4);
  const int64_t per_request =
      std::min<int64_t>(kMaxKeysPerRequest, kMaxPayloadBytes / 4 / row_bytes);
  for (int ps = 0; ps < num_ps; ++ps) {
    const std::vector<size_t>& rows = rows_of[ps];
    // Every PS gets the table's version, with or without rows; a table split over requests
    // starts each part in a request of its own (a request names a table once).
    size_t begin = 0;
    do {
      const size_t end = std::min(rows.size(), begin + static_cast<size_t>(per_request));
      ImportRequest* req =
          (*batches)[ps].For(static_cast<int64_t>(end - begin) * row_bytes, begin > 0);
      TableImport* imp = req->add_tables();
      imp->set_table(t.name);
      imp->set_version(t.version);
      AddWatermarks(own != nullptr ? (*own)[ps] : t.applied, imp->mutable_applied());
      for (size_t k = begin; k < end; ++k) {
        const size_t i = rows[k];
        AppendBytes(imp->mutable_keys(), &t.keys[i], 1);
        AppendBytes(imp->mutable_floats(), &t.floats[i * fpr], fpr);
        if (!t.step_counts.empty()) AppendBytes(imp->mutable_step_counts(), &t.step_counts[i], 1);
        AppendBytes(imp->mutable_last_update(), &t.last_update[i], 1);
      }
      begin = end;
    } while (begin < rows.size());
  }
}

// The variable `v` asks for, as `ckpt` saved it: its initial value replaced by the saved one.
// InvalidArgument if the checkpoint's has another shape or optimizer (named with both).
absl::StatusOr<NewVariable> RestoredVariable(const LoadedCheckpoint& ckpt,
                                             const LoadedCheckpoint::Variable& s,
                                             const NewVariable& v) {
  if (s.shape != v.shape) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint ", ckpt.path, ": variable '", v.name, "' has shape ",
                     ShapeString(s.shape), " there, not ", ShapeString(v.shape), " as asked for"));
  }
  if (s.optimizer != v.optimizer.name()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint ", ckpt.path, ": variable '", v.name, "' was trained with optimizer ",
        s.optimizer, ", the job's is ", v.optimizer.name(), ": its slots cannot be restored"));
  }
  NewVariable r = v;
  r.initial_value = [p = &s]() -> absl::StatusOr<Tensor> {
    Tensor t(p->shape);
    t.values = p->values;
    return t;
  };
  return r;
}

// InvalidArgument if `def` asks for another optimizer than `ckpt`'s table of its name had.
absl::Status CheckTableOptimizer(const LoadedCheckpoint& ckpt, const TableRecord& saved,
                                 const TableDef& def) {
  TableDef saved_def;
  saved_def.ParseFromString(saved.table_def);
  if (saved_def.optimizer().name() == def.optimizer().name()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("checkpoint ", ckpt.path, ": table '", def.name(),
                   "' was trained with optimizer ", saved_def.optimizer().name(), ", the job's is ",
                   def.optimizer().name(), ": its slots cannot be restored"));
}

// Sends every PS its Import requests, in order; first checks that each fits in one message.
absl::Status SendImports(const LoadedCheckpoint& ckpt, const std::vector<ImportBatches>& batches,
                         const std::vector<std::string>& ps_addresses, absl::Duration rpc_timeout) {
  // A shard's optimizer slots travel in one Import message (only pushes and pulls are streamed):
  // say so before sending any, rather than let gRPC refuse a message past its limit.
  for (size_t ps = 0; ps < ps_addresses.size(); ++ps) {
    for (const ImportRequest& req : batches[ps].requests()) {
      if (req.ByteSizeLong() <= static_cast<size_t>(kMaxMessageBytes)) continue;
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint ", ckpt.path, ": the optimizer slots of variable '",
                       req.variables_size() > 0 ? req.variables(0).name() : "", "' for ",
                       TaskName("ps", static_cast<int>(ps)), " need ", req.ByteSizeLong(),
                       " bytes in one Import message, over the limit of ", kMaxMessageBytes,
                       ": partition the variable into smaller shards"));
    }
  }
  for (size_t ps = 0; ps < ps_addresses.size(); ++ps) {
    auto stub = ParameterServerService::NewStub(MakeChannel(ps_addresses[ps]));
    for (const ImportRequest& req : batches[ps].requests()) {
      std::unique_ptr<grpc::ClientContext> ctx = ContextWithTimeout(rpc_timeout);
      ctx->set_wait_for_ready(true);
      ImportResponse resp;
      absl::Status s = FromGrpcStatus(stub->Import(ctx.get(), req, &resp), "Import",
                                      TaskName("ps", static_cast<int>(ps)));
      if (!s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RestoreParameters(const LoadedCheckpoint& ckpt, const std::vector<NewVariable>& vars,
                               const std::vector<TableDef>& tables, VariablePlacer* placer,
                               TableCreator* creator, const std::vector<std::string>& ps_addresses,
                               absl::Duration rpc_timeout, std::vector<Placement>* placement) {
  absl::flat_hash_map<std::string, const LoadedCheckpoint::Variable*> saved;
  for (const LoadedCheckpoint::Variable& v : ckpt.variables) saved[v.name] = &v;
  std::vector<NewVariable> restored;
  std::vector<const LoadedCheckpoint::Variable*> order;
  for (const NewVariable& v : vars) {
    auto it = saved.find(v.name);
    if (it == saved.end()) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint ", ckpt.path, ": no variable '",
                                                     v.name, "' of shape ", ShapeString(v.shape)));
    }
    absl::StatusOr<NewVariable> r = RestoredVariable(ckpt, *it->second, v);
    if (!r.ok()) return r.status();
    restored.push_back(*std::move(r));
    order.push_back(it->second);
  }
  for (const TableDef& def : tables) {
    for (const TableRecord& t : ckpt.tables) {
      if (t.name != def.name()) continue;
      if (absl::Status s = CheckTableOptimizer(ckpt, t, def); !s.ok()) return s;
    }
  }
  absl::StatusOr<std::vector<Placement>> placed = placer->CreateAll(restored);
  if (!placed.ok()) return placed.status();
  for (const TableDef& def : tables) {
    if (absl::Status s = creator->GetOrCreate(def); !s.ok()) return s;
  }
  std::vector<ImportBatches> batches(ps_addresses.size());
  for (size_t i = 0; i < order.size(); ++i) AddVariables(*order[i], (*placed)[i], &batches);
  for (size_t i = 0; i < ckpt.tables.size(); ++i) AddTable(ckpt, i, &batches);
  if (absl::Status s = SendImports(ckpt, batches, ps_addresses, rpc_timeout); !s.ok()) return s;
  *placement = *std::move(placed);
  spdlog::info("restored {} (global step {}, saved by {} ps) into {} ps", ckpt.path,
               ckpt.global_step, ckpt.num_ps, ps_addresses.size());
  return absl::OkStatus();
}

absl::StatusOr<Placement> RestoreVariable(const LoadedCheckpoint& ckpt, const NewVariable& var,
                                          const std::string& partitioner, VariablePlacer* placer,
                                          const std::vector<std::string>& ps_addresses,
                                          absl::Duration rpc_timeout) {
  const LoadedCheckpoint::Variable* saved = nullptr;
  for (const LoadedCheckpoint::Variable& v : ckpt.variables) {
    if (v.name == var.name) saved = &v;
  }
  if (saved == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("checkpoint ", ckpt.path, " holds no variable '", var.name, "'"));
  }
  absl::StatusOr<NewVariable> restored = RestoredVariable(ckpt, *saved, var);
  if (!restored.ok()) return restored.status();
  absl::StatusOr<Placement> placed = placer->GetOrCreate(*restored, partitioner);
  if (!placed.ok()) return placed.status();
  std::vector<ImportBatches> batches(ps_addresses.size());
  AddVariables(*saved, *placed, &batches);
  if (absl::Status s = SendImports(ckpt, batches, ps_addresses, rpc_timeout); !s.ok()) return s;
  return placed;
}

absl::Status RestoreTable(const LoadedCheckpoint& ckpt, const TableDef& def, TableCreator* creator,
                          const std::vector<std::string>& ps_addresses,
                          absl::Duration rpc_timeout) {
  const TableRecord* saved = nullptr;
  size_t index = 0;
  for (size_t i = 0; i < ckpt.tables.size(); ++i) {
    if (ckpt.tables[i].name == def.name()) saved = &ckpt.tables[index = i];
  }
  if (saved == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("checkpoint ", ckpt.path, " holds no table '", def.name(), "'"));
  }
  if (saved->dim != def.dim()) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", ckpt.path, ": table '",
                                                   def.name(), "' has dim ", saved->dim,
                                                   " there, not ", def.dim(), " as asked for"));
  }
  if (absl::Status s = CheckTableOptimizer(ckpt, *saved, def); !s.ok()) return s;
  if (absl::Status s = creator->GetOrCreate(def); !s.ok()) return s;
  std::vector<ImportBatches> batches(ps_addresses.size());
  AddTable(ckpt, index, &batches);
  return SendImports(ckpt, batches, ps_addresses, rpc_timeout);
}

absl::Status CheckSignature(const LoadedCheckpoint& ckpt, const ModelSignature& model) {
  auto bad = [&](auto... parts) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint ", ckpt.path, " is of another model: ", parts...));
  };
  const nlohmann::json& fa = model.features;
  const nlohmann::json& fb = ckpt.signature.features;
  if (fa.is_null() != fb.is_null()) {
    return fb.is_null() ? bad("it read its data's columns as they are; the model reads them "
                              "through a schema (--schema)")
                        : bad("it read its data through a schema (--schema), which the model "
                              "does not");
  }
  for (const char* part : {"schema", "stats"}) {
    if (fa.is_null() || fa[part] == fb[part]) continue;
    const nlohmann::json patch = nlohmann::json::diff(fb[part], fa[part]);
    const std::string where = patch.empty() ? "" : patch[0].value("path", "");
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint ", ckpt.path, " was trained through another ",
        part == std::string("schema") ? "schema" : "transform: the training rows' statistics",
        " differ at ", where.empty() ? "/" : where,
        " (a model restored reads its data as it was trained: the same schema over the same "
        "training records)"));
  }
  const auto& a = model.variables;
  const auto& b = ckpt.signature.variables;
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    if (i >= b.size()) return bad("the model's variable '", a[i].first, "' is not in it");
    if (i >= a.size()) return bad("its variable '", b[i].first, "' is not in the model");
    if (a[i].first != b[i].first) {
      return bad("variable ", i, " is '", a[i].first, "' in the model, '", b[i].first, "' in it");
    }
    if (a[i].second != b[i].second) {
      return bad("variable '", a[i].first, "' has shape ", ShapeString(a[i].second),
                 " in the model, ", ShapeString(b[i].second), " in it");
    }
  }
  const auto& ta = model.tables;
  const auto& tb = ckpt.signature.tables;
  for (size_t i = 0; i < std::max(ta.size(), tb.size()); ++i) {
    if (i >= tb.size()) return bad("the model's table '", ta[i].first, "' is not in it");
    if (i >= ta.size()) return bad("its table '", tb[i].first, "' is not in the model");
    if (ta[i] != tb[i]) {
      return bad("table ", i, " is '", ta[i].first, "' of dim ", ta[i].second, " in the model, '",
                 tb[i].first, "' of dim ", tb[i].second, " in it");
    }
  }
  return absl::OkStatus();
}

}  // namespace pstrain
