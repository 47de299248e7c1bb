#include "client/ps_client.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/half.h"
#include "common/rpc.h"
#include "common/tensor_codec.h"

namespace pstrain {
namespace {

int64_t RowSize(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

std::vector<int64_t> ShardShape(const VariableRef& v, const ShardRef& s) {
  std::vector<int64_t> shape = v.shape;
  if (!shape.empty()) shape[0] = s.row_end - s.row_begin;
  return shape;
}

// `s` naming PS task `peer` ("Pull at ps:1 127.0.0.1:2222: ...") as PsPeers' errors do: a
// channel names only the address it was made for.
absl::Status NamePs(absl::Status s, const char* what, const std::string& address,
                    const std::string& peer) {
  absl::string_view m = s.message();
  absl::ConsumePrefix(&m, absl::StrCat(what, " at ", address, ": "));
  return absl::Status(s.code(), absl::StrCat(what, " at ", peer, ": ", m));
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

template <typename Call>
absl::Status PsClient::FanOut(const char* what, bool retry, const std::vector<size_t>& which,
                              Call call) {
  if (absl::Status s = MakeChannels(); !s.ok()) return s;
  CallOptions options;
  options.deadline = absl::Now() + peers_.timeout();
  options.wait_for_ready = true;  // a PS still connecting (or reconnecting) is waited for
  options.canceller = peers_.canceller();
  return FanOutCalls(
      what, which.size(), retry, options.deadline, options.canceller, [&](size_t j, auto done) {
        const size_t b = which[j];
        const int ps = batches_[b].ps;
        call(channels_[ps].get(), options, b,
             [this, what, ps, done = std::move(done)](absl::Status s) {
               if (!s.ok()) s = NamePs(std::move(s), what, peers_.address(ps), peers_.PeerName(ps));
               done(std::move(s));
             });
      });
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

absl::StatusOr<std::vector<TensorView>> ViewsOf(const std::vector<Tensor>& tensors) {
  std::vector<TensorView> views;
  views.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (t.size() != NumElements(t.shape)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", i, " has shape ", ShapeString(t.shape), " and ", t.size(), " values"));
    }
    views.push_back({t.shape, t.data()});
  }
  return views;
}

absl::Status PsClient::Push(const std::vector<Tensor>& grads, int* stale_dropped,
                            const PushTag* tag) {
  absl::StatusOr<std::vector<TensorView>> views = ViewsOf(grads);
  if (!views.ok()) return views.status();
  return Push(*views, stale_dropped, tag);
}

absl::Status PsClient::Push(const std::vector<TensorView>& grads, int* stale_dropped,
                            const PushTag* tag) {
  return PushSelected(grads, std::vector<bool>(variables_.size(), true), stale_dropped, tag);
}

absl::Status PsClient::PushSome(const std::vector<int>& vars, const std::vector<Tensor>& grads,
                                int* stale_dropped, const PushTag* tag) {
  if (grads.size() != variables_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("push of ", grads.size(), " gradients for ", variables_.size(), " variables"));
  }
  std::vector<bool> selected(variables_.size(), false);
  std::vector<TensorView> views(variables_.size());
  for (int i : vars) {
    if (i < 0 || i >= static_cast<int>(variables_.size()) || selected[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat("push of variable ", i, " of ", variables_.size(), ", or of it twice"));
    }
    selected[i] = true;
    const Tensor& t = grads[i];
    if (t.size() != NumElements(t.shape)) {
      return absl::InvalidArgumentError(absl::StrCat("gradient for ", variables_[i].name,
                                                     " has shape ", ShapeString(t.shape), " and ",
                                                     t.size(), " values"));
    }
    views[i] = {t.shape, t.data()};
  }
  return PushSelected(views, selected, stale_dropped, tag);
}

absl::Status PsClient::PushSelected(const std::vector<TensorView>& grads,
                                    const std::vector<bool>& selected, int* stale_dropped,
                                    const PushTag* tag) {
  if (!unsendable_.ok()) return unsendable_;
  if (grads.size() != variables_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("push of ", grads.size(), " gradients for ", variables_.size(), " variables"));
  }
  for (size_t i = 0; i < variables_.size(); ++i) {
    if (!selected[i]) continue;
    if (grads[i].shape != variables_[i].shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gradient for ", variables_[i].name, " has shape ", ShapeString(grads[i].shape),
          ", the variable ", ShapeString(variables_[i].shape)));
    }
    if (grads[i].data == nullptr && NumElements(grads[i].shape) > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("gradient for ", variables_[i].name, " has no values"));
    }
  }
  const int elem = DtypeBytes(push_dtype_);
  if (push_dtype_ != DT_FLOAT && push_dtype_ != DT_HALF && push_dtype_ != DT_BFLOAT16) {
    return absl::InvalidArgumentError(absl::StrCat("push dtype ", DataType_Name(push_dtype_),
                                                   ": DT_FLOAT, DT_HALF or DT_BFLOAT16"));
  }
  // The bytes each variable's gradient travels from: the caller's floats, or 16-bit copies.
  std::vector<const char*> base(variables_.size());
  for (size_t i = 0; i < variables_.size(); ++i) {
    if (!selected[i]) continue;
    base[i] = reinterpret_cast<const char*>(grads[i].data);
    if (push_dtype_ == DT_FLOAT) continue;
    const int64_t n = NumElements(variables_[i].shape);
    narrow_[i].resize(n);
    if (push_dtype_ == DT_HALF) {
      FloatToHalf(grads[i].data, narrow_[i].data(), n);
    } else {
      FloatToBfloat16(grads[i].data, narrow_[i].data(), n);
    }
    base[i] = reinterpret_cast<const char*>(narrow_[i].data());
  }
  // The batches with a selected shard; one with only some of them sends a copy of its request
  // with those (some_reqs_), whole.
  std::vector<size_t> which;
  std::vector<bool> part(batches_.size(), false);
  for (size_t b = 0; b < batches_.size(); ++b) {
    if (tag != nullptr) {
      *push_reqs_[b].mutable_tag() = *tag;
    } else {
      push_reqs_[b].clear_tag();
    }
    const std::vector<Slot>& slots = batches_[b].slots;
    size_t chosen = 0;
    for (size_t k = 0; k < slots.size(); ++k) {
      const auto [i, j] = slots[k];
      if (!selected[i]) continue;
      ++chosen;
      const VariableRef& v = variables_[i];
      const ShardRef& shard = v.shards[j];
      Gradient* g = push_reqs_[b].mutable_gradients(k);
      g->set_read_version(versions_[i][j]);
      g->mutable_gradient()->set_dtype(push_dtype_);
      const int64_t row_bytes = RowSize(v.shape) * elem;
      push_src_[b][k] = {base[i] + shard.row_begin * row_bytes,
                         (shard.row_end - shard.row_begin) * row_bytes};
    }
    if (chosen == 0) continue;
    which.push_back(b);
    if (chosen == slots.size()) continue;
    part[b] = true;
    PushRequest& r = some_reqs_[b];
    r.Clear();
    *r.mutable_sender() = push_reqs_[b].sender();
    if (tag != nullptr) *r.mutable_tag() = *tag;
    some_src_[b].clear();
    for (size_t k = 0; k < slots.size(); ++k) {
      if (!selected[slots[k].var]) continue;
      *r.add_gradients() = push_reqs_[b].gradients(k);
      some_src_[b].push_back(push_src_[b][k]);
    }
  }
  absl::Status s =
      FanOut("Push", /*retry=*/tag != nullptr, which,
             [this, &part](DataChannel* c, const CallOptions& o, size_t b, DoneFn done) {
               if (part[b]) {
                 c->Push(o, some_reqs_[b], some_src_[b], &push_resps_[b], std::move(done));
               } else {
                 c->Push(o, push_reqs_[b], push_src_[b], &push_resps_[b], std::move(done));
               }
             });
  if (s.ok() && stale_dropped != nullptr) {
    *stale_dropped = 0;
    for (size_t b : which) *stale_dropped += push_resps_[b].stale_dropped();
  }
  return s;
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
