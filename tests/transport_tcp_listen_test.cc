// Where the TCP data plane listens: on the one address it is given (a local job's PS on its
// loopback address, as its gRPC server), or on every interface; an address it cannot have is
// named.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/ps.h"
#include "transport/tcp.h"
#include "transport/tcp_socket.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

class TcpListen : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<ParameterServer>> ps = ParameterServer::Create({.task = 0});
    ASSERT_TRUE(ps.ok()) << ps.status();
    ps_ = *std::move(ps);
    handler_ = MakeDataHandler(ps_.get());
  }
  // Whether a connection to host:port is accepted (127.0.0.0/8 is this machine's loopback, so
  // 127.0.0.2 reaches a listener on every interface but not one on 127.0.0.1 alone).
  static absl::Status Reach(const std::string& host, int port) {
    return TcpSocket::Connect(host, port, absl::Now() + absl::Seconds(10)).status();
  }

  std::unique_ptr<ParameterServer> ps_;
  std::unique_ptr<DataHandler> handler_;
};

TEST_F(TcpListen, OnALoopbackHostOnlyThatAddressIsServed) {
  absl::StatusOr<std::unique_ptr<TcpServer>> server = TcpServer::Start(handler_.get(), "127.0.0.1");
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE(Reach("127.0.0.1", (*server)->port()).ok());
  const absl::Status other = Reach("127.0.0.2", (*server)->port());
  EXPECT_EQ(other.code(), absl::StatusCode::kUnavailable) << other;
  EXPECT_THAT(other.message(), HasSubstr("refused"));
  (*server)->Stop();
}

TEST_F(TcpListen, WithNoHostEveryInterfaceIsServed) {
  absl::StatusOr<std::unique_ptr<TcpServer>> server = TcpServer::Start(handler_.get());
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE(Reach("127.0.0.1", (*server)->port()).ok());
  EXPECT_TRUE(Reach("127.0.0.2", (*server)->port()).ok());
  (*server)->Stop();
}

TEST_F(TcpListen, AnAddressThisMachineDoesNotHaveIsNamed) {
  // 192.0.2.0/24 is reserved for documentation: no interface has it.
  absl::StatusOr<std::unique_ptr<TcpServer>> server = TcpServer::Start(handler_.get(), "192.0.2.1");
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(server.status().message(), HasSubstr("cannot bind to 192.0.2.1"));
}

}  // namespace
}  // namespace pstrain
