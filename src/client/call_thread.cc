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

CallThread::CallThread() = default;

CallThread::~CallThread() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<CallThread::Call> CallThread::Start(std::function<absl::Status()> fn) {
  absl::MutexLock lock(&mu_);
  return Queue(std::move(fn));
}

std::shared_ptr<CallThread::Call> CallThread::Queue(std::function<absl::Status()> fn) {
  auto call = std::make_shared<Call>();
  call->fn_ = std::move(fn);
  queue_.push_back(call);
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });  // the first call queued
  return call;
}

std::shared_ptr<CallThread::Call> CallThread::RunHereOrStart(std::function<absl::Status()> fn) {
  {
    absl::MutexLock lock(&mu_);
    if (busy_ || !queue_.empty()) return Queue(std::move(fn));
    busy_ = true;
  }
  auto call = std::make_shared<Call>();
  Finish(call.get(), fn());
  absl::MutexLock lock(&mu_);
  busy_ = false;
  return call;
}

void CallThread::Finish(Call* call, absl::Status s) {
  absl::MutexLock done(&call->mu_);
  call->status_ = std::move(s);
  call->done_ = true;
}

void CallThread::Loop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    mu_.Await(absl::Condition(this, &CallThread::Ready));
    if (queue_.empty()) return;  // stopped, with nothing left to run
    if (busy_) {                 // stopping while a call runs on the caller's thread
      mu_.Await(absl::Condition(this, &CallThread::Idle));
      continue;
    }
    std::shared_ptr<Call> call = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    mu_.Unlock();
    absl::Status s = call->fn_();
    call->fn_ = nullptr;
    Finish(call.get(), std::move(s));
    mu_.Lock();
    busy_ = false;
  }
}

}  // namespace pstrain
