// Internal to src/master: partitioning, placement and creation of variables on the PS tasks.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/tensor.h"
#include "master/placement.h"
#include "ps.grpc.pb.h"
#include "worker.pb.h"

namespace pstrain {

struct NewVariable {
  std::string name;
  Tensor initial_value;
  OptimizerConfig optimizer;
};

// Thread-safe.
class VariablePlacer {
 public:
  // `ps_addresses` by task; partitioner and placement as on the command line.
  static absl::StatusOr<std::unique_ptr<VariablePlacer>> Create(
      const std::vector<std::string>& ps_addresses, const std::string& partitioner,
      const std::string& placement, absl::Duration rpc_timeout);

  // Partitions every variable, places all shards together (so greedy balances the whole set),
  // creates them on their PS and returns one Placement per variable. Logs the placement table.
  absl::StatusOr<std::vector<Placement>> CreateAll(const std::vector<NewVariable>& vars);
  // Get-or-create for client programs: the existing placement if `name` exists with this shape
  // (InvalidArgument if with another), else creates it with `partitioner` ("" = the default),
  // placed on the least-loaded PS tasks (greedy) or round-robin continuing from earlier ones.
  absl::StatusOr<Placement> GetOrCreate(const NewVariable& var, const std::string& partitioner);

 private:
  VariablePlacer(std::vector<std::unique_ptr<ParameterServerService::Stub>> stubs,
                 PartitionerSpec partitioner, PlacementStrategy placement,
                 absl::Duration rpc_timeout);
  absl::StatusOr<std::vector<Placement>> CreateLocked(const std::vector<NewVariable>& vars,
                                                      const std::vector<PartitionerSpec>& parts)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::vector<std::unique_ptr<ParameterServerService::Stub>> stubs_;
  const PartitionerSpec partitioner_;
  const PlacementStrategy placement_;
  const absl::Duration rpc_timeout_;
  absl::Mutex mu_;
  std::vector<int64_t> load_ ABSL_GUARDED_BY(mu_);  // bytes per PS
  int64_t placed_ ABSL_GUARDED_BY(mu_) = 0;         // shards placed so far (round-robin)
  absl::flat_hash_map<std::string, std::pair<std::vector<int64_t>, Placement>> created_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace pstrain
