// CallThread: calls run one after another in the order they were started; a blocking call on
// an idle thread runs on the caller's thread, and one started while another runs waits for it.
#include <atomic>
#include <filesystem>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "client/call_thread.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(CallThreadTest, StartedCallsRunInOrderOnTheThread) {
  CallThread t;
  std::vector<int> order;
  std::thread::id ran_on;
  std::vector<std::shared_ptr<CallThread::Call>> calls;
  for (int i = 0; i < 5; ++i) {
    calls.push_back(t.Start([&, i] {
      order.push_back(i);
      ran_on = std::this_thread::get_id();
      return i == 3 ? absl::InternalError("three") : absl::OkStatus();
    }));
  }
  for (int i = 0; i < 5; ++i) {
    absl::Status s = calls[i]->Wait(absl::InfiniteFuture());
    EXPECT_EQ(s.ok(), i != 3) << s;
  }
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_NE(ran_on, std::this_thread::get_id());
}

TEST(CallThreadTest, ABlockingCallOnAnIdleThreadRunsHereAndIsDoneOnReturn) {
  CallThread t;
  std::thread::id ran_on;
  std::shared_ptr<CallThread::Call> call = t.RunHereOrStart([&] {
    ran_on = std::this_thread::get_id();
    return absl::NotFoundError("here");
  });
  EXPECT_TRUE(call->done());
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_EQ(call->Wait(absl::Now()).code(), absl::StatusCode::kNotFound);
  // The thread still runs what is started afterwards.
  EXPECT_TRUE(t.Start([] { return absl::OkStatus(); })->Wait(absl::InfiniteFuture()).ok());
}

// The threads of this process, as Linux lists them.
int ThreadsOfThisProcess() {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    (void)e;
    ++n;
  }
  return n;
}

TEST(CallThreadTest, StartsItsThreadWithTheFirstCallQueued) {
  const int before = ThreadsOfThisProcess();
  {
    CallThread unused;  // a session's reader that never reads ahead costs no thread
    CallThread t;
    EXPECT_TRUE(t.RunHereOrStart([] { return absl::OkStatus(); })->done());
    EXPECT_EQ(ThreadsOfThisProcess(), before);
    EXPECT_TRUE(t.Start([] { return absl::OkStatus(); })->Wait(absl::InfiniteFuture()).ok());
    EXPECT_EQ(ThreadsOfThisProcess(), before + 1);
  }
  EXPECT_EQ(ThreadsOfThisProcess(), before);
}

TEST(CallThreadTest, ABlockingCallWaitsBehindARunningCallAndCallsStaySerial) {
  CallThread t;
  absl::Notification running, release;
  std::atomic<int> inside{0}, most{0};
  auto body = [&] {
    most = std::max(most.load(), ++inside);
    --inside;
    return absl::OkStatus();
  };
  std::shared_ptr<CallThread::Call> first = t.Start([&] {
    most = std::max(most.load(), ++inside);
    running.Notify();
    release.WaitForNotification();
    --inside;
    return absl::OkStatus();
  });
  running.WaitForNotification();
  // Busy: queued behind the running call, not run here.
  std::shared_ptr<CallThread::Call> second = t.RunHereOrStart(body);
  EXPECT_FALSE(second->done());
  release.Notify();
  EXPECT_TRUE(second->Wait(absl::InfiniteFuture()).ok());
  EXPECT_TRUE(first->done());
  // A call started while a blocking one runs on the caller's thread waits for it.
  absl::Notification here_running, here_release;
  std::shared_ptr<CallThread::Call> third;
  std::thread caller([&] {
    t.RunHereOrStart([&] {
      most = std::max(most.load(), ++inside);
      here_running.Notify();
      here_release.WaitForNotification();
      --inside;
      return absl::OkStatus();
    });
  });
  here_running.WaitForNotification();
  third = t.Start(body);
  EXPECT_FALSE(third->Wait(absl::Now() + absl::Milliseconds(50)).ok());  // still waiting
  here_release.Notify();
  caller.join();
  EXPECT_TRUE(third->Wait(absl::InfiniteFuture()).ok());
  EXPECT_EQ(most.load(), 1);
}

}  // namespace
}  // namespace pstrain
