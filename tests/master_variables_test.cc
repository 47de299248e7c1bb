// The chief's variable creation against in-process fake PS: specs refused before anything is
// drawn or sent, and creates that fail on one PS leaving nothing behind on any.
#include <cmath>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/limits.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "master/specs.h"
#include "master/variables.h"
#include "ps.grpc.pb.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

// A PS that keeps only names: CreateVariables is all or nothing and refuses a taken name, as
// the real one does; DeleteVariables ignores unknown names.
class FakePs final : public ParameterServerService::Service {
 public:
  grpc::Status CreateVariables(grpc::ServerContext*, const CreateVariablesRequest* req,
                               CreateVariablesResponse*) override {
    absl::MutexLock lock(&mu_);
    ++creates_;
    for (const VariableDef& v : req->variables()) {
      if (names_.contains(v.name())) {
        return grpc::Status(grpc::StatusCode::ALREADY_EXISTS, "variable '" + v.name() + "' exists");
      }
    }
    for (const VariableDef& v : req->variables()) names_.insert(v.name());
    return grpc::Status::OK;
  }
  grpc::Status DeleteVariables(grpc::ServerContext*, const DeleteVariablesRequest* req,
                               DeleteVariablesResponse*) override {
    absl::MutexLock lock(&mu_);
    for (const std::string& n : req->names()) names_.erase(n);
    return grpc::Status::OK;
  }
  void Add(const std::string& name) {
    absl::MutexLock lock(&mu_);
    names_.insert(name);
  }
  void Remove(const std::string& name) {
    absl::MutexLock lock(&mu_);
    names_.erase(name);
  }
  std::set<std::string> names() const {
    absl::MutexLock lock(&mu_);
    return names_;
  }
  int creates() const {
    absl::MutexLock lock(&mu_);
    return creates_;
  }

 private:
  mutable absl::Mutex mu_;
  std::set<std::string> names_ ABSL_GUARDED_BY(mu_);
  int creates_ ABSL_GUARDED_BY(mu_) = 0;
};

class VariablesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<std::string> addresses;
    for (int i = 0; i < 2; ++i) {
      ps_.push_back(std::make_unique<FakePs>());
      grpc::ServerBuilder b;
      int port = 0;
      b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
      b.RegisterService(ps_.back().get());
      servers_.push_back(b.BuildAndStart());
      ASSERT_NE(port, 0);
      addresses.push_back("127.0.0.1:" + std::to_string(port));
    }
    absl::StatusOr<std::unique_ptr<VariablePlacer>> p =
        VariablePlacer::Create(addresses, "auto", "round_robin", absl::Seconds(30));
    ASSERT_TRUE(p.ok()) << p.status();
    placer_ = *std::move(p);
  }
  void TearDown() override {
    for (auto& s : servers_) s->Shutdown();
  }

  // A variable whose value must never be drawn: every check comes first.
  static NewVariable Undrawable(const std::string& name, std::vector<int64_t> shape) {
    return {name, std::move(shape), Adam(), []() -> absl::StatusOr<Tensor> {
              ADD_FAILURE() << "the value was drawn";
              return absl::InternalError("drawn");
            }};
  }
  static NewVariable Zeros(const std::string& name, std::vector<int64_t> shape) {
    return {name, shape, Adam(), [shape]() -> absl::StatusOr<Tensor> { return Tensor(shape); }};
  }
  static OptimizerConfig Adam() {
    OptimizerConfig o;
    o.set_name("adam");
    o.set_learning_rate(0.001);
    return o;
  }
  int Creates() const { return ps_[0]->creates() + ps_[1]->creates(); }

  std::vector<std::unique_ptr<FakePs>> ps_;
  std::vector<std::unique_ptr<grpc::Server>> servers_;
  std::unique_ptr<VariablePlacer> placer_;
};

// A partitioned variable whose shard name is taken on ps:1: the shard made on ps:0 is deleted,
// and once the name is free the same create succeeds.
TEST_F(VariablesTest, FailedCreateLeavesNothingAndCanBeRetried) {
  ps_[1]->Add("w/part_1");
  absl::StatusOr<Placement> p = placer_->GetOrCreate(Zeros("w", {4, 2}), "fixed:2");
  EXPECT_EQ(p.status().code(), absl::StatusCode::kAlreadyExists) << p.status();
  EXPECT_THAT(p.status().message(), HasSubstr("CreateVariables at ps:1"));
  EXPECT_THAT(ps_[0]->names(), IsEmpty());
  ps_[1]->Remove("w/part_1");
  p = placer_->GetOrCreate(Zeros("w", {4, 2}), "fixed:2");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->shards_size(), 2);
  EXPECT_THAT(ps_[0]->names(), UnorderedElementsAre("w/part_0"));
  EXPECT_THAT(ps_[1]->names(), UnorderedElementsAre("w/part_1"));
  // Get-or-create: the same variable again is the same placement, with nothing sent.
  const int creates = Creates();
  EXPECT_TRUE(placer_->GetOrCreate(Undrawable("w", {4, 2}), "fixed:2").ok());
  EXPECT_EQ(Creates(), creates);
  EXPECT_EQ(placer_->GetOrCreate(Undrawable("w", {4, 3}), "").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(VariablesTest, ShardNamesCollidingWithVariablesAreRefusedBeforeSending) {
  ASSERT_TRUE(placer_->GetOrCreate(Zeros("a/part_1", {3}), "").ok());
  const int creates = Creates();
  absl::StatusOr<Placement> p = placer_->GetOrCreate(Undrawable("a", {4, 2}), "fixed:2");
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("'a/part_1' is taken"));
  EXPECT_EQ(Creates(), creates);
}

TEST_F(VariablesTest, ShapesThatCannotExistOrTravelAreRefusedBeforeDrawing) {
  struct Case {
    std::vector<int64_t> shape;
    std::string partitioner;
    const char* message;
  };
  const std::vector<Case> cases = {
      {{int64_t{1} << 32, int64_t{1} << 32}, "", "more elements than int64 holds"},
      {{274177, 67280421310721}, "", "more elements than int64 holds"},
      {{int64_t{1} << 62}, "", "more elements than int64 holds"},
      {{-1, 4}, "", "negative dimension"},
      {std::vector<int64_t>(33, 1), "", "rank 33 exceeds 32"},
      {{(int64_t{1} << 31) + 1}, "", "over the chief's limit of 8.0 GiB"},
      {{600, 1 << 18}, "none", "use partitioner \"auto\""},  // 600 MiB in one shard
      {{1, 1 << 28}, "", "one row of shape"},                // a 1 GiB row
      {{1 << 20, 4}, "fixed:100000", "at most 65536"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Placement> p = placer_->GetOrCreate(Undrawable("v", c.shape), c.partitioner);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(p.status().message(), HasSubstr(c.message));
    EXPECT_THAT(p.status().message(), HasSubstr("variable 'v'"));
  }
  EXPECT_EQ(Creates(), 0);
}

TEST_F(VariablesTest, AutoSplitsLargeVariablesOverThePs) {
  absl::StatusOr<Placement> big = placer_->GetOrCreate(Zeros("big", {784, 256}), "");
  ASSERT_TRUE(big.ok()) << big.status();
  ASSERT_EQ(big->shards_size(), 2);
  EXPECT_NE(big->shards(0).ps_task(), big->shards(1).ps_task());
  absl::StatusOr<Placement> small = placer_->GetOrCreate(Zeros("small", {10, 10}), "");
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->shards_size(), 1);
  EXPECT_EQ(small->shards(0).name(), "small");
  EXPECT_EQ(placer_->NumShards(), 3);
}

VariableSpec Spec(const std::string& name) {
  VariableSpec s;
  s.set_name(name);
  s.add_shape(3);
  return s;
}

TEST(VariableFromSpecTest, OptimizerIsTheJobsOnlyWhenAbsent) {
  OptimizerConfig job;
  job.set_name("sgd");
  job.set_learning_rate(0.5);
  absl::StatusOr<NewVariable> v = VariableFromSpec(Spec("w"), job);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->optimizer.name(), "sgd");
  absl::StatusOr<Tensor> value = v->initial_value();
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(value->shape, std::vector<int64_t>{3});

  VariableSpec nameless = Spec("w");
  nameless.mutable_optimizer()->set_learning_rate(-1);
  v = VariableFromSpec(nameless, job);
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(v.status().message(),
              HasSubstr("variable 'w': the optimizer has fields set but no name"));

  VariableSpec bad_lr = Spec("w");
  bad_lr.mutable_optimizer()->set_name("adam");
  bad_lr.mutable_optimizer()->set_learning_rate(std::nan(""));
  EXPECT_THAT(VariableFromSpec(bad_lr, job).status().message(),
              HasSubstr("optimizer.learning_rate nan must be positive and finite"));
  VariableSpec unknown = Spec("w");
  unknown.mutable_optimizer()->set_name("adamw");
  unknown.mutable_optimizer()->set_learning_rate(0.1);
  EXPECT_THAT(VariableFromSpec(unknown, job).status().message(), HasSubstr("\"adamw\""));
  VariableSpec schedule = Spec("w");
  *schedule.mutable_optimizer() = job;
  schedule.mutable_optimizer()->mutable_schedule()->set_kind("step");
  EXPECT_THAT(VariableFromSpec(schedule, job).status().message(),
              HasSubstr("optimizer.schedule.step_size 0 must be positive with "
                        "optimizer.schedule.kind step"));
}

TEST(VariableFromSpecTest, NamesAndInitializersAreChecked) {
  OptimizerConfig job;
  job.set_name("sgd");
  job.set_learning_rate(0.5);
  EXPECT_EQ(VariableFromSpec(Spec(""), job).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(VariableFromSpec(Spec(std::string(kMaxNameBytes + 1, 'n')), job).status().code(),
            absl::StatusCode::kInvalidArgument);
  VariableSpec kind = Spec("w");
  kind.mutable_initializer()->set_kind("ones");
  EXPECT_THAT(VariableFromSpec(kind, job).status().message(), HasSubstr("unknown initializer"));
  VariableSpec uniform = Spec("w");
  uniform.mutable_initializer()->set_kind("uniform");
  uniform.mutable_initializer()->set_low(1);
  uniform.mutable_initializer()->set_high(1);
  EXPECT_THAT(VariableFromSpec(uniform, job).status().message(), HasSubstr("low < high"));
}

}  // namespace
}  // namespace pstrain
