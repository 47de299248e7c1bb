// The dense variables' pulls and pushes of a Client, blocking or in flight (PendingCall).
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/client_impl.h"

namespace pstrain {

struct PendingCall::State {
  std::optional<ParameterSession::Pending> call;  // none when the call was refused at the start
  // Applies the call's status to the client (on the thread that waits), once.
  std::function<absl::Status(absl::Status)> finish;
  bool finished = false;
  absl::Status result;  // once finished: finish's answer, or the refusal
};

PendingCall::PendingCall(std::shared_ptr<State> state) : state_(std::move(state)) {}
PendingCall::PendingCall(PendingCall&&) noexcept = default;
PendingCall& PendingCall::operator=(PendingCall&& other) noexcept {
  if (this != &other) {
    Finish();
    state_ = std::move(other.state_);
  }
  return *this;
}
PendingCall::~PendingCall() { Finish(); }

// The call ends by its own deadline, the client's timeout on each request it makes.
void PendingCall::Finish() {
  if (state_ != nullptr) (void)Wait(absl::InfiniteFuture());
}

absl::Status PendingCall::Wait(absl::Time deadline) {
  if (state_ == nullptr) return absl::FailedPreconditionError("Wait on a moved-from PendingCall");
  State& st = *state_;
  if (st.finished) return st.result;
  absl::Status s = st.call->Wait(deadline);
  if (!st.call->done()) return s;
  st.result = st.finish(std::move(s));
  st.finish = nullptr;
  st.finished = true;
  return st.result;
}

bool PendingCall::done() const {
  return state_ == nullptr || state_->finished || state_->call->done();
}

void Client::Impl::RebuildPsClient() {
  if (session_ == nullptr) {
    SessionOptions o;
    o.ps_addresses = ps_addresses_;
    o.sender = sender_;
    o.timeout = options_.timeout;
    o.push_dtype = push_dtype_;
    o.transport = options_.transport;  // resolved by Connect
    session_ = std::make_unique<ParameterSession>(std::move(o), variables_, tables_);
  } else {
    session_->set_sender(sender_);
    session_->SetVariables(variables_);
  }
  pulled_ = false;
}

std::vector<std::string> Client::Impl::data_plane() const { return session_->data_plane(); }

absl::Status Client::Impl::ValuesInHand(std::vector<const float*>* values) const {
  if (!pulled_ || session_->values().size() != variables_.size()) {
    return absl::AbortedError(
        "the job rolled back to its checkpoint before this worker pulled: take the next task");
  }
  *values = session_->values();
  return absl::OkStatus();
}

absl::Status Client::Impl::CheckIdle(const char* what) const {
  if (pull_in_flight_ == nullptr && push_in_flight_ == nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(what, " while a PullAsync or PushAsync is in flight: Wait for it first"));
}

// Pull and Push are their asynchronous forms, waited for until they return (a call ends by its
// own deadline, the client's timeout on each request): one code path. Blocking, a call runs on
// the caller's thread when its client's thread is idle, with no hand-off.
absl::Status Client::Impl::Pull(std::vector<const float*>* values) {
  return StartPull(values, /*blocking=*/true).Wait(absl::InfiniteFuture());
}

absl::Status Client::Impl::Push(const std::vector<TensorView>& grads, int64_t examples,
                                std::optional<double> loss) {
  return StartPush(grads, examples, loss, /*blocking=*/true).Wait(absl::InfiniteFuture());
}

PendingCall Client::Impl::PullAsync(std::vector<const float*>* values) {
  return StartPull(values, /*blocking=*/false);
}

PendingCall Client::Impl::PushAsync(const std::vector<TensorView>& grads, int64_t examples,
                                    std::optional<double> loss) {
  return StartPush(grads, examples, loss, /*blocking=*/false);
}

PendingCall Client::Impl::StartPull(std::vector<const float*>* values, bool blocking) {
  auto st = std::make_shared<PendingCall::State>();
  auto refuse = [&](absl::Status s) {
    st->result = std::move(s);
    st->finished = true;
    return PendingCall(st);
  };
  if (absl::Status s = CheckUsable(); !s.ok()) return refuse(s);
  if (variables_.empty()) {
    return refuse(absl::FailedPreconditionError("Pull before any CreateVariable: nothing to pull"));
  }
  if (pull_in_flight_ != nullptr) {
    return refuse(absl::FailedPreconditionError(
        "PullAsync while another pull is in flight: Wait for it first"));
  }
  if (absl::Status s = AdoptOutsideTask(); !s.ok()) return refuse(s);
  if (abandoned_) return refuse(ValuesInHand(values));
  const bool sync = mode_ == "sync";
  if (sync && push_in_flight_ != nullptr) {
    return refuse(absl::FailedPreconditionError(
        "PullAsync in sync mode while a PushAsync is in flight: the pull reads the step that "
        "push completes, so Wait for the push first"));
  }
  // Sync: after a barrier the step after this worker's last push may never come (the others
  // may have stopped pushing), so read the step that is there, one step on every PS. Ssp keeps
  // its clock: only workers still training hold it back; a push in flight counts.
  const uint64_t min_version = sync && !after_barrier_ ? next_min_version_ : 0;
  const int64_t clock = mode_ == "ssp" ? pushes_ + (push_in_flight_ != nullptr ? 1 : 0) : 0;
  // A blocking pull with no push in flight reads through the connections pushes go through:
  // one set of connections and buffers, warm at every step (the values in hand are valid only
  // until this pull). A pull in flight, or one beside a push in flight, reads ahead through the
  // others: the values in hand and the versions their push is tagged with stay as they are.
  const bool ahead = !blocking || push_in_flight_ != nullptr;
  ParameterSession::Pending call = session_->StartPull({min_version, clock, sync}, ahead);
  st->call = call;
  st->finish = [this, call, values, clock, sync](absl::Status s) {
    pull_in_flight_ = nullptr;
    if (!s.ok()) {
      if (absl::Status a = AbandonIfRolledBack(std::move(s)); !a.ok()) return a;
      // Outside a task the new generation's values are read at once (the first read of a
      // generation does not wait for a step).
      if (abandoned_in_task_) return ValuesInHand(values);
      if (absl::Status a = AdoptGeneration(); !a.ok()) return a;
      std::vector<const float*> read;
      if (absl::Status a = session_->Pull({0, clock, sync}, &read); !a.ok()) return a;
    } else {
      session_->FinishPull(call);
    }
    pulled_ = true;
    after_barrier_ = false;
    pushed_ = Pushed::kNone;
    global_step_ = static_cast<int64_t>(session_->dense_step());
    *values = session_->values();
    return absl::OkStatus();
  };
  pull_in_flight_ = st.get();
  return PendingCall(st);
}

PendingCall Client::Impl::StartPush(const std::vector<TensorView>& grads, int64_t examples,
                                    std::optional<double> loss, bool blocking) {
  auto st = std::make_shared<PendingCall::State>();
  auto refuse = [&](absl::Status s) {
    st->result = std::move(s);
    st->finished = true;
    return PendingCall(st);
  };
  if (absl::Status s = CheckUsable(); !s.ok()) return refuse(s);
  if (!pulled_) {
    return refuse(absl::FailedPreconditionError(
        "Push without a Pull since the last CreateVariable: pull the variables first"));
  }
  if (push_in_flight_ != nullptr) {
    return refuse(absl::FailedPreconditionError(
        "PushAsync while another push is in flight: Wait for it first"));
  }
  if (abandoned_) return refuse(absl::OkStatus());  // dropped: the job rolled back
  absl::StatusOr<std::optional<PushTag>> tag = TagFor(Pushed::kDense);
  if (!tag.ok()) return refuse(tag.status());
  // Through the connections whose last pull read the values these gradients come from: it
  // tags them with those versions. A pull in flight runs on the others.
  ParameterSession::Pending call = session_->StartPush(grads, *std::move(tag), blocking);
  st->call = call;
  st->finish = [this, call, examples, loss](absl::Status s) {
    push_in_flight_ = nullptr;
    if (!s.ok()) return AbandonIfRolledBack(std::move(s));
    // Sync: the step this push contributed to is the one read; the next pull waits for the next.
    next_min_version_ = call.min_version() + 1;
    stale_dropped_ += call.stale_dropped();
    return AfterPush(Pushed::kDense, examples, loss);
  };
  push_in_flight_ = st.get();
  return PendingCall(st);
}

}  // namespace pstrain
