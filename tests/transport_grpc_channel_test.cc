// The gRPC DataChannel: a push's bytes are protobuf's serialisation of the same request (with the
// gradients' data as slices over the caller's memory), a pull's values land in the caller's
// buffers, a response that lies about its sizes is refused without writing past them, and the
// deadline and the canceller end calls; against a fake server and a real PS, over real gRPC.
#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/ps_client.h"
#include "common/half.h"
#include "gmock/gmock.h"
#include "grpc_channel_testing.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "ps_testing.h"
#include "transport/grpc_data_channel.h"

namespace pstrain {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::string Flatten(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(b.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices)
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

grpc::ByteBuffer BufferOf(const std::string& bytes) {
  grpc::Slice s(bytes);
  return grpc::ByteBuffer(&s, 1);
}

// Answers every call with `answer` (or holds it until the client gives up) and records requests.
class FakeServer final : public grpc::CallbackGenericService {
 public:
  FakeServer() {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    b.RegisterCallbackGenericService(this);
    server_ = b.BuildAndStart();
  }
  ~FakeServer() override { server_->Shutdown(); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  void Answer(std::string bytes, bool hold = false) {
    absl::MutexLock lock(&mu_);
    answer_ = std::move(bytes);
    hold_ = hold;
  }
  // The calls received: method and request bytes.
  std::vector<std::pair<std::string, std::string>> Received() {
    absl::MutexLock lock(&mu_);
    return received_;
  }
  absl::Notification got_call;

 private:
  class Reactor final : public grpc::ServerGenericBidiReactor {
   public:
    Reactor(FakeServer* f, grpc::GenericCallbackServerContext* ctx) : f_(f), ctx_(ctx) {
      StartRead(&req_);
    }
    void OnReadDone(bool ok) override {
      if (!ok) {
        if (!finished_.exchange(true))
          Finish(grpc::Status(grpc::StatusCode::INTERNAL, "no request"));
        return;
      }
      bool hold;
      {
        absl::MutexLock lock(&f_->mu_);
        f_->received_.emplace_back(ctx_->method(), Flatten(req_));
        resp_ = BufferOf(f_->answer_);
        hold = f_->hold_;
      }
      if (!f_->got_call.HasBeenNotified()) f_->got_call.Notify();
      if (!hold && !finished_.exchange(true)) {
        StartWriteAndFinish(&resp_, grpc::WriteOptions(), grpc::Status::OK);
      }
    }
    void OnCancel() override {
      if (!finished_.exchange(true)) Finish(grpc::Status::CANCELLED);
    }
    void OnDone() override { delete this; }

   private:
    FakeServer* f_;
    grpc::GenericCallbackServerContext* ctx_;
    grpc::ByteBuffer req_, resp_;
    std::atomic<bool> finished_ = false;  // Finish may be called once
  };
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override {
    return new Reactor(this, ctx);
  }

  absl::Mutex mu_;
  std::string answer_ ABSL_GUARDED_BY(mu_);
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::pair<std::string, std::string>> received_ ABSL_GUARDED_BY(mu_);
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

// Runs one call of `channel` and waits for it.
absl::Status Wait(const std::function<void(DoneFn)>& call) {
  absl::Notification done;
  absl::Status status;
  call([&](absl::Status s) {
    status = std::move(s);
    done.Notify();
  });
  EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  return status;
}

std::vector<float> Iota(int64_t n, float from) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = from + i;
  return v;
}

// A full push (sender, tag, gradients with and without data or read_version, a rank-2 shape, a
// gradient big enough for a three-byte length) and its head without the data.
struct PushCase {
  std::vector<std::vector<float>> data = {Iota(6, 1), {}, Iota(40000, -7)};
  PushRequest full, head;
  std::vector<ConstBytes> grads;
  PushCase() {
    *full.mutable_sender() = ps_testing::Worker(3);
    full.mutable_tag()->set_batch(9);
    const std::vector<std::vector<int64_t>> shapes = {{2, 3}, {0}, {40000}};
    for (size_t i = 0; i < data.size(); ++i) {
      Gradient* g = full.add_gradients();
      g->set_name("var" + std::to_string(i));
      g->set_read_version(i == 1 ? 0 : 41 + i);
      EncodeTensor(shapes[i], data[i].data(), g->mutable_gradient());
      grads.push_back({data[i].data(), static_cast<int64_t>(data[i].size() * sizeof(float))});
    }
    head = full;
    for (Gradient& g : *head.mutable_gradients()) g.mutable_gradient()->clear_data();
  }
};

TEST(GrpcChannelTest, APushIsProtobufsSerialisationWithTheDataNotCopied) {
  PushCase c;
  std::atomic<int> unrefs = 0;
  {
    grpc::ByteBuffer b;
    ASSERT_TRUE(
        EncodePushRequest(
            c.head, c.grads, +[](void* n) { ++*static_cast<std::atomic<int>*>(n); }, &unrefs, &b)
            .ok());
    EXPECT_EQ(Flatten(b), c.full.SerializeAsString());
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(b.Dump(&slices).ok());
    int over_callers = 0;
    for (const grpc::Slice& s : slices) {
      over_callers += s.begin() == reinterpret_cast<const uint8_t*>(c.data[0].data()) ||
                      s.begin() == reinterpret_cast<const uint8_t*>(c.data[2].data());
    }
    EXPECT_EQ(over_callers, 2);
    EXPECT_EQ(unrefs, 0);
  }
  EXPECT_EQ(unrefs, 2);  // one per non-empty gradient, once every reference is gone

  // A head carrying data, or buffers that do not match its gradients, makes no slice.
  grpc::ByteBuffer b;
  EXPECT_EQ(EncodePushRequest(c.full, c.grads, nullptr, nullptr, &b).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodePushRequest(c.head, {c.grads[0]}, nullptr, nullptr, &b).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(GrpcChannelTest, APushOnTheWireIsTheSameBytes) {
  FakeServer server;
  server.Answer(PushResponse().SerializeAsString());
  PushCase c;
  std::unique_ptr<DataChannel> channel = MakeGrpcDataChannel(server.address());
  PushResponse resp;
  ASSERT_TRUE(
      Wait([&](DoneFn done) { channel->Push({}, c.head, c.grads, &resp, std::move(done)); }).ok());
  const auto received = server.Received();
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].first, "/pstrain.ParameterServerService/Push");
  EXPECT_EQ(received[0].second, c.full.SerializeAsString());
}

// A response with values "a" ([2, 2]) and "b" ([3]).
PullResponse TwoValues() {
  PullResponse r;
  VariableValue* a = r.add_values();
  a->set_name("a");
  a->set_version(5);
  EncodeTensor({2, 2}, std::vector<float>{1, 2, 3, 4}.data(), a->mutable_value());
  VariableValue* b = r.add_values();
  b->set_name("b");
  b->set_version(6);
  EncodeTensor({3}, std::vector<float>{-1, -2, -3}.data(), b->mutable_value());
  return r;
}

TEST(GrpcChannelTest, APullLandsInTheCallersBuffers) {
  FakeServer server;
  server.Answer(TwoValues().SerializeAsString());
  std::unique_ptr<DataChannel> channel = MakeGrpcDataChannel(server.address());
  std::vector<float> a(4, 0), b(3, 0);
  PullRequest req;
  req.add_names("a");
  req.add_names("b");
  PullResponse resp;
  ASSERT_TRUE(Wait([&](DoneFn done) {
                channel->Pull({}, req, {{a.data(), 16}, {b.data(), 12}}, &resp, std::move(done));
              }).ok());
  EXPECT_EQ(a, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(b, (std::vector<float>{-1, -2, -3}));
  ASSERT_EQ(resp.values_size(), 2);
  EXPECT_EQ(resp.values(1).name(), "b");
  EXPECT_EQ(resp.values(1).version(), 6u);
  EXPECT_EQ(resp.values(0).value().shape_size(), 2);
  EXPECT_TRUE(resp.values(0).value().data().empty());
  PullRequest sent;
  ASSERT_TRUE(sent.ParseFromString(server.Received()[0].second));
  EXPECT_EQ(sent.names_size(), 2);
}

// Decoded straight from bytes: what a lying or truncated response does to buffers with guards.
TEST(GrpcChannelTest, ALyingResponseIsRefusedWithoutWritingPastTheBuffers) {
  auto decode = [](const std::string& bytes, int64_t a_floats) {
    std::vector<float> mem(4 + 3 + 2, 99.0f);  // a, b, and one guard after each
    grpc::ByteBuffer raw = BufferOf(bytes);
    PullResponse resp;
    absl::Status s = DecodePullResponse(
        &raw, {{mem.data(), a_floats * 4}, {mem.data() + a_floats + 1, 12}}, &resp);
    EXPECT_EQ(mem[a_floats], 99.0f);
    EXPECT_EQ(mem[a_floats + 4], 99.0f);
    return s;
  };
  const std::string good = TwoValues().SerializeAsString();
  EXPECT_TRUE(decode(good, 4).ok());
  // The buffer is smaller than the data the PS sends.
  absl::Status s = decode(good, 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("\"a\""), HasSubstr("16 bytes"), HasSubstr("12")));
  // The shape says 4 floats, the data holds 2.
  PullResponse lie = TwoValues();
  lie.mutable_values(0)->mutable_value()->mutable_data()->resize(8);
  EXPECT_EQ(decode(lie.SerializeAsString(), 4).code(), absl::StatusCode::kInvalidArgument);
  // The data fits but the shape does not.
  lie = TwoValues();
  lie.mutable_values(1)->mutable_value()->set_shape(0, 4);
  EXPECT_THAT(decode(lie.SerializeAsString(), 4).message(), HasSubstr("\"b\""));
  // One value too many, or cut short.
  lie = TwoValues();
  *lie.add_values() = lie.values(1);
  EXPECT_EQ(decode(lie.SerializeAsString(), 4).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(decode(good.substr(0, good.size() - 5), 4).code(), absl::StatusCode::kDataLoss);
  lie = TwoValues();
  lie.mutable_values(0)->mutable_value()->set_dtype(DT_HALF);
  EXPECT_EQ(decode(lie.SerializeAsString(), 4).code(), absl::StatusCode::kInvalidArgument);
}

TEST(GrpcChannelTest, ALyingPsIsNamed) {
  FakeServer server;
  PullResponse lie = TwoValues();
  lie.mutable_values(1)->mutable_value()->mutable_data()->resize(400);
  server.Answer(lie.SerializeAsString());
  std::unique_ptr<DataChannel> channel = MakeGrpcDataChannel(server.address());
  std::vector<float> mem(8, 99.0f);
  PullResponse resp;
  const absl::Status s = Wait([&](DoneFn done) {
    channel->Pull({}, PullRequest(), {{mem.data(), 16}, {mem.data() + 4, 12}}, &resp,
                  std::move(done));
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("Pull at " + server.address()), HasSubstr("\"b\""),
                                 HasSubstr("400 bytes")));
  EXPECT_EQ(mem[7], 99.0f);
}

TEST(GrpcChannelTest, TheDeadlineEndsACallThatGetsNoAnswer) {
  FakeServer server;
  server.Answer("", /*hold=*/true);
  std::unique_ptr<DataChannel> channel = MakeGrpcDataChannel(server.address());
  CallOptions options;
  options.deadline = absl::Now() + absl::Milliseconds(300);
  std::vector<float> a(4);
  PullResponse resp;
  const absl::Status s = Wait([&](DoneFn done) {
    channel->Pull(options, PullRequest(), {{a.data(), 16}}, &resp, std::move(done));
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(s.message(), HasSubstr("Pull at " + server.address()));
}

TEST(GrpcChannelTest, TheCancellerEndsACallInFlight) {
  FakeServer server;
  server.Answer("", /*hold=*/true);
  std::unique_ptr<DataChannel> channel = MakeGrpcDataChannel(server.address());
  CallCanceller canceller;
  CallOptions options;
  options.canceller = &canceller;
  PushCase c;
  PushResponse resp;
  const absl::Status s = Wait([&](DoneFn done) {
    channel->Push(options, c.head, c.grads, &resp, std::move(done));
    ASSERT_TRUE(server.got_call.WaitForNotificationWithTimeout(absl::Seconds(60)));
    canceller.Cancel();
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(s.message(), HasSubstr("Push at " + server.address()));
}

// Against a real PS: what was pushed is applied (SGD, rate 0.5) and pulled back.
TEST(GrpcChannelTest, PushesAndPullsAgainstARealPs) {
  ps_testing::ServedVariable served = ps_testing::ServeVariable("w", Tensor({2, 3}, 1.0f), 0.5);
  DataChannel* channel = served.channel.get();
  const PushRequest head = ps_testing::PushHead("w", {2, 3});
  const std::vector<float> grad = Iota(6, 0);  // 0 1 2 3 4 5
  PushResponse pushed;
  ASSERT_TRUE(Wait([&](DoneFn done) {
                channel->Push({}, head, {{grad.data(), 24}}, &pushed, std::move(done));
              }).ok());
  EXPECT_EQ(pushed.versions(0), 1u);

  const PullRequest req = ps_testing::PullOf("w");
  std::vector<float> w(6);
  PullResponse resp;
  ASSERT_TRUE(Wait([&](DoneFn done) {
                channel->Pull({}, req, {{w.data(), 24}}, &resp, std::move(done));
              }).ok());
  EXPECT_EQ(w, (std::vector<float>{1, 0.5, 0, -0.5, -1, -1.5}));
  EXPECT_EQ(resp.values(0).version(), 1u);
  // A destination of another size is refused, naming the variable.
  std::vector<float> small(5);
  const absl::Status s = Wait([&](DoneFn done) {
    channel->Pull({}, req, {{small.data(), 20}}, &resp, std::move(done));
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("\"w\""));
  served.ps->Stop();
  served.server->Shutdown();
}

// PsClient with a 16-bit push dtype sends the converted values (bit patterns known by hand).
TEST(GrpcChannelTest, SixteenBitPushesCarryTheConvertedBits) {
  FakeServer server;
  server.Answer(PushResponse().SerializeAsString());
  const std::vector<float> grad = {1.0f, -2.0f, 0.5f, 65504.0f};
  for (const auto& [dtype, bits] : std::vector<std::pair<DataType, std::vector<uint16_t>>>{
           {DT_HALF, {0x3C00, 0xC000, 0x3800, 0x7BFF}},
           {DT_BFLOAT16, {0x3F80, 0xC000, 0x3F00, 0x4780}}}) {
    PsClient client({server.address()}, {{"w", {2, 2}, {{"w", 0, 0, 1}, {"w1", 0, 1, 2}}}},
                    ps_testing::Worker(0), absl::Seconds(30));
    client.set_push_dtype(dtype);
    ASSERT_TRUE(client.Push(std::vector<TensorView>{{{2, 2}, grad.data()}}).ok());
    const auto received = server.Received();
    PushRequest sent;
    ASSERT_TRUE(sent.ParseFromString(received.back().second));
    ASSERT_EQ(sent.gradients_size(), 2);  // both shards in one request
    std::vector<uint16_t> got(4);
    for (int k = 0; k < 2; ++k) {
      EXPECT_EQ(sent.gradients(k).gradient().dtype(), dtype);
      ASSERT_EQ(sent.gradients(k).gradient().data().size(), 4u);
      std::memcpy(got.data() + 2 * k, sent.gradients(k).gradient().data().data(), 4);
    }
    EXPECT_EQ(got, bits) << DataType_Name(dtype);
  }
}

}  // namespace
}  // namespace pstrain
