// The parameter server in-process and over gRPC: round trips, every rejected request leaving the
// variables unchanged, and concurrent pushes that are never lost.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/rpc.h"
#include "common/tensor.h"
#include "common/tensor_codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/ps.h"
#include "raw_call_testing.h"

namespace pstrain {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

OptimizerConfig Opt(const std::string& name, double lr) {
  OptimizerConfig c;
  c.set_name(name);
  c.set_learning_rate(lr);
  return c;
}

void AddVariable(CreateVariablesRequest* req, const std::string& name, const Tensor& init,
                 const OptimizerConfig& opt) {
  VariableDef* def = req->add_variables();
  def->set_name(name);
  EncodeTensor(init, def->mutable_initial_value());
  *def->mutable_optimizer() = opt;
}

void AddGradient(PushRequest* req, const std::string& name, const Tensor& g,
                 uint64_t read_version = 0) {
  Gradient* grad = req->add_gradients();
  grad->set_name(name);
  grad->set_read_version(read_version);
  EncodeTensor(g, grad->mutable_gradient());
}

Tensor Filled(std::vector<int64_t> shape, std::vector<float> values) {
  Tensor t(std::move(shape));
  t.values = std::move(values);
  return t;
}

struct Snapshot {
  std::vector<float> values;
  uint64_t version = 0;
  bool operator==(const Snapshot&) const = default;
};

PullRequest PullReq(const std::string& name) {
  PullRequest req;
  *req.mutable_sender() = MakeSender("worker", 0);
  req.add_names(name);
  return req;
}

Snapshot ToSnapshot(const absl::Status& s, const PullResponse& resp) {
  EXPECT_TRUE(s.ok()) << s;
  if (!s.ok() || resp.values_size() != 1) return {};
  absl::StatusOr<Tensor> t = DecodeTensor(resp.values(0).value());
  EXPECT_TRUE(t.ok()) << t.status();
  return {t.ok() ? t->values : std::vector<float>{}, resp.values(0).version()};
}

Snapshot PullOne(ParameterServer* ps, const std::string& name) {
  PullResponse resp;
  absl::Status s = ps->Pull(PullReq(name), &resp);
  return ToSnapshot(s, resp);
}

Snapshot PullOne(ParameterServerService::Stub* stub, const std::string& name) {
  PullResponse resp;
  grpc::ClientContext ctx;
  absl::Status s = FromGrpcStatus(stub->Pull(&ctx, PullReq(name), &resp));
  return ToSnapshot(s, resp);
}

// A PS (task 3) holding "w" [2, 3] (sgd, lr 0.5) and "b" [3] (adam).
class ParameterServerTest : public testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<ParameterServer>> ps = ParameterServer::Create({.task = 3});
    ASSERT_TRUE(ps.ok()) << ps.status();
    ps_ = *std::move(ps);
    CreateVariablesRequest req;
    *req.mutable_sender() = MakeSender("chief", 0);
    AddVariable(&req, "w", Filled({2, 3}, {0, 1, 2, 3, 4, 5}), Opt("sgd", 0.5));
    AddVariable(&req, "b", Filled({3}, {1, 1, 1}), Opt("adam", 0.01));
    CreateVariablesResponse resp;
    ASSERT_TRUE(ps_->CreateVariables(req, &resp).ok());
  }

  static PushRequest NewPush(const std::vector<std::pair<std::string, Tensor>>& grads,
                             uint64_t read_version = 0) {
    PushRequest req;
    *req.mutable_sender() = MakeSender("worker", 1);
    for (const auto& [name, g] : grads) AddGradient(&req, name, g, read_version);
    return req;
  }

  // The push fails with `code` and a message containing every part, and changes nothing.
  void ExpectPushRejected(const std::string& label, const PushRequest& req, absl::StatusCode code,
                          const std::vector<std::string>& parts) {
    SCOPED_TRACE(label);
    const Snapshot w_before = PullOne(ps_.get(), "w"), b_before = PullOne(ps_.get(), "b");
    PushResponse resp;
    absl::Status s = ps_->Push(req, &resp);
    EXPECT_EQ(s.code(), code) << s;
    for (const std::string& part : parts) EXPECT_THAT(s.message(), HasSubstr(part));
    EXPECT_EQ(resp.versions_size(), 0);
    EXPECT_EQ(PullOne(ps_.get(), "w"), w_before);
    EXPECT_EQ(PullOne(ps_.get(), "b"), b_before);
  }

  // Same for a create; `req` also holds a valid new variable "new", which must not appear.
  void ExpectCreateRejected(const std::string& label, const CreateVariablesRequest& req,
                            absl::StatusCode code, const std::vector<std::string>& parts) {
    SCOPED_TRACE(label);
    const Snapshot w_before = PullOne(ps_.get(), "w");
    CreateVariablesResponse resp;
    absl::Status s = ps_->CreateVariables(req, &resp);
    EXPECT_EQ(s.code(), code) << s;
    for (const std::string& part : parts) EXPECT_THAT(s.message(), HasSubstr(part));
    PullResponse pulled;
    EXPECT_EQ(ps_->Pull(PullReq("new"), &pulled).code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(PullOne(ps_.get(), "w"), w_before);
  }

  std::unique_ptr<ParameterServer> ps_;
};

TEST_F(ParameterServerTest, CreatePullPushRoundTrip) {
  PullRequest pull = PullReq("b");
  pull.add_names("w");
  PullResponse pulled;
  ASSERT_TRUE(ps_->Pull(pull, &pulled).ok());
  ASSERT_EQ(pulled.values_size(), 2);
  EXPECT_EQ(pulled.values(0).name(), "b");
  EXPECT_EQ(pulled.values(1).name(), "w");
  EXPECT_EQ(pulled.values(1).version(), 0u);
  EXPECT_THAT(pulled.values(1).value().shape(), ElementsAre(2, 3));
  EXPECT_EQ(PullOne(ps_.get(), "w"), (Snapshot{{0, 1, 2, 3, 4, 5}, 0}));

  PushResponse pushed;
  ASSERT_TRUE(ps_->Push(NewPush({{"w", Filled({2, 3}, {2, 2, 2, -2, 0, 1})}}), &pushed).ok());
  EXPECT_THAT(pushed.versions(), ElementsAre(1));
  EXPECT_EQ(PullOne(ps_.get(), "w"), (Snapshot{{-1, 0, 1, 4, 4, 4.5}, 1}));

  PushRequest push = NewPush({{"b", Filled({3}, {1, -1, 0})}});
  AddGradient(&push, "w", Tensor({2, 3}), /*read_version=*/1);
  ASSERT_TRUE(ps_->Push(push, &pushed).ok());
  EXPECT_THAT(pushed.versions(), ElementsAre(1, 2));
  Snapshot b = PullOne(ps_.get(), "b");
  EXPECT_EQ(b.version, 1u);
  ASSERT_EQ(b.values.size(), 3u);
  EXPECT_NEAR(b.values[0], 0.99, 1e-6);  // adam's first step is lr against the gradient's sign
  EXPECT_NEAR(b.values[1], 1.01, 1e-6);
  EXPECT_EQ(b.values[2], 1.0f);
}

TEST_F(ParameterServerTest, CreateRejectsNegativeTask) {
  EXPECT_EQ(ParameterServer::Create({.task = -1}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ParameterServerTest, RejectedPushChangesNothing) {
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  const Tensor good_w = Filled({2, 3}, {1, 1, 1, 1, 1, 1}), good_b = Filled({3}, {1, 1, 1});
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();

  PushRequest req = NewPush({{"w", good_w}});
  req.clear_sender();
  ExpectPushRejected("no sender", req, kInvalid, {"request has no sender"});
  req = NewPush({{"w", good_w}});
  req.mutable_sender()->clear_job();
  ExpectPushRejected("sender without job", req, kInvalid, {"request has no sender"});
  ExpectPushRejected("unknown variable", NewPush({{"nope", good_b}}), absl::StatusCode::kNotFound,
                     {"'nope'", "ps task 3"});
  ExpectPushRejected("repeated name", NewPush({{"w", good_w}, {"w", good_w}}), kInvalid,
                     {"'w'", "more than once"});
  ExpectPushRejected("shape mismatch", NewPush({{"w", Filled({6}, good_w.values)}}), kInvalid,
                     {"'w'", "[6]", "[2, 3]"});
  req = NewPush({{"w", good_w}});
  req.mutable_gradients(0)->mutable_gradient()->mutable_data()->resize(20);
  ExpectPushRejected("short data", req, kInvalid, {"'w'", "needs 24 bytes"});
  req = NewPush({{"w", good_w}});
  req.mutable_gradients(0)->mutable_gradient()->set_dtype(DT_INVALID);
  ExpectPushRejected("bad dtype", req, kInvalid, {"'w'", "DT_INVALID"});
  ExpectPushRejected("nan", NewPush({{"w", Filled({2, 3}, {1, 1, 1, 1, nan, 1})}}), kInvalid,
                     {"'w'", "non-finite", "index 4"});
  ExpectPushRejected("inf", NewPush({{"b", Filled({3}, {-inf, 1, inf})}}), kInvalid,
                     {"'b'", "non-finite", "index 0"});
  ExpectPushRejected("read_version ahead", NewPush({{"w", good_w}}, /*read_version=*/1), kInvalid,
                     {"'w'", "version 1", "version 0"});
  // One good and one bad gradient: neither is applied, whichever comes first.
  ExpectPushRejected("good then bad", NewPush({{"w", good_w}, {"b", Filled({3}, {1, nan, 1})}}),
                     kInvalid, {"'b'", "index 1"});
  ExpectPushRejected("bad then good", NewPush({{"w", Filled({2, 2}, {1, 1, 1, 1})}, {"b", good_b}}),
                     kInvalid, {"'w'", "[2, 2]", "[2, 3]"});
  ExpectPushRejected("good then unknown", NewPush({{"b", good_b}, {"x", good_b}}),
                     absl::StatusCode::kNotFound, {"'x'", "ps task 3"});
}

TEST_F(ParameterServerTest, PullRejectsUnknownNameAndMissingSender) {
  PullRequest req = PullReq("w");
  req.clear_sender();
  PullResponse resp;
  absl::Status s = ps_->Pull(req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("request has no sender"));

  *req.mutable_sender() = MakeSender("worker", 0);
  req.add_names("missing");
  s = ps_->Pull(req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'missing'"), HasSubstr("ps task 3")));
  EXPECT_EQ(resp.values_size(), 0);
}

TEST_F(ParameterServerTest, RejectedCreateCreatesNothing) {
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  const Tensor ok = Filled({2}, {1, 2});
  // Each request holds a valid "new" variable, then one more that may be bad.
  auto with_new = [&](const std::string& name, const Tensor& init, const OptimizerConfig& opt) {
    CreateVariablesRequest req;
    *req.mutable_sender() = MakeSender("chief", 0);
    AddVariable(&req, "new", ok, Opt("sgd", 1));
    AddVariable(&req, name, init, opt);
    return req;
  };
  const OptimizerConfig sgd = Opt("sgd", 1);
  CreateVariablesRequest req = with_new("good", ok, sgd);
  req.clear_sender();
  ExpectCreateRejected("no sender", req, kInvalid, {"request has no sender"});
  ExpectCreateRejected("empty name", with_new("", ok, sgd), kInvalid, {"empty name"});
  ExpectCreateRejected("repeated in request", with_new("new", ok, sgd),
                       absl::StatusCode::kAlreadyExists, {"'new'", "more than once"});
  ExpectCreateRejected("already exists", with_new("w", ok, sgd), absl::StatusCode::kAlreadyExists,
                       {"'w'", "already exists", "ps task 3"});
  req = with_new("bad", ok, sgd);
  req.mutable_variables(1)->mutable_initial_value()->mutable_data()->resize(3);
  ExpectCreateRejected("bad tensor", req, kInvalid, {"'bad'", "needs 8 bytes"});
  ExpectCreateRejected("unknown optimizer", with_new("bad", ok, Opt("foo", 1)), kInvalid,
                       {"'bad'", "name \"foo\" is not a known optimizer"});
  ExpectCreateRejected("bad learning rate", with_new("bad", ok, Opt("adam", 0)), kInvalid,
                       {"'bad'", "learning_rate 0 must be positive"});
  ExpectCreateRejected("non-finite initial value",
                       with_new("bad", Filled({2}, {0, std::nanf("")}), sgd), kInvalid,
                       {"'bad'", "non-finite", "index 1"});
}

// Variables for the concurrency tests: "a" of 1000 zeros and "c" of 10 zeros, both sgd lr 1.
constexpr int kBigSize = 1000;
constexpr int kSmallSize = 10;
constexpr int kPushesPerThread = 200;

CreateVariablesRequest ConcurrencyVariables() {
  CreateVariablesRequest req;
  *req.mutable_sender() = MakeSender("chief", 0);
  AddVariable(&req, "a", Tensor({kBigSize}), Opt("sgd", 1));
  AddVariable(&req, "c", Tensor({kSmallSize}), Opt("sgd", 1));
  return req;
}

// Each push adds 1 to every element of "a" and "c".
PushRequest ConcurrencyPush(int thread) {
  PushRequest req;
  *req.mutable_sender() = MakeSender("worker", thread);
  AddGradient(&req, "a", Tensor({kBigSize}, -1.0f));
  AddGradient(&req, "c", Tensor({kSmallSize}, -1.0f));
  return req;
}

// Every version 1..n was handed out exactly once.
void ExpectAllVersionsOnce(std::vector<uint64_t> versions, uint64_t n) {
  std::sort(versions.begin(), versions.end());
  std::vector<uint64_t> want(n);
  std::iota(want.begin(), want.end(), 1);
  EXPECT_EQ(versions, want);
}

void ExpectFinalValues(const Snapshot& s, int size, int total) {
  EXPECT_EQ(s.version, static_cast<uint64_t>(total));
  ASSERT_EQ(s.values.size(), static_cast<size_t>(size));
  for (float v : s.values) ASSERT_EQ(v, static_cast<float>(total));
}

TEST(ParameterServerConcurrencyTest, InProcessPushesAreNeverLost) {
  constexpr int kThreads = 16;
  std::unique_ptr<ParameterServer> ps = *ParameterServer::Create({});
  CreateVariablesResponse created;
  ASSERT_TRUE(ps->CreateVariables(ConcurrencyVariables(), &created).ok());

  std::vector<uint64_t> versions(kThreads * kPushesPerThread);  // [t * kPushesPerThread + i]
  std::atomic<bool> done{false};
  std::atomic<int> torn_reads{0};
  // A reader pulling meanwhile always sees a whole push: every element equals the version.
  std::thread reader([&] {
    while (!done.load()) {
      Snapshot s = PullOne(ps.get(), "a");
      for (float v : s.values) {
        if (v != static_cast<float>(s.version)) ++torn_reads;
      }
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const PushRequest req = ConcurrencyPush(t);
      for (int i = 0; i < kPushesPerThread; ++i) {
        PushResponse resp;
        absl::Status s = ps->Push(req, &resp);
        ASSERT_TRUE(s.ok()) << s;
        versions[t * kPushesPerThread + i] = resp.versions(0);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  done = true;
  reader.join();

  EXPECT_EQ(torn_reads.load(), 0);
  ExpectAllVersionsOnce(versions, kThreads * kPushesPerThread);
  ExpectFinalValues(PullOne(ps.get(), "a"), kBigSize, kThreads * kPushesPerThread);
  ExpectFinalValues(PullOne(ps.get(), "c"), kSmallSize, kThreads * kPushesPerThread);
}

// A real gRPC server on a port the kernel picks.
class ParameterServerGrpcTest : public testing::Test {
 protected:
  void SetUp() override {
    ps_ = *ParameterServer::Create({.task = 1});
    service_ = MakeParameterServerService(ps_.get(),
                                          [this](const std::string& reason, bool job_succeeded) {
                                            ++shutdown_calls_;
                                            shutdown_reason_ = reason;
                                            shutdown_succeeded_ = job_succeeded;
                                          });
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_NE(port_, 0);
    address_ = "127.0.0.1:" + std::to_string(port_);
    // Connected before the tests' calls, which do not wait for a channel that is connecting.
    std::shared_ptr<grpc::Channel> channel = MakeChannel(address_);
    ASSERT_TRUE(channel->WaitForConnected(absl::ToChronoTime(absl::Now() + absl::Seconds(30))));
    stub_ = ParameterServerService::NewStub(channel);
    CreateVariablesResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->CreateVariables(&ctx, ConcurrencyVariables(), &resp).ok());
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }

  std::unique_ptr<ParameterServer> ps_;
  std::unique_ptr<grpc::Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::string address_;
  std::unique_ptr<ParameterServerService::Stub> stub_;
  std::atomic<int> shutdown_calls_{0};
  std::string shutdown_reason_;
  std::atomic<bool> shutdown_succeeded_{true};
};

TEST_F(ParameterServerGrpcTest, ConcurrentPushesFromManyChannelsAreNeverLost) {
  constexpr int kThreads = 8;
  std::vector<uint64_t> versions(kThreads * kPushesPerThread);  // [t * kPushesPerThread + i]
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto stub = ParameterServerService::NewStub(MakeChannel(address_));
      const PushRequest req = ConcurrencyPush(t);
      for (int i = 0; i < kPushesPerThread; ++i) {
        PushResponse resp;
        // A fresh channel's first connection attempt may fail on a loaded machine; the push
        // waits for the channel rather than failing at once, as pstrain's own clients do.
        std::unique_ptr<grpc::ClientContext> ctx =
            ContextWithTimeout(absl::Seconds(30), /*wait_for_ready=*/true);
        grpc::Status s = stub->Push(ctx.get(), req, &resp);
        ASSERT_TRUE(s.ok()) << s.error_message();
        ASSERT_EQ(resp.versions_size(), 2);
        versions[t * kPushesPerThread + i] = resp.versions(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();

  ExpectAllVersionsOnce(versions, kThreads * kPushesPerThread);
  ExpectFinalValues(PullOne(stub_.get(), "a"), kBigSize, kThreads * kPushesPerThread);
  ExpectFinalValues(PullOne(stub_.get(), "c"), kSmallSize, kThreads * kPushesPerThread);
}

TEST_F(ParameterServerGrpcTest, WrongSizePushIsInvalidArgument) {
  PushRequest req;
  *req.mutable_sender() = MakeSender("worker", 0);
  AddGradient(&req, "a", Tensor({kBigSize - 1}, 1.0f));
  PushResponse resp;
  grpc::ClientContext ctx;
  grpc::Status s = stub_->Push(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), AllOf(HasSubstr("'a'"), HasSubstr("[999]"), HasSubstr("[1000]")));
  EXPECT_EQ(PullOne(ps_.get(), "a").version, 0u);
}

TEST_F(ParameterServerGrpcTest, UnknownVariableIsNotFound) {
  PullResponse resp;
  grpc::ClientContext ctx;
  grpc::Status s = stub_->Pull(&ctx, PullReq("zzz"), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), AllOf(HasSubstr("'zzz'"), HasSubstr("ps task 1")));
}

TEST_F(ParameterServerGrpcTest, ShutdownCallsCallbackOnceAndOnlyFromTheChief) {
  ShutdownRequest req;
  req.set_reason("training done");
  req.set_job_succeeded(false);
  ShutdownResponse resp;
  {
    grpc::ClientContext ctx;  // no sender: rejected, callback not called
    EXPECT_EQ(stub_->Shutdown(&ctx, req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  for (const char* job : {"nobody", "worker", "ps"}) {
    *req.mutable_sender() = MakeSender(job, 0);
    grpc::ClientContext ctx;
    grpc::Status s = stub_->Shutdown(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << job;
    EXPECT_THAT(s.error_message(), AllOf(HasSubstr("Shutdown from"), HasSubstr("ps task 1")));
  }
  EXPECT_EQ(shutdown_calls_.load(), 0);
  *req.mutable_sender() = MakeSender("chief", 0);
  for (int i = 0; i < 3; ++i) {
    grpc::ClientContext ctx;
    EXPECT_TRUE(stub_->Shutdown(&ctx, req, &resp).ok());
    req.set_reason("again");
    req.set_job_succeeded(true);
  }
  EXPECT_EQ(shutdown_calls_.load(), 1);
  EXPECT_EQ(shutdown_reason_, "training done");
  EXPECT_FALSE(shutdown_succeeded_.load()) << "the first call's job outcome is passed on";
}

TEST_F(ParameterServerGrpcTest, APullWhoseResponseCannotBeSentIsRefusedAndTheServerServesOn) {
  constexpr int64_t kElements = int64_t{16} << 20;  // 64 MB of floats
  for (int i = 0; i < 8; ++i) {
    CreateVariablesRequest req;
    *req.mutable_sender() = MakeSender("chief", 0);
    AddVariable(&req, "big" + std::to_string(i), Tensor({kElements}, 0.5f), Opt("sgd", 1));
    CreateVariablesResponse resp;
    ASSERT_TRUE(ps_->CreateVariables(req, &resp).ok());
  }
  PullRequest same = PullReq("big0");
  for (int i = 1; i < 40; ++i) same.add_names("big0");
  PullResponse resp;
  {
    grpc::ClientContext ctx;
    grpc::Status s = stub_->Pull(&ctx, same, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("'big0' appears more than once in the pull"));
  }
  PullRequest all = PullReq("big0");
  for (int i = 1; i < 8; ++i) all.add_names("big" + std::to_string(i));
  {
    grpc::ClientContext ctx;
    grpc::Status s = stub_->Pull(&ctx, all, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_THAT(s.error_message(),
                AllOf(HasSubstr("pull of 8 variables from ps task 1 would return 536870912 bytes"),
                      HasSubstr("limit of 520093696 bytes"), HasSubstr("split the pull")));
  }
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->Pull(&ctx, PullReq("big7"), &resp).ok());
    ASSERT_EQ(resp.values_size(), 1);
    EXPECT_EQ(resp.values(0).value().data().size(), static_cast<size_t>(kElements * 4));
  }
  EXPECT_EQ(PullOne(stub_.get(), "c"), (Snapshot{std::vector<float>(kSmallSize, 0.0f), 0}));
}

TEST_F(ParameterServerGrpcTest, OverflowingShapeIsInvalidArgumentWithAMessage) {
  CreateVariablesRequest req;
  *req.mutable_sender() = MakeSender("chief", 0);
  VariableDef* def = req.add_variables();
  def->set_name("huge");
  def->mutable_initial_value()->set_dtype(DT_FLOAT);
  def->mutable_initial_value()->add_shape(int64_t{1} << 62);
  *def->mutable_optimizer() = Opt("sgd", 1);
  CreateVariablesResponse resp;
  grpc::ClientContext ctx;
  grpc::Status s = stub_->CreateVariables(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), AllOf(HasSubstr("'huge'"), HasSubstr("overflows")));
}

TEST_F(ParameterServerGrpcTest, DeleteVariablesRemovesThemForTheChiefOnly) {
  DeleteVariablesRequest req;
  *req.mutable_sender() = MakeSender("worker", 0);
  req.add_names("c");
  DeleteVariablesResponse resp;
  {
    grpc::ClientContext ctx;
    EXPECT_EQ(stub_->DeleteVariables(&ctx, req, &resp).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }
  EXPECT_EQ(PullOne(stub_.get(), "c").version, 0u);
  *req.mutable_sender() = MakeSender("chief", 0);
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->DeleteVariables(&ctx, req, &resp).ok());
  }
  PullResponse pulled;
  grpc::ClientContext ctx;
  EXPECT_EQ(stub_->Pull(&ctx, PullReq("c"), &pulled).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(PullOne(stub_.get(), "a").version, 0u);
}

// Bytes that are not a valid message, sent to each method as a raw call.
TEST_F(ParameterServerGrpcTest, AnUnparseableRequestIsInvalidArgumentWithAMessage) {
  const std::shared_ptr<grpc::Channel> channel = MakeChannel(address_);
  for (const char* method : {"Configure", "CreateVariables", "DeleteVariables", "Pull", "Push",
                             "Leave", "Stats", "Shutdown"}) {
    SCOPED_TRACE(method);
    const grpc::Status status =
        ps_testing::RawUnaryCall(channel, absl::StrCat("/pstrain.ParameterServerService/", method),
                                 std::string("\xff\xff\xff\xff\x0f"));
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(),
                AllOf(HasSubstr(absl::StrCat(method,
                                             " request of 5 bytes is not a valid "
                                             "pstrain.")),
                      HasSubstr("Request")));
  }
  EXPECT_EQ(shutdown_calls_.load(), 0);
  EXPECT_EQ(PullOne(stub_.get(), "c").version, 0u);
}

}  // namespace
}  // namespace pstrain
