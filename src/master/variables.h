// Internal to src/master: partitioning, placement and creation of variables on the PS tasks.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/limits.h"
#include "common/tensor.h"
#include "master/master.h"
#include "master/placement.h"
#include "ps.grpc.pb.h"
#include "worker.pb.h"

namespace pstrain {

struct NewVariable {
  std::string name;
  std::vector<int64_t> shape;
  OptimizerConfig optimizer;
  // Draws the initial value (of `shape`); called at most once, after every check passed.
  std::function<absl::StatusOr<Tensor>()> initial_value;
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
  // All or nothing: see GetOrCreate.
  absl::StatusOr<std::vector<Placement>> CreateAll(const std::vector<NewVariable>& vars);
  // Get-or-create for client programs: the existing placement if `name` exists with this shape
  // (InvalidArgument if with another), else creates it with `partitioner` ("" = the default),
  // placed on the least-loaded PS tasks (greedy) or round-robin continuing from earlier ones.
  // Before anything is drawn or sent: InvalidArgument for a bad name or shape (rank, negative or
  // overflowing sizes, over kMaxVariableBytes), a shard over kMaxPayloadBytes (naming a
  // partitioner that fits), or a variable or shard name already taken. A create that fails on
  // one PS is undone on the others (DeleteVariables); the original error is returned and nothing
  // of the variable is left, so the same create may be retried.
  absl::StatusOr<Placement> GetOrCreate(const NewVariable& var, const std::string& partitioner);

  // Forgets every variable and shard created so far (the PS were Reset, docs/recovery.md): the
  // next creates place from an empty cluster, as at the start of the job.
  void Forget();

  // Shards created so far, on all PS.
  int64_t NumShards() const;
  // Every shard created so far, in creation order, and the bytes placed on each PS.
  std::vector<JobStatus::Shard> Shards() const;
  std::vector<int64_t> Load() const;
  // A warning if one PS holds more than twice the average bytes of the others (num_ps > 1),
  // else nullopt.
  std::optional<std::string> Imbalance() const;

 private:
  VariablePlacer(std::vector<std::unique_ptr<ParameterServerService::Stub>> stubs,
                 PartitionerSpec partitioner, PlacementStrategy placement,
                 absl::Duration rpc_timeout);
  absl::StatusOr<std::vector<Placement>> CreateLocked(const std::vector<NewVariable>& vars,
                                                      const std::vector<PartitionerSpec>& parts)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::vector<RowRange>> Plan(const NewVariable& var, PartitionerSpec part,
                                             absl::flat_hash_set<std::string>* names) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Sends the requests of each PS in order; on a failure deletes what was created and returns
  // the failure.
  absl::Status Send(const std::vector<std::vector<CreateVariablesRequest>>& reqs);
  absl::Status Delete(int ps, const std::vector<std::string>& names);

  const std::vector<std::unique_ptr<ParameterServerService::Stub>> stubs_;
  const PartitionerSpec partitioner_;
  const PlacementStrategy placement_;
  const absl::Duration rpc_timeout_;
  mutable absl::Mutex mu_;
  std::vector<int64_t> load_ ABSL_GUARDED_BY(mu_);  // bytes per PS
  int64_t placed_ ABSL_GUARDED_BY(mu_) = 0;         // shards placed so far (round-robin)
  std::vector<JobStatus::Shard> shards_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::pair<std::vector<int64_t>, Placement>> created_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> taken_ ABSL_GUARDED_BY(mu_);  // variable and shard names
};

}  // namespace pstrain
