// Internal to src/client (ParameterSession is built on it; its tests and the benchmarks use it
// directly): pull and push of sharded variables over every PS task, all requests in flight at
// once. Not part of the installed client API.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/fan_out.h"
#include "client/session.h"
#include "common/limits.h"
#include "common/rpc.h"
#include "common/tensor.h"
#include "ps.grpc.pb.h"
#include "transport/transport.h"
#include "worker.pb.h"

namespace pstrain {

// Views of `tensors`, in order; InvalidArgument naming the index of the first whose values do not
// fill its shape.
absl::StatusOr<std::vector<TensorView>> ViewsOf(const std::vector<Tensor>& tensors);

// How much one Pull or Push request to a PS may carry; a PS's shards are split over as many
// requests as these need. The defaults are the servers' limits (common/limits.h).
struct RequestLimits {
  int64_t max_tensor_bytes = kMaxPayloadBytes;  // sum of the tensors' bytes in one request
  int max_tensors = kMaxVariablesPerRequest;    // tensors named in one request
};

// Not thread-safe: one per training thread.
class PsClient {
 public:
  // `variables` fixes the order used by Pull and Push. Pulls and pushes travel over one
  // DataChannel per PS (transport/transport.h: MakeDataChannel with GetTransportOptions()'s
  // transport, made at the first Pull or Push); the other calls over gRPC. A shard larger than
  // limits.max_tensor_bytes travels in a request of its own (the channel streams it in chunks
  // past one message); one whose byte count overflows makes every Pull and Push fail with
  // InvalidArgument naming it.
  PsClient(const std::vector<std::string>& ps_addresses, std::vector<VariableRef> variables,
           Sender sender, absl::Duration timeout, RequestLimits limits = {});

  // Pulls every variable. On success (*values)[i] points at variable i's floats (a buffer of this
  // client's, which every shard's rows are received into), valid until the next Pull; the versions
  // read are remembered for the next Push. `min_version` (sync) and `clock` (ssp) are passed to
  // every PS, which may make the pull wait. With `same_step` (sync) the pull is repeated until
  // every shard was read at one version, so the gradients pushed next all belong to that step; each
  // PS answers only at one step, so this repeats only while the last pushes of a step are still
  // being applied on some PS. Requests wait for a PS that is still connecting, and one that fails
  // with UNAVAILABLE is sent again with backoff; the whole call has `timeout` as its deadline.
  absl::Status Pull(std::vector<const float*>* values, uint64_t min_version = 0, int64_t clock = 0,
                    bool same_step = false);
  // Pushes grads[i] for variable i (split into its shards, each sent from grads[i]'s own rows
  // without a copy, or from a converted copy for a 16-bit push_dtype), each shard tagged with the
  // version its last Pull returned. *stale_dropped, if given, counts shards the PS dropped as
  // stale. Waits for a PS that is still connecting. Untagged, a push is never sent twice (it is not
  // idempotent); with `tag` (which batch of which task it carries, docs/recovery.md) every
  // request carries it, so a PS drops a second copy, and one that failed with UNAVAILABLE is
  // sent again with backoff, as a pull is.
  absl::Status Push(const std::vector<Tensor>& grads, int* stale_dropped = nullptr,
                    const PushTag* tag = nullptr);
  absl::Status Push(const std::vector<TensorView>& grads, int* stale_dropped = nullptr,
                    const PushTag* tag = nullptr);
  // As Push, of the variables `vars` only (distinct indices; grads[i] is read for those only): a
  // request to a PS carries the shards of these variables that a full Push would send it, whole,
  // so pushing every variable once over several PushSome applies what one Push applies.
  absl::Status PushSome(const std::vector<int>& vars, const std::vector<Tensor>& grads,
                        int* stale_dropped = nullptr, const PushTag* tag = nullptr);
  // Smallest and largest version over the shards of the last Pull; in sync mode both are the
  // global step.
  uint64_t min_version_read() const;
  uint64_t max_version_read() const;
  // Tells every PS this worker is done, or with `pause` that it waits (at a barrier) and should
  // not hold back sync steps or ssp clocks until its next push.
  absl::Status Leave(bool pause = false);
  // Counters of every PS task, by task.
  absl::StatusOr<std::vector<StatsResponse>> Stats();

  // The element type gradients travel in: DT_FLOAT (the default), DT_HALF or DT_BFLOAT16
  // (common/half.h; the PS widens them to float32). Set it before the first Push.
  void set_push_dtype(DataType dtype) { push_dtype_ = dtype; }
  // The transport of the data channels: "grpc", "tcp", "ucx" or "auto" (MakeDataChannel); the
  // process's (GetTransportOptions) unless set before the first Pull or Push.
  void set_transport(std::string transport) { transport_ = std::move(transport); }
  // Per PS task, the transport its data channel took ("grpc", "tcp" or "ucx"), once made; "" for a
  // task without one yet.
  std::vector<std::string> channel_transports() const;

  const std::vector<VariableRef>& variables() const { return variables_; }
  // Calls in flight or started later end with Cancelled once `canceller` is cancelled (not
  // owned; it must outlive this client). Set it before the first call.
  void set_canceller(CallCanceller* canceller) { peers_.set_canceller(canceller); }

 private:
  struct Slot {  // where tensor k of a request belongs
    size_t var;
    size_t shard;
  };
  struct Batch {  // one Pull or Push request: shards of one PS
    int ps;
    std::vector<Slot> slots;
  };
  void PlanBatches(const RequestLimits& limits);
  absl::Status MakeChannels();
  // Runs `call(channel, options, batch, done)` for every batch at once, as PsPeers::FanOut does.
  // Runs `call(channel, options, b, done)` for every batch b of `which` at once, as
  // PsPeers::FanOut does.
  template <typename Call>
  absl::Status FanOut(const char* what, bool retry, const std::vector<size_t>& which, Call call);
  // Push of the variables with selected[i] (grads holds every variable, null for the others).
  absl::Status PushSelected(const std::vector<TensorView>& grads, const std::vector<bool>& selected,
                            int* stale_dropped, const PushTag* tag);
  absl::Status PullOnce(std::vector<const float*>* values, uint64_t min_version, int64_t clock);
  const std::vector<VariableRef> variables_;
  const Sender sender_;
  DataType push_dtype_ = DT_FLOAT;
  std::string transport_ = GetTransportOptions().transport;
  PsPeers peers_;
  absl::Status unsendable_;                             // a shard that cannot be sent or received
  std::vector<Batch> batches_;                          // every request of a Pull (and of a Push)
  std::vector<size_t> all_batches_;                     // 0, 1, ..., batches_.size() - 1
  std::vector<std::unique_ptr<DataChannel>> channels_;  // per PS task with a batch
  std::vector<std::vector<float>> values_;              // per variable: what the last Pull received
  std::vector<std::vector<uint16_t>> narrow_;           // per variable: a gradient as push_dtype_
  std::vector<std::vector<uint64_t>> versions_;         // per variable, per shard
  std::vector<PullRequest> pull_reqs_;                  // per batch
  std::vector<PullResponse> pull_resps_;
  std::vector<std::vector<MutableBytes>> pull_dest_;  // per batch: its shards' rows of values_
  std::vector<PushRequest> push_reqs_;                // per batch, gradients without data
  std::vector<PushResponse> push_resps_;
  std::vector<std::vector<ConstBytes>> push_src_;  // per batch: the current push's bytes
  std::vector<PushRequest> some_reqs_;             // per batch: a PushSome's part of push_reqs_
  std::vector<std::vector<ConstBytes>> some_src_;  // per batch: its bytes
};

}  // namespace pstrain
