// The client API's PullAsync / PushAsync and ClientOptions.push_dtype against a real chief
// (--model external) and a real PS process, the client in this process: with SGD at learning
// rate 1 a variable ends at minus the sum of the gradients applied, which the tests compute
// exactly (small dyadic numbers), so every push must be applied once and only once.
#include <cmath>
#include <cstdlib>
#include <vector>

#include "client/client.h"
#include "common/security.h"
#include "external_cluster.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;
using namespace pstrain::testing;

constexpr int kSize = 4;
const absl::Duration kTimeout = absl::Seconds(60);

std::unique_ptr<Client> Connect(const ExternalCluster& cluster,
                                const std::string& push_dtype = "float32") {
  absl::StatusOr<std::unique_ptr<Client>> c = Client::Connect(
      {.chief = cluster.chief(), .task = 0, .timeout = kTimeout, .push_dtype = push_dtype});
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

int CreateW(Client* c) {
  absl::StatusOr<int> w =
      c->CreateVariable({.name = "w",
                         .shape = {kSize},
                         .optimizer = OptimizerOptions{.name = "sgd", .learning_rate = 1.0}});
  EXPECT_TRUE(w.ok()) << w.status();
  return w.ok() ? *w : -1;
}

// Step t's gradient: (t + 1) * (j + 1) / 8 at index j, exact in float.
std::vector<Tensor> Grad(int t) {
  Tensor g({kSize});
  for (int j = 0; j < kSize; ++j) g.data()[j] = (t + 1) * (j + 1) / 8.0f;
  return {g};
}

// The pull of step t+1 in flight while step t's push goes out: every push is applied (async),
// the values in hand stay as they were while the next pull lands, and the calls that may not
// overlap are refused with FailedPrecondition.
TEST(ClientAsyncTest, PullOfTheNextStepOverlapsThePush) {
  ExternalCluster cluster("client_async_overlap", 1, 1);
  cluster.Start({"--mode", "async"});
  std::unique_ptr<Client> c = Connect(cluster);
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(CreateW(c.get()), 0);
  std::vector<const float*> values, next;
  ASSERT_TRUE(c->Pull(&values).ok());
  constexpr int kSteps = 30;
  for (int t = 0; t < kSteps; ++t) {
    const std::vector<float> in_hand(values[0], values[0] + kSize);
    PendingCall pull = c->PullAsync(&next);
    EXPECT_THAT(c->PullAsync(&next).Wait(kTimeout).message(), HasSubstr("another pull"));
    EXPECT_TRUE(
        absl::IsFailedPrecondition(c->CreateVariable({.name = "v", .shape = {1}}).status()));
    const std::vector<Tensor> g = Grad(t);
    PendingCall push = c->PushAsync({TensorView{g[0].shape, g[0].data()}}, /*examples=*/1);
    EXPECT_THAT(c->PushAsync({TensorView{g[0].shape, g[0].data()}}).Wait(kTimeout).message(),
                HasSubstr("another push"));
    ASSERT_TRUE(push.Wait(kTimeout).ok());
    // Not yet waited for, the pull wrote other buffers than those of the values in hand.
    EXPECT_EQ(std::vector<float>(values[0], values[0] + kSize), in_hand) << "step " << t;
    ASSERT_TRUE(pull.Wait(kTimeout).ok());
    EXPECT_TRUE(pull.Wait(kTimeout).ok());  // the same answer again
    values = next;
  }
  EXPECT_EQ(c->pushes(), kSteps);
  ASSERT_TRUE(c->Pull(&values).ok());
  for (int j = 0; j < kSize; ++j) {
    // -sum over t of (t + 1) * (j + 1) / 8
    EXPECT_EQ(values[0][j], -(kSteps * (kSteps + 1) / 2) * (j + 1) / 8.0f) << j;
  }
  EXPECT_TRUE(c->Done().ok());
  EXPECT_EQ(cluster.Finish().exit_code, 0);
}

// Sync: a pull reads the step the last push completes, so it may not start while a push is in
// flight; the blocking calls (the async ones waited for) step as before, each push tagged with
// the step it was computed at (else the PS would drop it as stale and the sum would miss it).
TEST(ClientAsyncTest, SyncRefusesAPullDuringAPushAndStepsExactly) {
  ExternalCluster cluster("client_async_sync", 1, 1);
  cluster.Start({"--mode", "sync"});
  std::unique_ptr<Client> c = Connect(cluster);
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(CreateW(c.get()), 0);
  std::vector<const float*> values;
  constexpr int kSteps = 10;
  for (int t = 0; t < kSteps; ++t) {
    ASSERT_TRUE(c->Pull(&values).ok());
    EXPECT_EQ(c->global_step(), t);
    const std::vector<Tensor> g = Grad(t);
    PendingCall push = c->PushAsync({TensorView{g[0].shape, g[0].data()}});
    absl::Status early = c->PullAsync(&values).Wait(kTimeout);
    EXPECT_TRUE(absl::IsFailedPrecondition(early)) << early;
    EXPECT_THAT(early.message(), HasSubstr("sync mode"));
    ASSERT_TRUE(push.Wait(kTimeout).ok());
  }
  ASSERT_TRUE(c->Pull(&values).ok());
  EXPECT_EQ(c->global_step(), kSteps);
  for (int j = 0; j < kSize; ++j) {
    EXPECT_EQ(values[0][j], -(kSteps * (kSteps + 1) / 2) * (j + 1) / 8.0f) << j;
  }
  EXPECT_TRUE(c->Done().ok());
  EXPECT_EQ(cluster.Finish().exit_code, 0);
}

// A 16-bit push applies the gradient rounded to float16 or bfloat16 (to nearest, ties to even),
// kept in float32 on the PS. The gradients sit on rounding boundaries, so a float32 push, or one
// rounded another way, ends elsewhere.
TEST(ClientAsyncTest, PushDtypeRoundsTheGradientOnTheWire) {
  struct Case {
    const char* dtype;
    std::vector<float> grad, applied;  // pushed, and as the PS must apply it
  };
  const float e = std::ldexp(1.0f, -12);
  const std::vector<Case> cases = {
      // float16 keeps 10 mantissa bits: 1 + 2^-11 ties to 1; 1 + 3*2^-12 rounds up to
      // 1 + 2^-10; 65519 rounds to 65504; 2^-25 (half the smallest subnormal) ties to 0.
      {"float16",
       {1 + 2 * e, 1 + 3 * e, 65519.0f, std::ldexp(1.0f, -25)},
       {1, 1 + 4 * e, 65504.0f, 0}},
      // bfloat16 keeps 7: 1 + 2^-8 ties to 1; 1 + 3*2^-9 rounds to 1 + 2^-7; 3 + 3*2^-7 ties
      // up to 3 + 2^-5 (its last kept bit is odd); 2^-100 stays exact.
      {"bfloat16",
       {1 + 16 * e, 1 + 24 * e, 3 + 96 * e, std::ldexp(1.0f, -100)},
       {1, 1 + 32 * e, 3 + 128 * e, std::ldexp(1.0f, -100)}},
  };
  for (const Case& k : cases) {
    ExternalCluster cluster(std::string("client_async_dtype_") + k.dtype, 1, 1);
    cluster.Start({"--mode", "async"});
    std::unique_ptr<Client> c = Connect(cluster, k.dtype);
    ASSERT_NE(c, nullptr);
    ASSERT_EQ(CreateW(c.get()), 0);
    std::vector<const float*> values;
    ASSERT_TRUE(c->Pull(&values).ok());
    Tensor g({kSize});
    for (int j = 0; j < kSize; ++j) g.data()[j] = k.grad[j];
    ASSERT_TRUE(c->Push({g}).ok());
    ASSERT_TRUE(c->Pull(&values).ok());
    for (int j = 0; j < kSize; ++j) {
      EXPECT_EQ(values[0][j], -k.applied[j])
          << k.dtype << " index " << j << ": pushed " << k.grad[j] << ", the PS applied "
          << -values[0][j]
          << (values[0][j] == -k.grad[j] ? " (the float32 gradient: it did not "
                                           "travel as 16-bit)"
                                         : "");
    }
    EXPECT_TRUE(c->Done().ok());
    EXPECT_EQ(cluster.Finish().exit_code, 0);
  }
}

TEST(ClientAsyncTest, UnknownPushDtypeIsRefusedAtConnect) {
  absl::StatusOr<std::unique_ptr<Client>> c =
      Client::Connect({.chief = "127.0.0.1:1", .task = 0, .push_dtype = "float8"});
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(c.status()));
  EXPECT_THAT(c.status().message(), HasSubstr("push_dtype"));
  EXPECT_THAT(c.status().message(), HasSubstr("float8"));
}

TEST(ClientAsyncTest, UnknownTransportAndTcpOrUcxUnderTlsAreRefusedAtConnect) {
  auto refused = [](const ClientOptions& o) {
    absl::StatusOr<std::unique_ptr<Client>> c = Client::Connect(o);
    EXPECT_FALSE(c.ok());
    EXPECT_TRUE(absl::IsInvalidArgument(c.status())) << c.status();
    return std::string(c.status().message());
  };
  const ClientOptions o{.chief = "127.0.0.1:1", .task = 0, .timeout = absl::Seconds(1)};
  ClientOptions rdma = o;
  rdma.transport = "rdma";
  EXPECT_THAT(refused(rdma), HasSubstr("client options: transport: unknown transport \"rdma\""));
  setenv("PSTRAIN_TRANSPORT", "rdma", 1);
  EXPECT_THAT(refused(o), HasSubstr("PSTRAIN_TRANSPORT: unknown transport \"rdma\""));
  unsetenv("PSTRAIN_TRANSPORT");
  // TCP and UCX traffic is not encrypted: with TLS on, "tcp" and "ucx" are refused (and "auto"
  // means gRPC).
  SetSecurity(Security{.cert = "cert", .key = "key"});
  ClientOptions ucx = o;
  ucx.transport = "ucx";
  EXPECT_THAT(refused(ucx), HasSubstr("ucx cannot be used with TLS"));
  ClientOptions tcp = o;
  tcp.transport = "tcp";
  EXPECT_THAT(refused(tcp), HasSubstr("tcp cannot be used with TLS"));
  SetSecurity(Security{});
}

}  // namespace
}  // namespace pstrain
