// Channels to peers that are slow to answer: a connection attempt gets gRPC's default 20 s to
// complete its handshake, not the 100 ms of the quick first reconnects.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/rpc.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing.h"
#include "worker.grpc.pb.h"

namespace pstrain {
namespace {

int ListenOnLoopback(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = testing::Loopback();
  socklen_t len = sizeof(a);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  EXPECT_EQ(listen(fd, 16), 0);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

// A TCP proxy to 127.0.0.1:`target` that holds every new connection for `delay` before it
// passes bytes on, as a peer that is slow to answer under load does.
class SlowProxy {
 public:
  SlowProxy(int target, absl::Duration delay) : target_(target), delay_(delay) {
    listen_fd_ = ListenOnLoopback(&port_);
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }
  ~SlowProxy() {
    stop_ = true;
    accept_thread_.join();
    for (std::thread& t : pumps_) t.join();
    close(listen_fd_);
  }
  int port() const { return port_; }

 private:
  void AcceptLoop() {
    while (!stop_) {
      pollfd p = {listen_fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      const int client = accept(listen_fd_, nullptr, nullptr);
      if (client >= 0) pumps_.emplace_back([this, client] { Pump(client); });
    }
  }

  void Pump(int client) {
    const absl::Time start = absl::Now();
    while (!stop_ && absl::Now() - start < delay_) absl::SleepFor(absl::Milliseconds(10));
    const int server = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = testing::Loopback(target_);
    if (connect(server, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
      pollfd fds[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
      char buf[16384];
      bool open = true;
      while (!stop_ && open) {
        if (poll(fds, 2, 50) <= 0) continue;
        for (int k = 0; k < 2 && open; ++k) {
          if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
          const ssize_t n = read(fds[k].fd, buf, sizeof(buf));
          open = n > 0 && write(fds[1 - k].fd, buf, n) == n;
        }
      }
    }
    close(server);
    close(client);
  }

  const int target_;
  const absl::Duration delay_;
  int listen_fd_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread accept_thread_;
  std::vector<std::thread> pumps_;  // touched by the accept thread only, until it is joined
};

// A real gRPC server (any service: the handshake is what is slow) behind a proxy that delays
// each connection by 1.5 s, longer than the channel's largest reconnect backoff (1 s).
TEST(ChannelTest, ConnectsToAPeerSlowerThanTheReconnectBackoff) {
  int server_port = 0;
  close(ListenOnLoopback(&server_port));
  WorkerService::CallbackService service;
  absl::StatusOr<std::unique_ptr<grpc::Server>> server =
      StartGrpcServer(absl::StrCat("127.0.0.1:", server_port), {&service});
  ASSERT_TRUE(server.ok()) << server.status();
  SlowProxy proxy(server_port, absl::Milliseconds(1500));
  std::shared_ptr<grpc::Channel> channel = MakeChannel(absl::StrCat("127.0.0.1:", proxy.port()));
  EXPECT_TRUE(channel->WaitForConnected(absl::ToChronoTime(absl::Now() + absl::Seconds(15))))
      << "state " << channel->GetState(false);
  (*server)->Shutdown(absl::ToChronoTime(absl::Now()));
}

// A refusal is final: registering with a chief that refuses this task must not wait out the
// connect timeout.
TEST(RetryTest, DoesNotRetryARefusal) {
  int attempts = 0;
  absl::Status s = RetryUntil(absl::Seconds(30), "the chief", [&] {
    ++attempts;
    return absl::FailedPreconditionError("worker:0 is already registered");
  });
  EXPECT_EQ(attempts, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("already registered"));
}

}  // namespace
}  // namespace pstrain
