#include "worker/ps_client.h"

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/rpc.h"

namespace pstrain {

PsClient::PsClient(const std::vector<std::string>& ps_addresses, std::vector<Variable> variables,
                   Sender sender, absl::Duration timeout)
    : addresses_(ps_addresses),
      variables_(std::move(variables)),
      sender_(std::move(sender)),
      timeout_(timeout),
      by_ps_(ps_addresses.size()),
      pull_reqs_(ps_addresses.size()),
      pull_resps_(ps_addresses.size()),
      push_reqs_(ps_addresses.size()),
      push_resps_(ps_addresses.size()),
      versions_(variables_.size(), 0) {
  for (const std::string& a : addresses_) {
    stubs_.push_back(ParameterServerService::NewStub(MakeChannel(a)));
  }
  for (size_t i = 0; i < variables_.size(); ++i) by_ps_[variables_[i].ps_task].push_back(i);
  for (size_t t = 0; t < addresses_.size(); ++t) {
    *pull_reqs_[t].mutable_sender() = sender_;
    *push_reqs_[t].mutable_sender() = sender_;
    for (size_t i : by_ps_[t]) {
      pull_reqs_[t].add_names(variables_[i].name);
      push_reqs_[t].add_gradients()->set_name(variables_[i].name);
    }
  }
}

template <typename Req, typename Resp, typename Call>
absl::Status PsClient::FanOut(const char* what, std::vector<Req>& reqs, std::vector<Resp>& resps,
                              Call call) {
  // Shared with the callbacks: one may still be unlocking it when this function returns.
  struct State {
    absl::Mutex mu;
    size_t pending ABSL_GUARDED_BY(mu) = 0;
    absl::Status first_error ABSL_GUARDED_BY(mu);
  };
  auto state = std::make_shared<State>();
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts(stubs_.size());
  for (size_t t = 0; t < stubs_.size(); ++t) {
    if (by_ps_[t].empty()) continue;
    contexts[t] = ContextWithTimeout(timeout_);
    {
      absl::MutexLock lock(&state->mu);
      ++state->pending;
    }
    std::string peer = absl::StrCat(TaskName("ps", t), " ", addresses_[t]);
    call(stubs_[t]->async(), contexts[t].get(), &reqs[t], &resps[t],
         [state, what, peer = std::move(peer)](grpc::Status s) {
           absl::MutexLock lock(&state->mu);
           if (!s.ok() && state->first_error.ok())
             state->first_error = FromGrpcStatus(s, what, peer);
           --state->pending;
         });
  }
  absl::MutexLock lock(&state->mu);
  state->mu.Await(absl::Condition(
      +[](State* st) ABSL_NO_THREAD_SAFETY_ANALYSIS { return st->pending == 0; }, state.get()));
  return state->first_error;
}

absl::Status PsClient::Pull(std::vector<const float*>* values) {
  absl::Status s = FanOut("Pull", pull_reqs_, pull_resps_,
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
      const size_t i = by_ps_[t][k];
      absl::StatusOr<const float*> v =
          TensorData(resp.values(k).value(), variables_[i].shape, variables_[i].name);
      if (!v.ok()) return v.status();
      (*values)[i] = *v;
      versions_[i] = resp.values(k).version();
    }
  }
  return absl::OkStatus();
}

absl::Status PsClient::Push(const std::vector<Tensor>& grads) {
  for (size_t t = 0; t < stubs_.size(); ++t) {
    for (size_t k = 0; k < by_ps_[t].size(); ++k) {
      const size_t i = by_ps_[t][k];
      Gradient* g = push_reqs_[t].mutable_gradients(k);
      g->set_read_version(versions_[i]);
      EncodeTensor(grads[i], g->mutable_gradient());
    }
  }
  return FanOut("Push", push_reqs_, push_resps_,
                [](auto* async, auto* ctx, auto* req, auto* resp, auto done) {
                  async->Push(ctx, req, resp, std::move(done));
                });
}

}  // namespace pstrain
