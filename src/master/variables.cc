#include "common/tensor_codec.h"
#include "master/variables.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/rpc.h"
#include "spdlog/spdlog.h"

namespace pstrain {

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
    if (!p.ok()) return p.status();
    part = *p;
  }
  absl::MutexLock lock(&mu_);
  if (auto it = created_.find(var.name); it != created_.end()) {
    if (it->second.first != var.initial_value.shape) {
      return absl::InvalidArgumentError(absl::StrCat("variable ", var.name, " exists with shape ",
                                                     ShapeString(it->second.first), ", not ",
                                                     ShapeString(var.initial_value.shape)));
    }
    return it->second.second;
  }
  absl::StatusOr<std::vector<Placement>> placed = CreateLocked({var}, {part});
  if (!placed.ok()) return placed.status();
  return placed->front();
}

absl::StatusOr<std::vector<Placement>> VariablePlacer::CreateLocked(
    const std::vector<NewVariable>& vars, const std::vector<PartitionerSpec>& parts) {
  const int num_ps = static_cast<int>(stubs_.size());
  // Every shard of every variable, in order.
  struct ShardItem {
    size_t var;
    RowRange rows;
    int64_t row_floats;  // floats in one row of the variable
  };
  std::vector<ShardItem> items;
  std::vector<int64_t> bytes;
  for (size_t i = 0; i < vars.size(); ++i) {
    PartitionerSpec spec = parts[i];
    if (spec.kind == PartitionerSpec::Kind::kMinShardBytes && spec.max_shards == 0) {
      spec.max_shards = num_ps;
    }
    const std::vector<int64_t>& shape = vars[i].initial_value.shape;
    absl::StatusOr<std::vector<RowRange>> ranges = PartitionRows(shape, spec);
    if (!ranges.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("variable ", vars[i].name, ": ", ranges.status().message()));
    }
    const int64_t row = shape.empty() ? 1 : NumElements(shape) / std::max<int64_t>(shape[0], 1);
    for (const RowRange& r : *ranges) {
      items.push_back({i, r, row});
      bytes.push_back(r.rows() * row * 4);
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

  std::vector<Placement> placements(vars.size());
  std::vector<CreateVariablesRequest> reqs(num_ps);
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  for (size_t k = 0; k < items.size(); ++k) {
    const NewVariable& v = vars[items[k].var];
    const RowRange r = items[k].rows;
    Placement& p = placements[items[k].var];
    p.set_variable(v.name);
    const bool whole =
        r.begin == 0 && (v.initial_value.shape.empty() || r.end == v.initial_value.shape[0]);
    Shard* shard = p.add_shards();
    shard->set_name(whole ? v.name : absl::StrCat(v.name, "/part_", p.shards_size() - 1));
    shard->set_ps_task(ps[k]);
    shard->set_row_begin(r.begin);
    shard->set_row_end(r.end);
    std::vector<int64_t> shape = v.initial_value.shape;
    if (!shape.empty()) shape[0] = r.rows();
    const int64_t offset = r.begin * items[k].row_floats;
    VariableDef* def = reqs[ps[k]].add_variables();
    def->set_name(shard->name());
    EncodeTensor(shape, v.initial_value.data() + offset, def->mutable_initial_value());
    *def->mutable_optimizer() = v.optimizer;
    names.push_back(shard->name());
    shapes.push_back(shape);
  }
  for (int t = 0; t < num_ps; ++t) {
    if (reqs[t].variables_size() == 0) continue;
    *reqs[t].mutable_sender() = MakeSender("chief", 0);
    CreateVariablesResponse resp;
    grpc::Status s =
        stubs_[t]->CreateVariables(ContextWithTimeout(rpc_timeout_).get(), reqs[t], &resp);
    if (!s.ok()) return FromGrpcStatus(s, "CreateVariables", TaskName("ps", t));
  }
  for (size_t k = 0; k < items.size(); ++k) load_[ps[k]] += bytes[k];
  placed_ += static_cast<int64_t>(items.size());
  for (size_t i = 0; i < vars.size(); ++i) {
    created_[vars[i].name] = {vars[i].initial_value.shape, placements[i]};
  }
  spdlog::info("placement ({} over {} ps):\n{}",
               placement_ == PlacementStrategy::kGreedyBytes ? "greedy by bytes" : "round-robin",
               num_ps, PlacementTable(names, shapes, ps, num_ps));
  return placements;
}

}  // namespace pstrain
