// The UCX transport against a real ParameterServer in this process: a UcxServer over its
// DataHandler and a gRPC server on 127.0.0.1 answering DataPlane with the UCX worker's address,
// reached through MakeUcxDataChannel (over shared memory). Values are checked against SGD
// computed by hand, and large tensors bit for bit.
#include <atomic>
#include <random>
#include <thread>

#include "common/security.h"
#include "gmock/gmock.h"
#include "transport/transport.h"
#include "transport/ucx_worker.h"
#include "transport_ucx_testing.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;
using namespace ucx_testing;  // NOLINT: the helpers of this test

TEST(UcxTransport, PushAndPullApplySgd) {
  LocalPs ps;
  ASSERT_TRUE(ps.status.ok()) << ps.status;
  ps.Create("w", Tensor(std::vector<int64_t>{4}, 1.0f), 0.5);
  ps.Create("b", Tensor(std::vector<int64_t>{2}, -2.0f), 0.25);
  absl::StatusOr<std::unique_ptr<DataChannel>> ch = MakeUcxDataChannel(ps.address);
  ASSERT_TRUE(ch.ok()) << ch.status();
  EXPECT_STREQ((*ch)->name(), "ucx");

  const std::vector<float> gw = {1.0f, -2.0f, 0.5f, 4.0f}, gb = {8.0f, -4.0f};
  PushResponse pushed;
  absl::Status s = PushFloats(ch->get(), {"w", "b"}, {&gw, &gb}, &pushed);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(pushed.versions_size(), 2);
  EXPECT_EQ(pushed.versions(0), 1u);
  EXPECT_EQ(pushed.versions(1), 1u);

  std::vector<float> w(4, -99.0f), b(2, -99.0f);
  PullResponse pulled;
  s = PullFloats(ch->get(), {"w", "b"}, {&w, &b}, &pulled);
  ASSERT_TRUE(s.ok()) << s;
  // w - 0.5 * g and b - 0.25 * g
  EXPECT_EQ(w, (std::vector<float>{0.5f, 2.0f, 0.75f, -1.0f}));
  EXPECT_EQ(b, (std::vector<float>{-4.0f, -1.0f}));
  ASSERT_EQ(pulled.values_size(), 2);
  EXPECT_EQ(pulled.values(0).name(), "w");
  EXPECT_EQ(pulled.values(0).version(), 1u);
  EXPECT_TRUE(pulled.values(0).value().data().empty());
  EXPECT_EQ(ps.Value("w"), w);

  // A dest of the wrong size names the variable.
  std::vector<float> small(3);
  s = PullFloats(ch->get(), {"w"}, {&small}, &pulled);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("\"w\""));
  // An error from the PS comes back with its code and the peer named.
  std::vector<float> none(1);
  s = PullFloats(ch->get(), {"missing"}, {&none}, &pulled);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_THAT(s.message(), HasSubstr(ps.address));
}

// Finite, nonzero, varied floats (0 - g is then exactly -g).
std::vector<float> Pattern(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(0.001f, 1000.0f);
  std::vector<float> v(n);
  for (float& x : v) x = (gen() & 1) ? dist(gen) : -dist(gen);
  return v;
}

TEST(UcxTransport, SixtyFourMegabytesRoundTripBitExactly) {
  LocalPs ps;
  ASSERT_TRUE(ps.status.ok()) << ps.status;
  const int64_t n = (int64_t{64} << 20) / sizeof(float);
  Tensor init(std::vector<int64_t>{n}, 0.0f);
  const std::vector<float> start = Pattern(n, 7);
  init.values = start;
  ps.Create("big", init, 1.0);
  absl::StatusOr<std::unique_ptr<DataChannel>> ch = MakeUcxDataChannel(ps.address);
  ASSERT_TRUE(ch.ok()) << ch.status();

  std::vector<float> got(n);
  PullResponse pulled;
  absl::Status s = PullFloats(ch->get(), {"big"}, {&got}, &pulled);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(std::memcmp(got.data(), start.data(), n * sizeof(float)), 0);

  // Reset to zero through the PS (push the start value with lr 1), then push g: w = -g exactly.
  PushResponse pushed;
  s = PushFloats(ch->get(), {"big"}, {&start}, &pushed);
  ASSERT_TRUE(s.ok()) << s;
  const std::vector<float> g = Pattern(n, 11);
  s = PushFloats(ch->get(), {"big"}, {&g}, &pushed);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(pushed.versions(0), 2u);
  s = PullFloats(ch->get(), {"big"}, {&got}, &pulled);
  ASSERT_TRUE(s.ok()) << s;
  std::vector<float> want(n);
  for (int64_t i = 0; i < n; ++i) want[i] = -g[i];
  EXPECT_EQ(std::memcmp(got.data(), want.data(), n * sizeof(float)), 0);
}

TEST(UcxTransport, OverlappingCallsFromManyThreadsAreAllApplied) {
  LocalPs ps;
  ASSERT_TRUE(ps.status.ok()) << ps.status;
  ps.Create("w", Tensor(std::vector<int64_t>{1000}, 0.0f), 1.0);
  absl::StatusOr<std::unique_ptr<DataChannel>> ch = MakeUcxDataChannel(ps.address);
  ASSERT_TRUE(ch.ok()) << ch.status();
  constexpr int kThreads = 4, kPushes = 25;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::vector<float> g(1000, -float(t + 1));  // each push adds t + 1
      for (int i = 0; i < kPushes; ++i) {
        PushResponse r;
        std::vector<float> v(1000);
        PullResponse p;
        if (!PushFloats(ch->get(), {"w"}, {&g}, &r).ok()) ++failures;
        if (!PullFloats(ch->get(), {"w"}, {&v}, &p).ok()) ++failures;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures, 0);
  // 25 * (1 + 2 + 3 + 4)
  EXPECT_EQ(ps.Value("w"), std::vector<float>(1000, 250.0f));
}

TEST(UcxTransport, AWrongOrMissingTokenIsRefusedAndNothingApplied) {
  LocalPs ps;
  ASSERT_TRUE(ps.status.ok()) << ps.status;
  ps.Create("w", Tensor(std::vector<int64_t>{2}, 1.0f), 1.0);
  // A channel takes the process's token when it is made; the PS checks the one it has when
  // the request arrives. Both ends share this process, so the token changes between them.
  SetSecurity({});
  absl::StatusOr<std::unique_ptr<DataChannel>> without = MakeUcxDataChannel(ps.address);
  SetSecurity({.token = "wrong"});
  absl::StatusOr<std::unique_ptr<DataChannel>> wrong = MakeUcxDataChannel(ps.address);
  SetSecurity({.token = "secret"});
  absl::StatusOr<std::unique_ptr<DataChannel>> right = MakeUcxDataChannel(ps.address);
  ASSERT_TRUE(without.ok() && wrong.ok() && right.ok());
  const std::vector<float> g = {1.0f, 1.0f};
  for (DataChannel* ch : {without->get(), wrong->get()}) {
    PushResponse r;
    absl::Status s = PushFloats(ch, {"w"}, {&g}, &r);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
    std::vector<float> v(2, 5.0f);
    PullResponse p;
    s = PullFloats(ch, {"w"}, {&v}, &p);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
    EXPECT_EQ(v, std::vector<float>(2, 5.0f));
  }
  EXPECT_EQ(ps.Value("w"), std::vector<float>(2, 1.0f));
  PushResponse r;
  absl::Status s = PushFloats(right->get(), {"w"}, {&g}, &r);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(ps.Value("w"), std::vector<float>(2, 0.0f));
  SetSecurity({});
}

TEST(UcxTransport, APsWithoutUcxIsAFailedPrecondition) {
  LocalPs ps("grpc");
  ASSERT_TRUE(ps.status.ok()) << ps.status;
  absl::StatusOr<std::unique_ptr<DataChannel>> ch = MakeUcxDataChannel(ps.address);
  EXPECT_EQ(ch.status().code(), absl::StatusCode::kFailedPrecondition) << ch.status();
  EXPECT_THAT(ch.status().message(), HasSubstr(ps.address));
}

// What a PS on another host announces: a worker address, and a host that is not this one.
DataPlaneResponse OnAnotherHost(const DataPlaneResponse& served) {
  std::string host, worker;
  EXPECT_TRUE(DecodeUcxAddress(served.ucx_address(), &host, &worker).ok());
  DataPlaneResponse info;
  info.set_ucx_address(EncodeUcxAddress("00000000-0000-0000-0000-000000000000", worker));
  return info;
}

TEST(UcxTransport, APsOnAnotherHostIsRefusedNamingWhy) {
  LocalPs ps;
  ASSERT_TRUE(ps.status.ok()) << ps.status;
  ps.ps->SetDataPlane(OnAnotherHost(ps.served));
  absl::StatusOr<std::unique_ptr<DataChannel>> ch = MakeUcxDataChannel(ps.address);
  EXPECT_EQ(ch.status().code(), absl::StatusCode::kFailedPrecondition) << ch.status();
  EXPECT_THAT(ch.status().message(), HasSubstr(ps.address));
  EXPECT_THAT(ch.status().message(), HasSubstr("only same-host traffic"));
}

TEST(UcxTransport, AStoppedUcxServerIsUnavailable) {
  LocalPs ps("grpc");
  ASSERT_TRUE(ps.status.ok()) << ps.status;
  std::unique_ptr<DataHandler> handler = MakeDataHandler(ps.ps);
  absl::StatusOr<std::unique_ptr<UcxServer>> gone = UcxServer::Start(handler.get());
  ASSERT_TRUE(gone.ok()) << gone.status();
  ps.ps->SetDataPlane((*gone)->data_plane());
  gone->reset();  // its worker is destroyed: the address reaches nobody
  absl::StatusOr<std::unique_ptr<DataChannel>> ch = MakeUcxDataChannel(ps.address);
  EXPECT_EQ(ch.status().code(), absl::StatusCode::kUnavailable) << ch.status();
  EXPECT_THAT(ch.status().message(), HasSubstr(ps.address));
}

// The rule of docs/transport_ucx.md on the worker's side: "auto" takes gRPC where the PS serves
// no UCX, is on another host or announces what an older PS did (a listener); "ucx" stops with
// the reason.
TEST(UcxTransport, AutoFallsBackToGrpcWhereUcxIsMissingOrOnAnotherHost) {
  LocalPs ps;
  ASSERT_TRUE(ps.status.ok()) << ps.status;
  ps.ps->SetDataPlane(DataPlaneResponse());
  absl::StatusOr<std::unique_ptr<DataChannel>> ch = MakeDataChannel("auto", ps.address);
  ASSERT_TRUE(ch.ok()) << ch.status();
  EXPECT_STREQ((*ch)->name(), "grpc");
  EXPECT_EQ(MakeDataChannel("ucx", ps.address).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ps.ps->SetDataPlane(OnAnotherHost(ps.served));
  ch = MakeDataChannel("auto", ps.address);
  ASSERT_TRUE(ch.ok()) << ch.status();
  EXPECT_STREQ((*ch)->name(), "grpc");
  EXPECT_EQ(MakeDataChannel("ucx", ps.address).status().code(),
            absl::StatusCode::kFailedPrecondition);
  DataPlaneResponse listener;  // what an older PS announced: a UCX listener's host:port
  listener.set_ucx_address("127.0.0.1:1");
  ps.ps->SetDataPlane(listener);
  ch = MakeDataChannel("auto", ps.address);
  ASSERT_TRUE(ch.ok()) << ch.status();
  EXPECT_STREQ((*ch)->name(), "grpc");
  absl::Status s = MakeDataChannel("ucx", ps.address).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("127.0.0.1:1"));
  ps.ps->SetDataPlane(ps.served);
  ch = MakeDataChannel("auto", ps.address);
  ASSERT_TRUE(ch.ok()) << ch.status();
  EXPECT_STREQ((*ch)->name(), "ucx");
}

TEST(UcxTransport, ACallPastItsDeadlineEndsAndLeavesItsBuffersAlone) {
  LocalPs ps("ucx", "sync");
  ASSERT_TRUE(ps.status.ok()) << ps.status;
  ps.Create("w", Tensor(std::vector<int64_t>{3}, 1.0f), 1.0);
  absl::StatusOr<std::unique_ptr<DataChannel>> ch = MakeUcxDataChannel(ps.address);
  ASSERT_TRUE(ch.ok()) << ch.status();
  // Sync mode: a pull for version 5 waits for pushes that never come.
  std::vector<float> v(3, 7.0f);
  PullResponse p;
  absl::Status s = PullFloats(ch->get(), {"w"}, {&v}, &p, Within(absl::Milliseconds(300)), 5);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  // The PS answers the abandoned pull when it stops waiting; the answer is dropped.
  ps.ps->Stop();
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(v, std::vector<float>(3, 7.0f));
  // A cancelled call ends with Cancelled.
  CallCanceller canceller;
  canceller.Cancel();
  s = PullFloats(ch->get(), {"w"}, {&v}, &p,
                 {.deadline = absl::Now() + absl::Seconds(30), .canceller = &canceller});
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_EQ(v, std::vector<float>(3, 7.0f));
}

}  // namespace
}  // namespace pstrain
