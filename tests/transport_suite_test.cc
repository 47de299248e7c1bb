// Every transport passes the same pull, push, sync and ssp behaviour: PsClient over the transport
// named by the test's parameter, against real parameter servers in this process (their gRPC
// service, and the transport's own server where it has one), each value checked against SGD
// computed by hand.
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "client/ps_client.h"
#include "common/rpc.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/ps.h"
#include "ps_testing.h"
#include "transport/transport.h"

namespace pstrain {
namespace {

using ps_testing::Worker;

constexpr double kLr = 0.5;

// A PS as the pstrain command assembles it, serving gRPC on 127.0.0.1, and the transport's own
// server when it has one.
class Ps {
 public:
  Ps(const std::string& transport, const ConfigureRequest* config = nullptr) {
    absl::StatusOr<std::unique_ptr<PsServer>> created =
        PsServer::Create({.task = 0,
                          .name = "ps:0",
                          .transport = transport == "grpc" ? "grpc" : transport,
                          .on_shutdown = nullptr});
    EXPECT_TRUE(created.ok()) << created.status();
    if (!created.ok()) return;
    server_ = *std::move(created);
    ps()->ExpectChief(ps_testing::Chief().incarnation());
    if (config != nullptr) {
      ConfigureResponse resp;
      absl::Status s = ps()->Configure(*config, &resp);
      EXPECT_TRUE(s.ok()) << s;
    }
    int port = 0;
    absl::StatusOr<std::unique_ptr<grpc::Server>> grpc_server =
        StartGrpcServer("127.0.0.1:0", server_->services(), &port);
    EXPECT_TRUE(grpc_server.ok()) << grpc_server.status();
    if (grpc_server.ok()) grpc_server_ = *std::move(grpc_server);
    address_ = "127.0.0.1:" + std::to_string(port);
  }
  ~Ps() {
    if (server_) server_->Stop();
    if (grpc_server_) grpc_server_->Shutdown();
  }
  // Creates variable `name` holding `init`, updated by SGD at kLr.
  void Create(const std::string& name, const Tensor& init) {
    CreateVariablesRequest req = ps_testing::CreateReq(name, init);
    req.mutable_variables(0)->mutable_optimizer()->set_learning_rate(kLr);
    CreateVariablesResponse resp;
    absl::Status s = ps()->CreateVariables(req, &resp);
    EXPECT_TRUE(s.ok()) << s;
  }
  const std::string& address() const { return address_; }
  ParameterServer* ps() { return server_->ps(); }

 private:
  std::unique_ptr<PsServer> server_;
  std::unique_ptr<grpc::Server> grpc_server_;
  std::string address_;
};

class TransportSuite : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { SetTransportOptions({.transport = GetParam()}); }
  void TearDown() override { SetTransportOptions({}); }
};

// value(i): a distinct float per element, so a misplaced row shows.
std::vector<float> Values(int64_t n, float scale, float offset) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = offset + scale * static_cast<float>(i % 1000);
  return v;
}
Tensor TensorOf(std::vector<int64_t> shape, std::vector<float> values) {
  Tensor t(std::move(shape));
  t.values = std::move(values);
  return t;
}
VariableRef OneShard(const std::string& name, std::vector<int64_t> shape) {
  const int64_t rows = shape.empty() ? 1 : shape[0];
  return {name, std::move(shape), {{name, 0, 0, rows}}};
}

TEST_P(TransportSuite, PullsAndPushesApplySgd) {
  Ps ps(GetParam());
  const std::vector<float> init = Values(6, 0.25f, 1.0f);
  ps.Create("w", TensorOf({3, 2}, init));
  ps.Create("b", Tensor({2}, -1.0f));
  PsClient client({ps.address()}, {OneShard("w", {3, 2}), OneShard("b", {2})}, Worker(0),
                  absl::Seconds(60));
  std::vector<const float*> values;
  ASSERT_TRUE(client.Pull(&values).ok());
  EXPECT_EQ(std::vector<float>(values[0], values[0] + 6), init);
  const std::vector<float> g = Values(6, -1.0f, 2.0f);
  ASSERT_TRUE(client.Push({TensorOf({3, 2}, g), Tensor({2}, 4.0f)}).ok());
  ASSERT_TRUE(client.Pull(&values).ok());
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(values[0][i], init[i] - kLr * g[i]) << i;
  EXPECT_FLOAT_EQ(values[1][1], -1.0f - kLr * 4.0f);
  EXPECT_EQ(client.min_version_read(), 1u);
}

// Rows [0, 2) on ps:0 and [2, 5) on ps:1, assembled in place and pushed by rows.
TEST_P(TransportSuite, AShardedVariableOverTwoPs) {
  Ps ps0(GetParam()), ps1(GetParam());
  const std::vector<float> init = Values(15, 1.0f, 0.0f);
  ps0.Create("w/0", TensorOf({2, 3}, std::vector<float>(init.begin(), init.begin() + 6)));
  ps1.Create("w/1", TensorOf({3, 3}, std::vector<float>(init.begin() + 6, init.end())));
  VariableRef w{"w", {5, 3}, {{"w/0", 0, 0, 2}, {"w/1", 1, 2, 5}}};
  PsClient client({ps0.address(), ps1.address()}, {w}, Worker(0), absl::Seconds(60));
  std::vector<const float*> values;
  ASSERT_TRUE(client.Pull(&values).ok());
  EXPECT_EQ(std::vector<float>(values[0], values[0] + 15), init);
  const std::vector<float> g = Values(15, 0.5f, -3.0f);
  ASSERT_TRUE(client.Push({TensorOf({5, 3}, g)}).ok());
  ASSERT_TRUE(client.Pull(&values).ok());
  for (int i = 0; i < 15; ++i) EXPECT_FLOAT_EQ(values[0][i], init[i] - kLr * g[i]) << i;
  EXPECT_EQ(ps_testing::Read(ps1.ps(), "w/1").first, init[6] - kLr * g[6]);
}

// Shards of 256 KB under a 600 KB request limit: several requests per PS, in flight together,
// and one 2 MB shard that travels alone.
TEST_P(TransportSuite, ABigVariableOverManyRequests) {
  Ps ps(GetParam());
  constexpr int64_t kCols = 1024, kRows = 64 * 8;  // 2 MB of floats, 8 shards of 64 rows
  const std::vector<float> init = Values(kRows * kCols, 0.001f, 1.0f);
  VariableRef big{"big", {kRows, kCols}, {}};
  for (int s = 0; s < 8; ++s) {
    const std::string name = "big/" + std::to_string(s);
    big.shards.push_back({name, 0, s * 64, (s + 1) * 64});
    ps.Create(name, TensorOf({64, kCols}, std::vector<float>(init.begin() + s * 64 * kCols,
                                                             init.begin() + (s + 1) * 64 * kCols)));
  }
  const std::vector<float> whole = Values(kRows * kCols, -0.002f, 0.5f);
  ps.Create("whole", TensorOf({kRows, kCols}, whole));
  PsClient client({ps.address()}, {big, OneShard("whole", {kRows, kCols})}, Worker(0),
                  absl::Seconds(60), {.max_tensor_bytes = 600 << 10});
  const std::vector<float> g = Values(kRows * kCols, 0.003f, -1.0f);
  ASSERT_TRUE(client.Push({TensorOf({kRows, kCols}, g), TensorOf({kRows, kCols}, g)}).ok());
  std::vector<const float*> values;
  ASSERT_TRUE(client.Pull(&values).ok());
  int64_t wrong = 0;
  auto off = [](float got, float want) {
    return std::abs(got - want) > 1e-6f * (1 + std::abs(want));
  };
  for (int64_t i = 0; i < kRows * kCols; ++i) {
    wrong += off(values[0][i], init[i] - kLr * g[i]);
    wrong += off(values[1][i], whole[i] - kLr * g[i]);
  }
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(client.max_version_read(), 1u);
}

// Sync, 2 of 3 workers per step: a pull for step 1 waits, the step applies the average of the
// first two gradients, and the third, read at step 0, is dropped as stale.
TEST_P(TransportSuite, SyncAveragesKOfNGradientsPerStep) {
  const ConfigureRequest config =
      ps_testing::Config("sync", 3, 2, 0, 60, {Worker(0), Worker(1), Worker(2)});
  Ps ps(GetParam(), &config);
  ps.Create("w", Tensor({4}, 1.0f));
  std::vector<std::unique_ptr<PsClient>> clients;
  for (int t = 0; t < 3; ++t) {
    clients.push_back(std::make_unique<PsClient>(std::vector<std::string>{ps.address()},
                                                 std::vector<VariableRef>{OneShard("w", {4})},
                                                 Worker(t), absl::Seconds(60)));
    std::vector<const float*> values;
    ASSERT_TRUE(clients[t]->Pull(&values, /*min_version=*/0).ok());
  }
  absl::Status waited;
  std::vector<float> next;
  std::thread step1([&] {
    std::vector<const float*> values;
    waited = clients[0]->Pull(&values, /*min_version=*/1);
    if (waited.ok()) next.assign(values[0], values[0] + 4);
  });
  ASSERT_TRUE(clients[0]->Push({Tensor({4}, 2.0f)}).ok());
  ASSERT_TRUE(clients[1]->Push({Tensor({4}, 6.0f)}).ok());
  step1.join();
  ASSERT_TRUE(waited.ok()) << waited;
  EXPECT_THAT(next, ::testing::Each(1.0f - kLr * (2.0f + 6.0f) / 2));
  int stale = 0;
  ASSERT_TRUE(clients[2]->Push({Tensor({4}, 100.0f)}, &stale).ok());
  EXPECT_EQ(stale, 1);
  EXPECT_EQ(ps_testing::Read(ps.ps(), "w").first, 1.0f - kLr * 4.0f);
}

// SSP with staleness 1: worker 0 at clock 3 waits for worker 1 (clock 1) to reach clock 2, so
// the value it gets holds worker 1's push made meanwhile.
TEST_P(TransportSuite, SspHoldsAWorkerTooFarAhead) {
  const ConfigureRequest config = ps_testing::Config("ssp", 2, 0, 1, 60, {Worker(0), Worker(1)});
  Ps ps(GetParam(), &config);
  ps.Create("w", Tensor({4}, 0.0f));
  auto client = [&](int t) {
    return std::make_unique<PsClient>(std::vector<std::string>{ps.address()},
                                      std::vector<VariableRef>{OneShard("w", {4})}, Worker(t),
                                      absl::Seconds(60));
  };
  std::unique_ptr<PsClient> ahead = client(0), slow = client(1);
  std::vector<const float*> values;
  ASSERT_TRUE(slow->Pull(&values, 0, /*clock=*/1).ok());
  absl::Status held;
  float got = -1;
  std::thread puller([&] {
    std::vector<const float*> v;
    held = ahead->Pull(&v, 0, /*clock=*/3);
    if (held.ok()) got = v[0][0];
  });
  ASSERT_TRUE(
      ps_testing::Eventually([&] { return ps_testing::Stats(ps.ps()).pulls_waited() == 1; }));
  ASSERT_TRUE(slow->Push({Tensor({4}, 3.0f)}).ok());
  ASSERT_TRUE(slow->Pull(&values, 0, /*clock=*/2).ok());
  puller.join();
  ASSERT_TRUE(held.ok()) << held;
  EXPECT_EQ(got, -kLr * 3.0f);
  EXPECT_EQ(ps_testing::Stats(ps.ps()).max_clock_gap(), 1);
}

// Every transport of src/transport.
INSTANTIATE_TEST_SUITE_P(Transports, TransportSuite, ::testing::Values("grpc", "tcp", "ucx"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace pstrain
