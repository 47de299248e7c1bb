// PsClient against a fake PS over real gRPC: pulls and pushes split to fit a request's limits
// (all in flight at once), a shard too large for any request, retries of idempotent pulls only,
// waiting for a PS that is not up yet, and the pause at a barrier.
#include <thread>

#include "absl/synchronization/mutex.h"
#include "client/ps_client.h"
#include "common/tensor_codec.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "ps.grpc.pb.h"
#include "testing.h"

namespace pstrain {
namespace {

using ::testing::AllOf;
using ::testing::Each;
using ::testing::HasSubstr;
using ::testing::Le;

// Holds variables in memory, applies pushes as SGD with rate 1, refuses requests over `limits`
// as a real PS refuses those over its own, and records what it received.
class FakePs final : public ParameterServerService::Service {
 public:
  FakePs(RequestLimits limits, int pulls_in_flight_wanted)
      : limits_(limits), wanted_(pulls_in_flight_wanted) {}

  void Add(const std::string& name, const Tensor& value) {
    absl::MutexLock lock(&mu_);
    vars_[name] = value;
  }
  Tensor Get(const std::string& name) {
    absl::MutexLock lock(&mu_);
    return vars_.at(name);
  }
  void FailNextPulls(int n) {
    absl::MutexLock lock(&mu_);
    fail_pulls_ = n;
  }
  void FailNextPushes(int n) {
    absl::MutexLock lock(&mu_);
    fail_pushes_ = n;
  }

  grpc::Status Pull(grpc::ServerContext*, const PullRequest* req, PullResponse* resp) override {
    absl::MutexLock lock(&mu_);
    pull_calls_++;
    if (fail_pulls_ > 0) {
      --fail_pulls_;
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection reset");
    }
    int64_t bytes = 0;
    for (const std::string& n : req->names()) bytes += vars_.at(n).size() * sizeof(float);
    pull_bytes_.push_back(bytes);
    pull_names_.push_back(req->names_size());
    if (bytes > limits_.max_tensor_bytes || req->names_size() > limits_.max_tensors) {
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "pull too large");
    }
    // Holds each pull until `wanted_` are in flight together (or a generous time passed), so
    // a client that sent them one after another is seen.
    ++in_flight_;
    max_in_flight_ = std::max(max_in_flight_, in_flight_);
    mu_.AwaitWithTimeout(absl::Condition(
                             +[](FakePs* f) ABSL_EXCLUSIVE_LOCKS_REQUIRED(f->mu_) {
                               return f->max_in_flight_ >= f->wanted_;
                             },
                             this),
                         absl::Seconds(10));
    --in_flight_;
    for (const std::string& n : req->names()) {
      VariableValue* v = resp->add_values();
      v->set_name(n);
      v->set_version(versions_[n]);
      EncodeTensor(vars_.at(n), v->mutable_value());
    }
    return grpc::Status::OK;
  }

  grpc::Status Push(grpc::ServerContext*, const PushRequest* req, PushResponse* resp) override {
    absl::MutexLock lock(&mu_);
    push_calls_++;
    if (fail_pushes_ > 0) {
      --fail_pushes_;
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection reset");
    }
    if (req->gradients_size() > limits_.max_tensors) {
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "push too large");
    }
    for (const Gradient& g : req->gradients()) {
      absl::StatusOr<Tensor> t = DecodeTensor(g.gradient());
      if (!t.ok()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad gradient");
      Tensor& v = vars_.at(g.name());
      for (int64_t i = 0; i < v.size(); ++i) v.values[i] -= t->values[i];
      resp->add_versions(++versions_[g.name()]);
    }
    return grpc::Status::OK;
  }

  grpc::Status Leave(grpc::ServerContext*, const LeaveRequest* req, LeaveResponse*) override {
    absl::MutexLock lock(&mu_);
    leaves_.push_back(req->pause());
    return grpc::Status::OK;
  }

  absl::Mutex mu_;
  int pull_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int push_calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int64_t> pull_bytes_ ABSL_GUARDED_BY(mu_);
  std::vector<int> pull_names_ ABSL_GUARDED_BY(mu_);
  int max_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<bool> leaves_ ABSL_GUARDED_BY(mu_);

 private:
  const RequestLimits limits_;
  const int wanted_;
  std::map<std::string, Tensor> vars_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, uint64_t> versions_ ABSL_GUARDED_BY(mu_);
  int fail_pulls_ ABSL_GUARDED_BY(mu_) = 0;
  int fail_pushes_ ABSL_GUARDED_BY(mu_) = 0;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

std::unique_ptr<grpc::Server> Serve(FakePs* ps, const std::string& address, int* port = nullptr) {
  grpc::ServerBuilder b;
  b.AddListeningPort(address, grpc::InsecureServerCredentials(), port);
  b.RegisterService(ps);
  return b.BuildAndStart();
}

Sender Worker() {
  Sender s;
  s.set_job("worker");
  s.set_task(0);
  s.set_incarnation(1);
  return s;
}

// One variable per name, each a single shard on ps:0.
std::vector<VariableRef> OnOnePs(const std::vector<std::string>& names, int64_t rows) {
  std::vector<VariableRef> vars;
  for (const std::string& n : names) vars.push_back({n, {rows}, {{n, 0, 0, rows}}});
  return vars;
}

const std::vector<std::string> kFive = {"a", "b", "c", "d", "e"};

// Five variables of 4,000 bytes, at most 10,000 bytes per request: three requests per pull,
// all in flight at once, none over the limit; pushes split the same way.
TEST(PsClientTest, SplitsRequestsThatWouldPassTheByteLimit) {
  const RequestLimits limits{.max_tensor_bytes = 10000};
  FakePs fake(limits, /*pulls_in_flight_wanted=*/3);
  for (size_t i = 0; i < kFive.size(); ++i) fake.Add(kFive[i], Tensor({1000}, float(i)));
  int port = 0;
  std::unique_ptr<grpc::Server> server = Serve(&fake, "127.0.0.1:0", &port);
  ASSERT_NE(port, 0);
  PsClient client({"127.0.0.1:" + std::to_string(port)}, OnOnePs(kFive, 1000), Worker(),
                  absl::Seconds(30), limits);

  std::vector<const float*> values;
  ASSERT_TRUE(client.Pull(&values).ok());
  ASSERT_EQ(values.size(), 5u);
  for (size_t i = 0; i < kFive.size(); ++i) {
    EXPECT_EQ(values[i][0], float(i));
    EXPECT_EQ(values[i][999], float(i));
  }
  {
    absl::MutexLock lock(&fake.mu_);
    EXPECT_EQ(fake.pull_calls_, 3);
    EXPECT_THAT(fake.pull_bytes_, Each(Le(10000)));
    EXPECT_EQ(fake.max_in_flight_, 3);
  }
  std::vector<Tensor> grads;
  for (size_t i = 0; i < kFive.size(); ++i) grads.push_back(Tensor({1000}, 0.5f));
  ASSERT_TRUE(client.Push(grads).ok());
  for (size_t i = 0; i < kFive.size(); ++i) EXPECT_EQ(fake.Get(kFive[i]).values[7], i - 0.5f);
  absl::MutexLock lock(&fake.mu_);
  EXPECT_EQ(fake.push_calls_, 3);
}

TEST(PsClientTest, SplitsRequestsThatWouldNameTooManyTensors) {
  const RequestLimits limits{.max_tensors = 2};
  FakePs fake(limits, /*pulls_in_flight_wanted=*/3);
  for (const std::string& n : kFive) fake.Add(n, Tensor({4}, 1.0f));
  int port = 0;
  std::unique_ptr<grpc::Server> server = Serve(&fake, "127.0.0.1:0", &port);
  PsClient client({"127.0.0.1:" + std::to_string(port)}, OnOnePs(kFive, 4), Worker(),
                  absl::Seconds(30), limits);
  std::vector<const float*> values;
  ASSERT_TRUE(client.Pull(&values).ok());
  std::vector<Tensor> grads(5, Tensor({4}, 1.0f));
  ASSERT_TRUE(client.Push(grads).ok());
  EXPECT_EQ(fake.Get("e").values[3], 0.0f);
  absl::MutexLock lock(&fake.mu_);
  EXPECT_THAT(fake.pull_names_, AllOf(Each(Le(2)), ::testing::SizeIs(3)));
}

// A shard larger than one request may carry travels in a request of its own (the data channel
// streams it past one message); the smaller shards of its PS share the others.
TEST(PsClientTest, AShardLargerThanOneRequestTravelsAlone) {
  const RequestLimits limits{.max_tensor_bytes = 10000};
  FakePs fake({}, 1);
  fake.Add("a", Tensor({1000}, 1.0f));
  fake.Add("big", Tensor({3000}, 2.0f));
  fake.Add("b", Tensor({1000}, 3.0f));
  int port = 0;
  std::unique_ptr<grpc::Server> server = Serve(&fake, "127.0.0.1:0", &port);
  std::vector<VariableRef> vars = {{"a", {1000}, {{"a", 0, 0, 1000}}},
                                   {"big", {3000}, {{"big", 0, 0, 3000}}},
                                   {"b", {1000}, {{"b", 0, 0, 1000}}}};
  PsClient sized({"127.0.0.1:" + std::to_string(port)}, vars, Worker(), absl::Seconds(30), limits);
  std::vector<const float*> values;
  ASSERT_TRUE(sized.Pull(&values).ok());
  EXPECT_EQ(values[0][999], 1.0f);
  EXPECT_EQ(values[1][2999], 2.0f);
  EXPECT_EQ(values[2][0], 3.0f);
  ASSERT_TRUE(sized.Push({Tensor({1000}, 0.5f), Tensor({3000}, 0.5f), Tensor({1000}, 0.5f)}).ok());
  EXPECT_EQ(fake.Get("big").values[2999], 1.5f);
  absl::MutexLock lock(&fake.mu_);
  EXPECT_THAT(fake.pull_bytes_, ::testing::UnorderedElementsAre(12000, 8000));
  EXPECT_EQ(fake.push_calls_, 2);
}

// A broken connection (UNAVAILABLE) fails a pull only when it lasts past the deadline; a push,
// which is not idempotent, is never sent twice.
TEST(PsClientTest, RetriesPullsButNotPushes) {
  FakePs fake({}, 1);
  fake.Add("w", Tensor({4}, 2.0f));
  int port = 0;
  std::unique_ptr<grpc::Server> server = Serve(&fake, "127.0.0.1:0", &port);
  PsClient client({"127.0.0.1:" + std::to_string(port)}, OnOnePs({"w"}, 4), Worker(),
                  absl::Seconds(30));
  fake.FailNextPulls(2);
  std::vector<const float*> values;
  ASSERT_TRUE(client.Pull(&values).ok());
  EXPECT_EQ(values[0][3], 2.0f);
  fake.FailNextPushes(1);
  const absl::Status s = client.Push({Tensor({4}, 1.0f)});
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("Push at ps:0 127.0.0.1:" + std::to_string(port)));
  EXPECT_EQ(fake.Get("w").values[0], 2.0f);
  absl::MutexLock lock(&fake.mu_);
  EXPECT_EQ(fake.pull_calls_, 3);
  EXPECT_EQ(fake.push_calls_, 1);
}

TEST(PsClientTest, APullThatKeepsFailingSaysHowLongItTried) {
  FakePs fake({}, 1);
  fake.Add("w", Tensor({4}));
  int port = 0;
  std::unique_ptr<grpc::Server> server = Serve(&fake, "127.0.0.1:0", &port);
  PsClient client({"127.0.0.1:" + std::to_string(port)}, OnOnePs({"w"}, 4), Worker(),
                  absl::Seconds(1));
  fake.FailNextPulls(1000000);
  std::vector<const float*> values;
  const absl::Status s = client.Pull(&values);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("Pull at ps:0"), HasSubstr("connection reset"),
                                 HasSubstr("attempts in")));
}

// A PS that starts listening only after the pull was sent is waited for within the deadline.
TEST(PsClientTest, WaitsForAPsThatIsNotUpYet) {
  const std::string address = "127.0.0.1:" + std::to_string(testing::FreePorts(1)[0]);
  FakePs fake({}, 1);
  fake.Add("w", Tensor({2}, 3.0f));
  PsClient client({address}, OnOnePs({"w"}, 2), Worker(), absl::Seconds(60));
  absl::Status pulled = absl::UnknownError("not run");
  std::vector<const float*> values;
  std::thread puller([&] { pulled = client.Pull(&values); });
  absl::SleepFor(absl::Milliseconds(500));
  std::unique_ptr<grpc::Server> server = Serve(&fake, address);
  ASSERT_NE(server, nullptr);
  puller.join();
  ASSERT_TRUE(pulled.ok()) << pulled;
  EXPECT_EQ(values[0][1], 3.0f);
}

TEST(PsClientTest, LeaveTellsEveryPsWhetherItOnlyPauses) {
  FakePs fake({}, 1);
  int port = 0;
  std::unique_ptr<grpc::Server> server = Serve(&fake, "127.0.0.1:0", &port);
  PsClient client({"127.0.0.1:" + std::to_string(port)}, {}, Worker(), absl::Seconds(30));
  ASSERT_TRUE(client.Leave(/*pause=*/true).ok());
  ASSERT_TRUE(client.Leave().ok());
  absl::MutexLock lock(&fake.mu_);
  EXPECT_EQ(fake.leaves_, (std::vector<bool>{true, false}));
}

}  // namespace
}  // namespace pstrain
