#include "master/variables.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "common/limits.h"
#include "common/rpc.h"
#include "common/tensor.h"
#include "common/tensor_codec.h"
#include "spdlog/spdlog.h"

namespace pstrain {
namespace {

std::string ShardName(const std::string& variable, size_t shard, size_t num_shards) {
  return num_shards == 1 ? variable : absl::StrCat(variable, "/part_", shard);
}

// Whether a failed CreateVariables may still have created something on that PS: the call may
// have reached it. A definite refusal (AlreadyExists, InvalidArgument, ...) created nothing.
bool OutcomeUnknown(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) || absl::IsCancelled(s) ||
         absl::IsUnknown(s) || absl::IsInternal(s) || absl::IsAborted(s);
}

}  // namespace

absl::StatusOr<std::unique_ptr<VariablePlacer>> VariablePlacer::Create(
    const std::vector<std::string>& ps_addresses, const std::string& partitioner,
    const std::string& placement, absl::Duration rpc_timeout) {
  absl::StatusOr<PartitionerSpec> part = ParsePartitioner(partitioner);
  if (!part.ok()) return part.status();
  absl::StatusOr<PlacementStrategy> strategy = ParsePlacement(placement);
  if (!strategy.ok()) return strategy.status();
  std::vector<std::unique_ptr<ParameterServerService::Stub>> stubs;
  for (const std::string& a : ps_addresses) {
    stubs.push_back(ParameterServerService::NewStub(MakeChannel(a)));
  }
  return std::unique_ptr<VariablePlacer>(
      new VariablePlacer(std::move(stubs), *part, *strategy, rpc_timeout));
}

VariablePlacer::VariablePlacer(std::vector<std::unique_ptr<ParameterServerService::Stub>> stubs,
                               PartitionerSpec partitioner, PlacementStrategy placement,
                               absl::Duration rpc_timeout)
    : stubs_(std::move(stubs)),
      partitioner_(partitioner),
      placement_(placement),
      rpc_timeout_(rpc_timeout),
      load_(stubs_.size(), 0) {}

absl::StatusOr<std::vector<Placement>> VariablePlacer::CreateAll(
    const std::vector<NewVariable>& vars) {
  absl::MutexLock lock(&mu_);
  return CreateLocked(vars, std::vector<PartitionerSpec>(vars.size(), partitioner_));
}

absl::StatusOr<Placement> VariablePlacer::GetOrCreate(const NewVariable& var,
                                                      const std::string& partitioner) {
  PartitionerSpec part = partitioner_;
  if (!partitioner.empty()) {
    absl::StatusOr<PartitionerSpec> p = ParsePartitioner(partitioner);
    if (!p.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("variable '", var.name, "': ", p.status().message()));
    }
    part = *p;
  }
  absl::MutexLock lock(&mu_);
  if (auto it = created_.find(var.name); it != created_.end()) {
    if (it->second.first != var.shape) {
      return absl::InvalidArgumentError(absl::StrCat("variable '", var.name, "' exists with shape ",
                                                     ShapeString(it->second.first), ", not ",
                                                     ShapeString(var.shape)));
    }
    return it->second.second;
  }
  absl::StatusOr<std::vector<Placement>> placed = CreateLocked({var}, {part});
  if (!placed.ok()) return placed.status();
  return placed->front();
}

void VariablePlacer::Forget() {
  absl::MutexLock lock(&mu_);
  std::fill(load_.begin(), load_.end(), 0);
  placed_ = 0;
  shards_.clear();
  created_.clear();
  taken_.clear();
}

int64_t VariablePlacer::NumShards() const {
  absl::MutexLock lock(&mu_);
  return placed_;
}

std::vector<JobStatus::Shard> VariablePlacer::Shards() const {
  absl::MutexLock lock(&mu_);
  return shards_;
}

std::vector<int64_t> VariablePlacer::Load() const {
  absl::MutexLock lock(&mu_);
  return load_;
}

std::optional<std::string> VariablePlacer::Imbalance() const {
  absl::MutexLock lock(&mu_);
  const int num_ps = static_cast<int>(load_.size());
  int64_t total = 0;
  for (int64_t l : load_) total += l;
  if (num_ps < 2 || total == 0) return std::nullopt;
  const auto heaviest = std::max_element(load_.begin(), load_.end());
  const double others = static_cast<double>(total - *heaviest) / (num_ps - 1);
  if (static_cast<double>(*heaviest) <= 2.0 * others) return std::nullopt;
  return absl::StrCat(TaskName("ps", static_cast<int>(heaviest - load_.begin())), " holds ",
                      HumanBytes(*heaviest), " of the ", HumanBytes(total),
                      " of variables, more than twice the average of the other ps: split large "
                      "variables with --partitioner (fixed:N, max_bytes:B) and place by bytes "
                      "with --placement greedy");
}

absl::StatusOr<std::vector<RowRange>> VariablePlacer::Plan(
    const NewVariable& var, PartitionerSpec part, absl::flat_hash_set<std::string>* names) const {
  auto bad = [&](auto... parts) {
    return absl::InvalidArgumentError(absl::StrCat("variable '", var.name, "': ", parts...));
  };
  if (var.name.empty()) return absl::InvalidArgumentError("a variable needs a name");
  if (var.name.size() > static_cast<size_t>(kMaxNameBytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("variable name of ", var.name.size(), " bytes exceeds ", kMaxNameBytes));
  }
  if (var.shape.size() > static_cast<size_t>(kMaxTensorRank)) {
    return bad("rank ", var.shape.size(), " exceeds ", kMaxTensorRank);
  }
  const std::optional<int64_t> elements = CheckedNumElements(var.shape);
  const std::optional<int64_t> bytes = elements ? CheckedMul(*elements, kFloatBytes) : std::nullopt;
  if (!bytes) {
    return bad("shape ", ShapeString(var.shape),
               " has a negative dimension or more elements than int64 holds");
  }
  if (*bytes > kMaxVariableBytes) {
    return bad("shape ", ShapeString(var.shape), " needs ", HumanBytes(*bytes),
               ", over the chief's limit of ", HumanBytes(kMaxVariableBytes), " per variable");
  }
  if (part.kind == PartitionerSpec::Kind::kMinShardBytes ||
      part.kind == PartitionerSpec::Kind::kAuto) {
    if (part.max_shards == 0) part.max_shards = static_cast<int>(stubs_.size());
  }
  absl::StatusOr<std::vector<RowRange>> ranges = PartitionRows(var.shape, part);
  if (!ranges.ok()) return bad(ranges.status().message());
  const int64_t rows = var.shape.empty() ? 1 : var.shape[0];
  const int64_t row_bytes = rows > 0 ? *bytes / rows : 0;
  for (const RowRange& r : *ranges) {
    if (r.rows() * row_bytes <= kMaxPayloadBytes) continue;
    if (row_bytes > kMaxPayloadBytes) {
      return bad("one row of shape ", ShapeString(var.shape), " is ", HumanBytes(row_bytes),
                 ", over the ", HumanBytes(kMaxPayloadBytes),
                 " a message carries; variables are split along their first axis only");
    }
    return bad("a shard of ", HumanBytes(r.rows() * row_bytes), " (of ", HumanBytes(*bytes),
               ") exceeds the ", HumanBytes(kMaxPayloadBytes),
               " a message carries: use partitioner \"auto\" or \"max_bytes:", kAutoMaxShardBytes,
               "\"");
  }
  if (taken_.contains(var.name) || !names->insert(var.name).second) {
    return bad("the name is taken by another variable or shard");
  }
  for (size_t i = 0; ranges->size() > 1 && i < ranges->size(); ++i) {
    const std::string shard = ShardName(var.name, i, ranges->size());
    if (taken_.contains(shard) || !names->insert(shard).second) {
      return bad("its shard name '", shard, "' is taken by another variable or shard");
    }
  }
  return ranges;
}

absl::StatusOr<std::vector<Placement>> VariablePlacer::CreateLocked(
    const std::vector<NewVariable>& vars, const std::vector<PartitionerSpec>& parts) {
  const int num_ps = static_cast<int>(stubs_.size());
  // Every shard of every variable, in order, checked before anything is drawn or sent.
  struct ShardItem {
    size_t var;
    RowRange rows;
    int64_t row_floats;  // floats in one row of the variable
  };
  std::vector<ShardItem> items;
  std::vector<int64_t> bytes;
  std::vector<size_t> num_shards(vars.size());
  absl::flat_hash_set<std::string> names;  // of this call
  for (size_t i = 0; i < vars.size(); ++i) {
    absl::StatusOr<std::vector<RowRange>> ranges = Plan(vars[i], parts[i], &names);
    if (!ranges.ok()) return ranges.status();
    const std::vector<int64_t>& shape = vars[i].shape;
    const int64_t row = shape.empty() ? 1 : NumElements(shape) / std::max<int64_t>(shape[0], 1);
    num_shards[i] = ranges->size();
    for (const RowRange& r : *ranges) {
      items.push_back({i, r, row});
      bytes.push_back(r.rows() * row * kFloatBytes);
    }
  }
  // Place against what earlier calls put on each PS: greedy fills the lightest, round-robin
  // continues where it stopped.
  std::vector<int> ps(items.size());
  if (placement_ == PlacementStrategy::kRoundRobin) {
    for (size_t k = 0; k < items.size(); ++k) ps[k] = static_cast<int>((placed_ + k) % num_ps);
  } else {
    ps = PlaceItems(bytes, num_ps, placement_, load_);
  }

  // Requests per PS, each within the limits of one message.
  std::vector<std::vector<CreateVariablesRequest>> reqs(num_ps);
  std::vector<int64_t> req_bytes(num_ps, 0);
  std::vector<Placement> placements(vars.size());
  std::vector<std::string> table_names;
  std::vector<std::vector<int64_t>> shapes;
  // Drawing and encoding hold each value twice; a job may ask for more than this machine has.
  try {
    std::vector<Tensor> values(vars.size());
    for (size_t i = 0; i < vars.size(); ++i) {
      absl::StatusOr<Tensor> v = vars[i].initial_value();
      if (!v.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("variable '", vars[i].name, "': ", v.status().message()));
      }
      if (v->shape != vars[i].shape) {
        return absl::InternalError(absl::StrCat("variable '", vars[i].name, "': initial value of ",
                                                ShapeString(v->shape), ", not ",
                                                ShapeString(vars[i].shape)));
      }
      values[i] = *std::move(v);
    }

    for (size_t k = 0; k < items.size(); ++k) {
      const NewVariable& v = vars[items[k].var];
      const RowRange r = items[k].rows;
      Placement& p = placements[items[k].var];
      p.set_variable(v.name);
      Shard* shard = p.add_shards();
      shard->set_name(ShardName(v.name, p.shards_size() - 1, num_shards[items[k].var]));
      shard->set_ps_task(ps[k]);
      shard->set_row_begin(r.begin);
      shard->set_row_end(r.end);
      std::vector<int64_t> shape = v.shape;
      if (!shape.empty()) shape[0] = r.rows();
      std::vector<CreateVariablesRequest>& batches = reqs[ps[k]];
      if (batches.empty() || batches.back().variables_size() >= kMaxVariablesPerRequest ||
          req_bytes[ps[k]] + bytes[k] > kMaxPayloadBytes) {
        batches.emplace_back();
        *batches.back().mutable_sender() = MakeSender("chief", 0);
        req_bytes[ps[k]] = 0;
      }
      req_bytes[ps[k]] += bytes[k];
      VariableDef* def = batches.back().add_variables();
      def->set_name(shard->name());
      EncodeTensor(shape, values[items[k].var].data() + r.begin * items[k].row_floats,
                   def->mutable_initial_value());
      *def->mutable_optimizer() = v.optimizer;
      table_names.push_back(shard->name());
      shapes.push_back(shape);
    }
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the chief ran out of memory drawing and encoding the initial values of ",
                     vars.size(), " variable(s), starting with '", vars.front().name, "'"));
  }
  if (absl::Status s = Send(reqs); !s.ok()) return s;

  for (size_t k = 0; k < items.size(); ++k) {
    load_[ps[k]] += bytes[k];
    shards_.push_back({table_names[k], ps[k], bytes[k]});
  }
  placed_ += static_cast<int64_t>(items.size());
  for (size_t i = 0; i < vars.size(); ++i) {
    created_[vars[i].name] = {vars[i].shape, placements[i]};
  }
  for (const std::string& n : names) taken_.insert(n);
  spdlog::info("placement ({} over {} ps):\n{}",
               placement_ == PlacementStrategy::kGreedyBytes ? "greedy by bytes" : "round-robin",
               num_ps, PlacementTable(table_names, shapes, ps, num_ps));
  return placements;
}

absl::Status VariablePlacer::Send(const std::vector<std::vector<CreateVariablesRequest>>& reqs) {
  std::vector<std::vector<std::string>> sent(reqs.size());  // names per PS that may exist now
  absl::Status failed;
  for (size_t t = 0; t < reqs.size() && failed.ok(); ++t) {
    for (const CreateVariablesRequest& req : reqs[t]) {
      // Waits for a PS that is still connecting instead of failing at once; not retried, since
      // a retry of a create that did arrive would fail with AlreadyExists.
      std::unique_ptr<grpc::ClientContext> ctx = ContextWithTimeout(rpc_timeout_);
      ctx->set_wait_for_ready(true);
      CreateVariablesResponse resp;
      failed = FromGrpcStatus(stubs_[t]->CreateVariables(ctx.get(), req, &resp), "CreateVariables",
                              TaskName("ps", t));
      if (failed.ok() || OutcomeUnknown(failed)) {
        for (const VariableDef& d : req.variables()) sent[t].push_back(d.name());
      }
      if (!failed.ok()) break;
    }
  }
  if (failed.ok()) return failed;
  for (size_t t = 0; t < sent.size(); ++t) {
    if (sent[t].empty()) continue;
    if (absl::Status s = Delete(static_cast<int>(t), sent[t]); !s.ok()) {
      spdlog::error("undoing a failed create: {}", std::string(s.message()));
      return absl::Status(
          failed.code(), absl::StrCat(failed.message(), " (undoing it failed: ", s.message(), ")"));
    }
  }
  return failed;
}

absl::Status VariablePlacer::Delete(int ps, const std::vector<std::string>& names) {
  for (size_t begin = 0; begin < names.size(); begin += kMaxVariablesPerRequest) {
    DeleteVariablesRequest req;
    *req.mutable_sender() = MakeSender("chief", 0);
    const size_t end = std::min(names.size(), begin + kMaxVariablesPerRequest);
    for (size_t i = begin; i < end; ++i) req.add_names(names[i]);
    std::unique_ptr<grpc::ClientContext> ctx = ContextWithTimeout(rpc_timeout_);
    ctx->set_wait_for_ready(true);
    DeleteVariablesResponse resp;
    absl::Status s = FromGrpcStatus(stubs_[ps]->DeleteVariables(ctx.get(), req, &resp),
                                    "DeleteVariables", TaskName("ps", ps));
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace pstrain
