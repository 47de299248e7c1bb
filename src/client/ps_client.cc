#include "client/ps_client.h"

#include <algorithm>
#include <new>
#include <optional>

#include "absl/strings/str_cat.h"
#include "client/ps_client_fan_out.h"
#include "common/rpc.h"
#include "common/tensor_codec.h"

namespace pstrain {
namespace {

using ps_client_internal::RowSize;

std::vector<int64_t> ShardShape(const VariableRef& v, const ShardRef& s) {
  std::vector<int64_t> shape = v.shape;
  if (!shape.empty()) shape[0] = s.row_end - s.row_begin;
  return shape;
}

}  // namespace

absl::StatusOr<VariableRef> ToVariableRef(const Placement& p, const std::string& name,
                                          const std::vector<int64_t>& shape, int num_ps) {
  auto bad = [&](auto... parts) {
    return absl::InvalidArgumentError(absl::StrCat("placement of \"", name, "\": ", parts...));
  };
  if (p.variable() != name) return bad("names variable \"", p.variable(), "\"");
  if (p.shards_size() == 0) return bad("has no shards");
  const int64_t rows = shape.empty() ? 1 : shape[0];
  VariableRef v{name, shape, {}};
  int64_t next = 0;
  for (const Shard& s : p.shards()) {
    if (s.ps_task() < 0 || s.ps_task() >= num_ps) {
      return bad("shard \"", s.name(), "\" is on ps:", s.ps_task(), ", but there are ", num_ps,
                 " ps tasks");
    }
    if (s.row_begin() != next || s.row_end() < s.row_begin() || s.row_end() > rows) {
      return bad("shard \"", s.name(), "\" holds rows [", s.row_begin(), ", ", s.row_end(),
                 "), expected to start at row ", next, " of ", rows);
    }
    next = s.row_end();
    v.shards.push_back({s.name(), s.ps_task(), s.row_begin(), s.row_end()});
  }
  if (next != rows) return bad("shards cover ", next, " of ", rows, " rows");
  return v;
}

PsClient::PsClient(const std::vector<std::string>& ps_addresses, std::vector<VariableRef> variables,
                   Sender sender, absl::Duration timeout, RequestLimits limits)
    : variables_(std::move(variables)),
      sender_(std::move(sender)),
      peers_(ps_addresses, timeout),
      values_(variables_.size()),
      narrow_(variables_.size()),
      versions_(variables_.size()) {
  PlanBatches(limits);
  if (!unsendable_.ok()) return;
  for (size_t i = 0; i < variables_.size(); ++i) {
    versions_[i].assign(variables_[i].shards.size(), 0);
    try {
      values_[i].resize(NumElements(variables_[i].shape));
    } catch (const std::bad_alloc&) {
      unsendable_ = absl::ResourceExhaustedError(absl::StrCat("no memory to receive variable \"",
                                                              variables_[i].name, "\" of shape ",
                                                              ShapeString(variables_[i].shape)));
      return;
    }
  }
  pull_reqs_.resize(batches_.size());
  pull_resps_.resize(batches_.size());
  pull_dest_.resize(batches_.size());
  push_reqs_.resize(batches_.size());
  push_resps_.resize(batches_.size());
  push_src_.resize(batches_.size());
  for (size_t b = 0; b < batches_.size(); ++b) {
    *pull_reqs_[b].mutable_sender() = sender_;
    *push_reqs_[b].mutable_sender() = sender_;
    for (const auto [i, k] : batches_[b].slots) {
      const VariableRef& v = variables_[i];
      const ShardRef& shard = v.shards[k];
      pull_reqs_[b].add_names(shard.name);
      const int64_t row = RowSize(v.shape);
      pull_dest_[b].push_back(
          {values_[i].data() + shard.row_begin * row,
           static_cast<int64_t>((shard.row_end - shard.row_begin) * row * sizeof(float))});
      Gradient* g = push_reqs_[b].add_gradients();
      g->set_name(shard.name);
      const std::vector<int64_t> shape = ShardShape(v, shard);
      g->mutable_gradient()->mutable_shape()->Assign(shape.begin(), shape.end());
    }
    push_src_[b].resize(batches_[b].slots.size());
    all_batches_.push_back(b);
  }
  some_reqs_.resize(batches_.size());
  some_src_.resize(batches_.size());
}

void PsClient::PlanBatches(const RequestLimits& limits) {
  // What a request carries besides tensor bytes stays within the message's headroom.
  constexpr int64_t kMaxOverheadBytes = kMaxMessageBytes - kMaxPayloadBytes;
  struct Open {
    int64_t tensor_bytes = 0, overhead_bytes = 0;
    int batch = -1;
  };
  std::vector<Open> open(peers_.size());
  for (size_t i = 0; i < variables_.size(); ++i) {
    const VariableRef& v = variables_[i];
    for (size_t k = 0; k < v.shards.size(); ++k) {
      const ShardRef& s = v.shards[k];
      const std::optional<int64_t> n = CheckedNumElements(ShardShape(v, s));
      const std::optional<int64_t> bytes = n ? CheckedMul(*n, sizeof(float)) : std::nullopt;
      if (!bytes) {
        unsendable_ = absl::InvalidArgumentError(absl::StrCat(
            "variable \"", v.name, "\" shard \"", s.name, "\" on ps:", s.ps_task, " has shape ",
            ShapeString(ShardShape(v, s)), ", whose byte count overflows: partition the variable"));
        return;
      }
      if (*bytes > limits.max_tensor_bytes) {
        // Alone in its request, which the channel streams in chunks when it passes one message;
        // the PS's open request goes on collecting smaller shards.
        batches_.push_back({s.ps_task, {{i, k}}});
        continue;
      }
      const int64_t overhead = static_cast<int64_t>(s.name.size()) + 16 * (v.shape.size() + 4);
      Open& o = open[s.ps_task];
      const bool fits = o.batch >= 0 && o.tensor_bytes + *bytes <= limits.max_tensor_bytes &&
                        o.overhead_bytes + overhead <= kMaxOverheadBytes &&
                        static_cast<int>(batches_[o.batch].slots.size()) < limits.max_tensors;
      if (!fits) {
        o = Open{0, 0, static_cast<int>(batches_.size())};
        batches_.push_back({s.ps_task, {}});
      }
      o.tensor_bytes += *bytes;
      o.overhead_bytes += overhead;
      batches_[o.batch].slots.push_back({i, k});
    }
  }
}

absl::Status PsClient::Pull(std::vector<const float*>* values, uint64_t min_version, int64_t clock,
                            bool same_step) {
  if (!unsendable_.ok()) return unsendable_;
  while (true) {
    absl::Status s = PullOnce(values, min_version, clock);
    if (!s.ok() || !same_step || min_version_read() == max_version_read()) return s;
    min_version = max_version_read();
  }
}

absl::Status PsClient::MakeChannels() {
  channels_.resize(peers_.size());
  for (const Batch& b : batches_) {
    if (channels_[b.ps] != nullptr) continue;
    absl::StatusOr<std::unique_ptr<DataChannel>> c =
        MakeDataChannel(transport_, peers_.address(b.ps));
    if (!c.ok()) {
      return absl::Status(c.status().code(), absl::StrCat("data channel to ", peers_.PeerName(b.ps),
                                                          ": ", c.status().message()));
    }
    channels_[b.ps] = *std::move(c);
  }
  return absl::OkStatus();
}

std::vector<std::string> PsClient::channel_transports() const {
  std::vector<std::string> names(peers_.size());
  for (size_t i = 0; i < channels_.size(); ++i) {
    if (channels_[i] != nullptr) names[i] = channels_[i]->name();
  }
  return names;
}

absl::Status PsClient::PullOnce(std::vector<const float*>* values, uint64_t min_version,
                                int64_t clock) {
  for (PullRequest& r : pull_reqs_) {
    r.set_min_version(min_version);
    r.set_clock(clock);
  }
  absl::Status s =
      FanOut("Pull", /*retry=*/true, all_batches_,
             [this](DataChannel* c, const CallOptions& o, size_t b, DoneFn done) {
               c->Pull(o, pull_reqs_[b], pull_dest_[b], &pull_resps_[b], std::move(done));
             });
  if (!s.ok()) return s;
  for (size_t b = 0; b < batches_.size(); ++b) {
    const PullResponse& resp = pull_resps_[b];
    const std::vector<Slot>& slots = batches_[b].slots;
    if (resp.values_size() != static_cast<int>(slots.size())) {
      return absl::InternalError(absl::StrCat("ps:", batches_[b].ps, " returned ",
                                              resp.values_size(), " values for ", slots.size(),
                                              " variables"));
    }
    for (size_t k = 0; k < slots.size(); ++k) {
      const auto [i, j] = slots[k];
      const VariableRef& v = variables_[i];
      const ShardRef& shard = v.shards[j];
      const TensorProto& t = resp.values(k).value();
      const std::vector<int64_t> want = ShardShape(v, shard);
      if (!std::equal(t.shape().begin(), t.shape().end(), want.begin(), want.end())) {
        return absl::InternalError(
            absl::StrCat(TaskName("ps", batches_[b].ps), " returned \"", shard.name, "\" of shape ",
                         ShapeString(std::vector<int64_t>(t.shape().begin(), t.shape().end())),
                         ", not ", ShapeString(want)));
      }
      versions_[i][j] = resp.values(k).version();
    }
  }
  values->resize(variables_.size());
  for (size_t i = 0; i < variables_.size(); ++i) (*values)[i] = values_[i].data();
  return absl::OkStatus();
}

uint64_t PsClient::min_version_read() const {
  uint64_t v = UINT64_MAX;
  for (const auto& shards : versions_) {
    for (uint64_t x : shards) v = std::min(v, x);
  }
  return v == UINT64_MAX ? 0 : v;
}

uint64_t PsClient::max_version_read() const {
  uint64_t v = 0;
  for (const auto& shards : versions_) {
    for (uint64_t x : shards) v = std::max(v, x);
  }
  return v;
}

absl::Status PsClient::Leave(bool pause) {
  std::vector<LeaveRequest> reqs;
  std::vector<LeaveResponse> resps;
  reqs.resize(peers_.size());
  for (LeaveRequest& r : reqs) r.set_pause(pause);
  return peers_.ToEveryPs(pause ? "Leave (pause)" : "Leave", sender_, reqs, resps,
                          [](auto* async, auto* ctx, auto* req, auto* resp, auto done) {
                            async->Leave(ctx, req, resp, std::move(done));
                          });
}

absl::StatusOr<std::vector<StatsResponse>> PsClient::Stats() {
  std::vector<StatsRequest> reqs;
  std::vector<StatsResponse> resps;
  absl::Status s = peers_.ToEveryPs("Stats", sender_, reqs, resps,
                                    [](auto* async, auto* ctx, auto* req, auto* resp, auto done) {
                                      async->Stats(ctx, req, resp, std::move(done));
                                    });
  if (!s.ok()) return s;
  return resps;
}

}  // namespace pstrain
