// Internal to src/client: the connections to every PS task and the one way requests are sent to
// them, all in flight at once (PsClient and TableClient both send through it).
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/rpc.h"
#include "ps.grpc.pb.h"

namespace pstrain {

// Runs calls 0..n-1 all at once and waits for every one: start(i, done) starts call i, whose
// outcome done(absl::Status) receives exactly once, from any thread. With `retry`, the calls that
// failed with UNAVAILABLE are started again with backoff (50 ms doubling to 1 s) while that
// ends before `deadline`; without it none is started twice. Returns the first error, or
// Cancelled once `canceller` (if not null) was cancelled.
template <typename Start>
absl::Status FanOutCalls(const char* what, size_t n, bool retry, absl::Time deadline,
                         CallCanceller* canceller, Start start);

// Not thread-safe: one per client object.
class PsPeers {
 public:
  // One channel per address; `timeout` is the deadline of every FanOut.
  PsPeers(const std::vector<std::string>& addresses, absl::Duration timeout)
      : addresses_(addresses), timeout_(timeout) {
    for (const std::string& a : addresses_) {
      stubs_.push_back(ParameterServerService::NewStub(MakeChannel(a)));
    }
  }

  int size() const { return static_cast<int>(stubs_.size()); }
  const std::string& address(int t) const { return addresses_[t]; }
  // "ps:1 127.0.0.1:2222", as errors name PS t.
  std::string PeerName(int t) const { return absl::StrCat(TaskName("ps", t), " ", addresses_[t]); }
  absl::Duration timeout() const { return timeout_; }
  CallCanceller* canceller() const { return canceller_; }
  // Calls in flight or started later end with Cancelled once `canceller` is cancelled (not
  // owned; it must outlive this object).
  void set_canceller(CallCanceller* canceller) { canceller_ = canceller; }

  // Sends reqs[i] to PS targets[i] (reqs and resps may be longer than targets), all at once,
  // and waits for every answer. `call(async_stub, ctx, req, resp, done)` starts one call. Each
  // call waits for a PS that is still connecting. With `retry`, the requests that failed with
  // UNAVAILABLE are sent again with backoff until the deadline; without it nothing is sent
  // twice. The first error is returned, naming `what` and the PS ("Pull at ps:1 h:p: ...").
  template <typename Req, typename Resp, typename Call>
  absl::Status FanOut(const char* what, const std::vector<int>& targets, std::vector<Req>& reqs,
                      std::vector<Resp>& resps, bool retry, Call call);

  // One request per PS, reqs[t] to PS t (resized, with `sender` set), retried as above.
  template <typename Req, typename Resp, typename Call>
  absl::Status ToEveryPs(const char* what, const Sender& sender, std::vector<Req>& reqs,
                         std::vector<Resp>& resps, Call call);

 private:
  const std::vector<std::string> addresses_;
  const absl::Duration timeout_;
  CallCanceller* canceller_ = nullptr;
  std::vector<std::unique_ptr<ParameterServerService::Stub>> stubs_;
};

template <typename Start>
absl::Status FanOutCalls(const char* what, size_t n, bool retry, absl::Time deadline,
                         CallCanceller* canceller, Start start) {
  // Shared with the callbacks: one may still be unlocking it when this function returns.
  struct State {
    absl::Mutex mu;
    size_t pending ABSL_GUARDED_BY(mu) = 0;
    std::vector<absl::Status> results ABSL_GUARDED_BY(mu);
  };
  const absl::Time start_time = absl::Now();
  std::vector<size_t> remaining(n);
  for (size_t i = 0; i < n; ++i) remaining[i] = i;
  absl::Duration backoff = absl::Milliseconds(50);
  for (int attempt = 1;; ++attempt) {
    auto state = std::make_shared<State>();
    {
      absl::MutexLock lock(&state->mu);
      state->pending = remaining.size();
      state->results.assign(remaining.size(), absl::OkStatus());
    }
    for (size_t j = 0; j < remaining.size(); ++j) {
      start(remaining[j], [state, j](absl::Status s) {
        absl::MutexLock lock(&state->mu);
        state->results[j] = std::move(s);
        --state->pending;
      });
    }
    std::vector<absl::Status> results;
    {
      absl::MutexLock lock(&state->mu);
      state->mu.Await(absl::Condition(
          +[](State* st) ABSL_NO_THREAD_SAFETY_ANALYSIS { return st->pending == 0; }, state.get()));
      results = std::move(state->results);
    }
    std::vector<size_t> again;
    absl::Status first;
    for (size_t j = 0; j < remaining.size(); ++j) {
      if (results[j].ok()) continue;
      if (!retry || !absl::IsUnavailable(results[j])) return results[j];
      if (first.ok()) first = results[j];
      again.push_back(remaining[j]);
    }
    if (again.empty()) return absl::OkStatus();
    if (canceller != nullptr && canceller->cancelled()) {
      return absl::CancelledError(absl::StrCat(what, " cancelled: this process is stopping"));
    }
    if (absl::Now() + backoff >= deadline) {
      return absl::UnavailableError(absl::StrCat(
          first.message(), " (", attempt, " attempts in ",
          absl::FormatDuration(absl::Trunc(absl::Now() - start_time, absl::Milliseconds(1))), ")"));
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(1));
    remaining = std::move(again);
  }
}

template <typename Req, typename Resp, typename Call>
absl::Status PsPeers::FanOut(const char* what, const std::vector<int>& targets,
                             std::vector<Req>& reqs, std::vector<Resp>& resps, bool retry,
                             Call call) {
  // The contexts of the latest attempt of each call; a call's callback has run before it is
  // started again, so its old context may then go.
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts(targets.size());
  auto forget = [&](size_t i) {
    if (contexts[i] != nullptr && canceller_ != nullptr) canceller_->Remove(contexts[i].get());
  };
  const absl::Time deadline = absl::Now() + timeout_;
  absl::Status s =
      FanOutCalls(what, targets.size(), retry, deadline, canceller_, [&](size_t i, auto done) {
        const int t = targets[i];
        forget(i);
        contexts[i] = std::make_unique<grpc::ClientContext>();
        contexts[i]->set_deadline(absl::ToChronoTime(deadline));
        // A PS still connecting (or reconnecting) is waited for, not failed at once.
        contexts[i]->set_wait_for_ready(true);
        if (canceller_ != nullptr) canceller_->Add(contexts[i].get());
        call(stubs_[t]->async(), contexts[i].get(), &reqs[i], &resps[i],
             [done = std::move(done), what, peer = PeerName(t)](grpc::Status s) {
               done(FromGrpcStatus(s, what, peer));
             });
      });
  for (size_t i = 0; i < contexts.size(); ++i) forget(i);
  return s;
}

template <typename Req, typename Resp, typename Call>
absl::Status PsPeers::ToEveryPs(const char* what, const Sender& sender, std::vector<Req>& reqs,
                                std::vector<Resp>& resps, Call call) {
  std::vector<int> targets(stubs_.size());
  for (size_t t = 0; t < targets.size(); ++t) targets[t] = static_cast<int>(t);
  reqs.resize(targets.size());
  resps.resize(targets.size());
  for (Req& r : reqs) *r.mutable_sender() = sender;
  return FanOut(what, targets, reqs, resps, /*retry=*/true, call);
}

}  // namespace pstrain
