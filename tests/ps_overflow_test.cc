// Finite in, finite out: a push whose gradients are finite but whose update would make a stored
// value or an optimizer slot non-finite is refused whole, like a non-finite gradient (nothing
// applied, counted in nonfinite_rejected); out-of-range hyper-parameters are refused when the
// variable or table is created. Expected values are computed by hand in float.
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/ps.h"
#include "ps_tables_testing.h"
#include "ps_testing.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace ps_testing;

constexpr float kBig = 3.4e38f;  // finite; kBig + kBig is not

// A 1-D tensor holding `values`.
Tensor Values(std::vector<float> values) {
  Tensor t({static_cast<int64_t>(values.size())});
  t.values = std::move(values);
  return t;
}

absl::Status CreateWith(ParameterServer* ps, const std::string& name, const Tensor& init,
                        const OptimizerConfig& opt) {
  CreateVariablesRequest req = CreateReq(name, init);
  *req.mutable_variables(0)->mutable_optimizer() = opt;
  CreateVariablesResponse resp;
  return ps->CreateVariables(req, &resp);
}

OptimizerConfig Named(const std::string& name, double lr) {
  OptimizerConfig o = Sgd(lr);
  o.set_name(name);
  return o;
}

absl::Status PushValues(ParameterServer* ps, const std::string& name,
                        const std::vector<float>& grad, uint64_t read_version) {
  PushResponse resp;
  return ps->Push(PushReq(Worker(0), name, Values(grad), read_version), &resp);
}

class OverflowTest : public ::testing::Test {
 protected:
  // Accepts the first push of `grad`, refuses the second, and leaves the variable as the first
  // push left it; returns the value after the first push.
  std::vector<float> SecondPushRefused(const std::string& name, const std::vector<float>& init,
                                       const OptimizerConfig& opt, const std::vector<float>& grad) {
    SCOPED_TRACE(name);
    const Tensor start = Values(init);
    EXPECT_TRUE(CreateWith(ps_.get(), name, start, opt).ok());
    absl::Status first = PushValues(ps_.get(), name, grad, 0);
    EXPECT_TRUE(first.ok()) << first;
    const Pulled after_first = PullAsChief(ps_.get(), name);
    EXPECT_EQ(after_first.version, 1u);
    for (float v : after_first.values) EXPECT_TRUE(std::isfinite(v)) << v;
    const int64_t rejected = Stats(ps_.get()).nonfinite_rejected();
    absl::Status second = PushValues(ps_.get(), name, grad, 1);
    EXPECT_EQ(second.code(), absl::StatusCode::kInvalidArgument) << second;
    EXPECT_THAT(second.message(), HasSubstr("'" + name + "'"));
    EXPECT_THAT(second.message(), HasSubstr("non-finite"));
    EXPECT_THAT(second.message(), HasSubstr("nothing of the push was applied"));
    EXPECT_EQ(PullAsChief(ps_.get(), name), after_first) << "a refused push changed the variable";
    EXPECT_EQ(Stats(ps_.get()).nonfinite_rejected(), rejected + 1);
    return after_first.values;
  }

  std::unique_ptr<ParameterServer> ps_ = MakePs();
};

TEST_F(OverflowTest, SgdTwoFinitePushesOfMaxFloatRefuseTheSecond) {
  // lr 1: 0 - 3.4e38 is finite; -3.4e38 - 3.4e38 is -inf.
  EXPECT_THAT(SecondPushRefused("sgd", {0.0f, 1.0f}, Sgd(1.0), {kBig, 0.0f}),
              ElementsAre(-kBig, 1.0f));
}

TEST_F(OverflowTest, MomentumBufferOverflowIsRefused) {
  // buf = 0.9 buf + g: 3e38, then 0.9 * 3e38 + 3e38 = 5.7e38 (inf); w stays small (lr 1e-3).
  OptimizerConfig o = Named("momentum", 1e-3);
  o.set_momentum(0.9);
  const std::vector<float> w = SecondPushRefused("momentum", {1.0f}, o, {3e38f});
  EXPECT_EQ(w[0], 1.0f + static_cast<float>(-1e-3) * 3e38f);
}

TEST_F(OverflowTest, AdagradSumOverflowIsRefused) {
  // g = 1.5e19: sum = 0.1 + g^2 = 2.25e38 after the first push, 4.5e38 (inf) after a second.
  OptimizerConfig o = Named("adagrad", 0.1);
  o.set_initial_accumulator_value(0.1);
  const std::vector<float> w = SecondPushRefused("adagrad", {2.0f}, o, {1.5e19f});
  const float g = 1.5e19f, sum = 0.1f + g * g;
  EXPECT_EQ(w[0], 2.0f + static_cast<float>(-0.1) * (g / (std::sqrt(sum) + 1e-10f)));
}

TEST_F(OverflowTest, AdamSecondMomentOverflowIsRefusedAtTheFirstPush) {
  // v = 0.001 g^2 overflows for g = 3e38 at once: the first push is refused and the variable
  // keeps its initial value; a small gradient is then applied as usual.
  ASSERT_TRUE(CreateWith(ps_.get(), "adam", Values({1.0f, -1.0f}), Named("adam", 0.01)).ok());
  absl::Status s = PushValues(ps_.get(), "adam", {1.0f, 3e38f}, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("element 1"));
  EXPECT_EQ(PullAsChief(ps_.get(), "adam"), (Pulled{{1.0f, -1.0f}, 0}));
  ASSERT_TRUE(PushValues(ps_.get(), "adam", {1.0f, -1.0f}, 0).ok());
  const Pulled p = PullAsChief(ps_.get(), "adam");
  EXPECT_EQ(p.version, 1u);
  // Adam's first step moves each weight by lr against the gradient's sign.
  EXPECT_NEAR(p.values[0], 0.99f, 1e-6);
  EXPECT_NEAR(p.values[1], -0.99f, 1e-6);
}

TEST_F(OverflowTest, RmsPropAndFtrlSlotOverflowsAreRefused) {
  // rmsprop: square_avg = 0.01 g^2 is inf for g = 3e38; ftrl: n = 0.1 + g^2 rounds to an inf
  // float for g = 2e19 (4e38).
  for (const auto& [name, g] : {std::pair<std::string, float>{"rmsprop", 3e38f}, {"ftrl", 2e19f}}) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(CreateWith(ps_.get(), name, Values({0.5f}), Named(name, 0.01)).ok());
    absl::Status s = PushValues(ps_.get(), name, {g}, 0);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr("non-finite"));
    EXPECT_EQ(PullAsChief(ps_.get(), name), (Pulled{{0.5f}, 0}));
    ASSERT_TRUE(PushValues(ps_.get(), name, {1.0f}, 0).ok()) << "a small gradient still applies";
    EXPECT_EQ(PullAsChief(ps_.get(), name).version, 1u);
  }
}

TEST_F(OverflowTest, APushIsRefusedWholeWhenOneOfItsUpdatesWouldOverflow) {
  ASSERT_TRUE(CreateWith(ps_.get(), "a", Values({0.0f}), Sgd(1.0)).ok());
  ASSERT_TRUE(CreateWith(ps_.get(), "b", Values({-kBig}), Sgd(1.0)).ok());
  for (const char* order : {"ab", "ba"}) {
    SCOPED_TRACE(order);
    PushRequest req;
    *req.mutable_sender() = Worker(0);
    for (const char* c = order; *c != '\0'; ++c) {
      Gradient* g = req.add_gradients();
      g->set_name(std::string(1, *c));
      EncodeTensor(Values({1e38f}), g->mutable_gradient());
    }
    PushResponse resp;
    absl::Status s = ps_->Push(req, &resp);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr("'b'"));
    EXPECT_EQ(resp.versions_size(), 0);
    EXPECT_EQ(PullAsChief(ps_.get(), "a"), (Pulled{{0.0f}, 0})) << "the good half was applied";
    EXPECT_EQ(PullAsChief(ps_.get(), "b"), (Pulled{{-kBig}, 0}));
  }
  EXPECT_EQ(Stats(ps_.get()).nonfinite_rejected(), 2);
}

TEST_F(OverflowTest, OutOfRangeHyperParametersAreRefusedAtCreationNamingFieldAndValue) {
  struct Case {
    const char* what;
    OptimizerConfig opt;
    const char* message;
  };
  std::vector<Case> cases;
  cases.push_back({"lr 1e300", Sgd(1e300), "learning_rate 1e+300 must be positive and finite"});
  cases.push_back({"lr over 1e6", Sgd(2e6), "at most 1e+06"});
  OptimizerConfig o = Named("adam", 0.1);
  o.set_epsilon(2.0);
  cases.push_back({"epsilon 2", o, "epsilon 2 must be non-negative and finite, at most 1"});
  o = Named("ftrl", 0.1);
  o.set_l1(1e7);
  cases.push_back({"l1 1e7", o, "l1 1e+07"});
  o = Named("ftrl", 0.1);
  o.set_l2(1e7);
  cases.push_back({"l2 1e7", o, "l2 1e+07"});
  o = Named("ftrl", 0.1);
  o.set_learning_rate_power(-11);
  cases.push_back({"power -11", o, "learning_rate_power -11 must be non-positive and finite"});
  o = Named("adagrad", 0.1);
  o.set_initial_accumulator_value(1e7);
  cases.push_back({"initial accumulator 1e7", o, "initial_accumulator_value 1e+07"});
  o = Sgd(0.1);
  o.set_clip_norm(1e39);
  cases.push_back({"clip_norm 1e39", o, "clip_norm 1e+39"});
  o = Named("momentum", 0.1);
  o.set_momentum(1.0);
  cases.push_back({"momentum 1", o, "momentum 1 must be in [0, 1)"});
  o = Named("adam", 0.1);
  o.set_beta2(std::nan(""));
  cases.push_back({"beta2 nan", o, "beta2 nan"});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    absl::Status s = CreateWith(ps_.get(), "v", Values({0.0f}), c.opt);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr(c.message));
    EXPECT_THAT(s.message(), HasSubstr("'v'"));
  }
  PullRequest req;
  *req.mutable_sender() = Chief();
  req.add_names("v");
  PullResponse resp;
  EXPECT_EQ(ps_->Pull(req, &resp).code(), absl::StatusCode::kNotFound) << "nothing was created";
  // The bounds themselves are valid.
  EXPECT_TRUE(CreateWith(ps_.get(), "v", Values({0.0f}), Sgd(1e6)).ok());
}

TEST_F(OverflowTest, ATableRowIsNeverMadeNonFinite) {
  ASSERT_TRUE(CreateTables(ps_.get(), {TableOf("emb", 2, 0.0f, 1.0)}).ok());
  ASSERT_THAT(Rows(ps_.get(), "emb", {7}), ElementsAre(0.0f, 0.0f));
  ASSERT_TRUE(PushSparse(ps_.get(), Worker(0), {Grad("emb", {7}, {kBig, 1.0f}, 0)}).ok());
  uint64_t version = 0;
  EXPECT_THAT(Rows(ps_.get(), "emb", {7}, &version), ElementsAre(-kBig, -1.0f));
  EXPECT_EQ(version, 1u);
  absl::Status s = PushSparse(ps_.get(), Worker(0), {Grad("emb", {7}, {kBig, 1.0f}, 1)});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("key 7"));
  EXPECT_THAT(s.message(), HasSubstr("non-finite"));
  EXPECT_THAT(Rows(ps_.get(), "emb", {7}, &version), ElementsAre(-kBig, -1.0f));
  EXPECT_EQ(version, 1u);
  EXPECT_EQ(Stats(ps_.get()).nonfinite_rejected(), 1);
}

TEST_F(OverflowTest, ATableWithAnOutOfRangeLearningRateIsNotCreated) {
  absl::Status s = CreateTables(ps_.get(), {TableOf("emb", 2, 0.0f, 1e300)});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("learning_rate 1e+300"));
}

// Sync mode applies the average of a step's gradients: a step whose update would overflow is
// dropped (the step counts, its update is not applied) and counted.
TEST(OverflowSyncTest, AStepWhoseAverageWouldOverflowIsNotApplied) {
  const ConfigureRequest config = Config("sync", 1, 1, 0, 10, {});
  std::unique_ptr<ParameterServer> ps = MakePs(&config);
  ASSERT_TRUE(CreateWith(ps.get(), "w", Values({-kBig}), Sgd(1.0)).ok());
  ASSERT_TRUE(PushValues(ps.get(), "w", {kBig}, 0).ok());
  EXPECT_EQ(PullAsChief(ps.get(), "w"), (Pulled{{-kBig}, 1}));
  EXPECT_EQ(Stats(ps.get()).nonfinite_rejected(), 1);
  ASSERT_TRUE(PushValues(ps.get(), "w", {-1e38f}, 1).ok());
  EXPECT_EQ(PullAsChief(ps.get(), "w"), (Pulled{{-kBig + 1e38f}, 2}));
}

}  // namespace
}  // namespace pstrain
