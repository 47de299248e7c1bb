#include "client/call_thread.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace pstrain {

absl::Status CallThread::Call::Wait(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  if (!mu_.AwaitWithDeadline(absl::Condition(&done_), deadline)) {
    return absl::DeadlineExceededError(
        absl::StrCat("the call in flight has not returned by the deadline (",
                     absl::FormatTime(deadline), "); it keeps running"));
  }
  return status_;
}

bool CallThread::Call::done() const {
  absl::MutexLock lock(&mu_);
  return done_;
}

CallThread::CallThread() : thread_([this] { Loop(); }) {}

CallThread::~CallThread() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

std::shared_ptr<CallThread::Call> CallThread::Start(std::function<absl::Status()> fn) {
  auto call = std::make_shared<Call>();
  call->fn_ = std::move(fn);
  absl::MutexLock lock(&mu_);
  queue_.push_back(call);
  return call;
}

void CallThread::Loop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    mu_.Await(absl::Condition(this, &CallThread::Ready));
    if (queue_.empty()) return;  // stopped, with nothing left to run
    std::shared_ptr<Call> call = std::move(queue_.front());
    queue_.pop_front();
    mu_.Unlock();
    absl::Status s = call->fn_();
    call->fn_ = nullptr;
    {
      absl::MutexLock done(&call->mu_);
      call->status_ = std::move(s);
      call->done_ = true;
    }
    mu_.Lock();
  }
}

}  // namespace pstrain
