// Internal to src/client: pull and push of sharded variables over every PS task, one request per
// PS per call, all in flight at once.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/tensor.h"
#include "ps.grpc.pb.h"
#include "worker.pb.h"

namespace pstrain {

struct ShardRef {
  std::string name;  // the shard's name on its PS
  int ps_task = 0;
  int64_t row_begin = 0, row_end = 0;  // rows of the variable's first axis
};

struct VariableRef {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<ShardRef> shards;  // in row order, covering every row
};

// The shards of placement `p` as a VariableRef for variable `name` of `shape`. InvalidArgument
// unless `p` names that variable and its shards cover its rows in order on ps tasks in
// [0, num_ps).
absl::StatusOr<VariableRef> ToVariableRef(const Placement& p, const std::string& name,
                                          const std::vector<int64_t>& shape, int num_ps);

// Not thread-safe: one per training thread.
class PsClient {
 public:
  // `variables` fixes the order used by Pull and Push.
  PsClient(const std::vector<std::string>& ps_addresses, std::vector<VariableRef> variables,
           Sender sender, absl::Duration timeout);

  // Pulls every variable. On success (*values)[i] points at variable i's floats, valid until the
  // next Pull; the versions read are remembered for the next Push. `min_version` (sync) and
  // `clock` (ssp) are passed to every PS, which may make the pull wait. With `same_step` (sync)
  // the pull is repeated until every shard was read at one version, so the gradients pushed next
  // all belong to that step; each PS answers only at one step, so this repeats only while the
  // last pushes of a step are still being applied on some PS.
  absl::Status Pull(std::vector<const float*>* values, uint64_t min_version = 0, int64_t clock = 0,
                    bool same_step = false);
  // Pushes grads[i] for variable i (split into its shards), each shard tagged with the version
  // its last Pull returned. *stale_dropped, if given, counts shards the PS dropped as stale.
  absl::Status Push(const std::vector<Tensor>& grads, int* stale_dropped = nullptr);
  // Smallest and largest version over the shards of the last Pull; in sync mode both are the
  // global step.
  uint64_t min_version_read() const;
  uint64_t max_version_read() const;
  // Tells every PS this worker is done.
  absl::Status Leave();
  // Counters of every PS task, by task.
  absl::StatusOr<std::vector<StatsResponse>> Stats();

  const std::vector<VariableRef>& variables() const { return variables_; }

 private:
  struct Slot {  // where shard k of a PS request belongs
    size_t var;
    size_t shard;
  };
  absl::Status PullOnce(std::vector<const float*>* values, uint64_t min_version, int64_t clock);
  template <typename Req, typename Resp, typename Call>
  absl::Status FanOut(const char* what, std::vector<Req>& reqs, std::vector<Resp>& resps,
                      bool all_ps, Call call);

  const std::vector<std::string> addresses_;
  const std::vector<VariableRef> variables_;
  const Sender sender_;
  const absl::Duration timeout_;
  std::vector<std::unique_ptr<ParameterServerService::Stub>> stubs_;
  std::vector<std::vector<Slot>> by_ps_;         // shards held by each PS, in request order
  std::vector<std::vector<float>> assembled_;    // per variable with several shards
  std::vector<std::vector<uint64_t>> versions_;  // per variable, per shard
  std::vector<PullRequest> pull_reqs_;
  std::vector<PullResponse> pull_resps_;
  std::vector<PushRequest> push_reqs_;
  std::vector<PushResponse> push_resps_;
};

}  // namespace pstrain
