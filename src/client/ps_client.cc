#include "common/tensor_codec.h"
#include "client/ps_client.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/rpc.h"

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
                   Sender sender, absl::Duration timeout)
    : addresses_(ps_addresses),
      variables_(std::move(variables)),
      sender_(std::move(sender)),
      timeout_(timeout),
      by_ps_(ps_addresses.size()),
      assembled_(variables_.size()),
      versions_(variables_.size()),
      pull_reqs_(ps_addresses.size()),
      pull_resps_(ps_addresses.size()),
      push_reqs_(ps_addresses.size()),
      push_resps_(ps_addresses.size()) {
  for (const std::string& a : addresses_) {
    stubs_.push_back(ParameterServerService::NewStub(MakeChannel(a)));
  }
  for (size_t t = 0; t < addresses_.size(); ++t) {
    *pull_reqs_[t].mutable_sender() = sender_;
    *push_reqs_[t].mutable_sender() = sender_;
  }
  for (size_t i = 0; i < variables_.size(); ++i) {
    const VariableRef& v = variables_[i];
    versions_[i].assign(v.shards.size(), 0);
    if (v.shards.size() > 1) assembled_[i].resize(NumElements(v.shape));
    for (size_t k = 0; k < v.shards.size(); ++k) {
      const ShardRef& s = v.shards[k];
      by_ps_[s.ps_task].push_back({i, k});
      pull_reqs_[s.ps_task].add_names(s.name);
      push_reqs_[s.ps_task].add_gradients()->set_name(s.name);
    }
  }
}

template <typename Req, typename Resp, typename Call>
absl::Status PsClient::FanOut(const char* what, std::vector<Req>& reqs, std::vector<Resp>& resps,
                              bool all_ps, Call call) {
  // Shared with the callbacks: one may still be unlocking it when this function returns.
  struct State {
    absl::Mutex mu;
    size_t pending ABSL_GUARDED_BY(mu) = 0;
    absl::Status first_error ABSL_GUARDED_BY(mu);
  };
  auto state = std::make_shared<State>();
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts(stubs_.size());
  for (size_t t = 0; t < stubs_.size(); ++t) {
    if (by_ps_[t].empty() && !all_ps) continue;
    contexts[t] = ContextWithTimeout(timeout_);
    {
      absl::MutexLock lock(&state->mu);
      ++state->pending;
    }
    std::string peer = absl::StrCat(TaskName("ps", t), " ", addresses_[t]);
    call(stubs_[t]->async(), contexts[t].get(), &reqs[t], &resps[t],
         [state, what, peer = std::move(peer)](grpc::Status s) {
           absl::MutexLock lock(&state->mu);
           if (!s.ok() && state->first_error.ok()) {
             state->first_error = FromGrpcStatus(s, what, peer);
           }
           --state->pending;
         });
  }
  absl::MutexLock lock(&state->mu);
  state->mu.Await(absl::Condition(
      +[](State* st) ABSL_NO_THREAD_SAFETY_ANALYSIS { return st->pending == 0; }, state.get()));
  return state->first_error;
}

absl::Status PsClient::Pull(std::vector<const float*>* values, uint64_t min_version, int64_t clock,
                            bool same_step) {
  while (true) {
    absl::Status s = PullOnce(values, min_version, clock);
    if (!s.ok() || !same_step || min_version_read() == max_version_read()) return s;
    min_version = max_version_read();
  }
}

absl::Status PsClient::PullOnce(std::vector<const float*>* values, uint64_t min_version,
                                int64_t clock) {
  for (PullRequest& r : pull_reqs_) {
    r.set_min_version(min_version);
    r.set_clock(clock);
  }
  absl::Status s = FanOut("Pull", pull_reqs_, pull_resps_, false,
                          [](auto* async, auto* ctx, auto* req, auto* resp, auto done) {
                            async->Pull(ctx, req, resp, std::move(done));
                          });
  if (!s.ok()) return s;
  values->assign(variables_.size(), nullptr);
  for (size_t t = 0; t < stubs_.size(); ++t) {
    const PullResponse& resp = pull_resps_[t];
    if (resp.values_size() != static_cast<int>(by_ps_[t].size())) {
      return absl::InternalError(absl::StrCat("ps:", t, " returned ", resp.values_size(),
                                              " values for ", by_ps_[t].size(), " variables"));
    }
    for (size_t k = 0; k < by_ps_[t].size(); ++k) {
      const auto [i, j] = by_ps_[t][k];
      const VariableRef& v = variables_[i];
      const ShardRef& shard = v.shards[j];
      absl::StatusOr<const float*> data =
          TensorData(resp.values(k).value(), ShardShape(v, shard), shard.name);
      if (!data.ok()) return data.status();
      versions_[i][j] = resp.values(k).version();
      if (v.shards.size() == 1) {
        (*values)[i] = *data;  // no copy: points into the response
      } else {
        const int64_t row = RowSize(v.shape);
        std::memcpy(assembled_[i].data() + shard.row_begin * row, *data,
                    (shard.row_end - shard.row_begin) * row * sizeof(float));
        (*values)[i] = assembled_[i].data();
      }
    }
  }
  return absl::OkStatus();
}

absl::Status PsClient::Push(const std::vector<Tensor>& grads, int* stale_dropped) {
  if (grads.size() != variables_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("push of ", grads.size(), " gradients for ", variables_.size(), " variables"));
  }
  for (size_t i = 0; i < variables_.size(); ++i) {
    if (grads[i].shape != variables_[i].shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gradient for ", variables_[i].name, " has shape ", ShapeString(grads[i].shape),
          ", the variable ", ShapeString(variables_[i].shape)));
    }
  }
  for (size_t t = 0; t < stubs_.size(); ++t) {
    for (size_t k = 0; k < by_ps_[t].size(); ++k) {
      const auto [i, j] = by_ps_[t][k];
      const VariableRef& v = variables_[i];
      const ShardRef& shard = v.shards[j];
      Gradient* g = push_reqs_[t].mutable_gradients(k);
      g->set_read_version(versions_[i][j]);
      EncodeTensor(ShardShape(v, shard), grads[i].data() + shard.row_begin * RowSize(v.shape),
                   g->mutable_gradient());
    }
  }
  absl::Status s = FanOut("Push", push_reqs_, push_resps_, false,
                          [](auto* async, auto* ctx, auto* req, auto* resp, auto done) {
                            async->Push(ctx, req, resp, std::move(done));
                          });
  if (s.ok() && stale_dropped != nullptr) {
    *stale_dropped = 0;
    for (const PushResponse& r : push_resps_) *stale_dropped += r.stale_dropped();
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

absl::Status PsClient::Leave() {
  std::vector<LeaveRequest> reqs(stubs_.size());
  std::vector<LeaveResponse> resps(stubs_.size());
  for (LeaveRequest& r : reqs) *r.mutable_sender() = sender_;
  return FanOut("Leave", reqs, resps, true,
                [](auto* async, auto* ctx, auto* req, auto* resp, auto done) {
                  async->Leave(ctx, req, resp, std::move(done));
                });
}

absl::StatusOr<std::vector<StatsResponse>> PsClient::Stats() {
  std::vector<StatsRequest> reqs(stubs_.size());
  std::vector<StatsResponse> resps(stubs_.size());
  for (StatsRequest& r : reqs) *r.mutable_sender() = sender_;
  absl::Status s = FanOut("Stats", reqs, resps, true,
                          [](auto* async, auto* ctx, auto* req, auto* resp, auto done) {
                            async->Stats(ctx, req, resp, std::move(done));
                          });
  if (!s.ok()) return s;
  return resps;
}

}  // namespace pstrain
