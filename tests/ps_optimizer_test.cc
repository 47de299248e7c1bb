// Optimizers on the parameter server: SGD and Adam against arithmetic written out in double, and
// the factory's validation of optimizer configs.

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/optimizer.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

constexpr double kTol = 1e-6;

OptimizerConfig Config(const std::string& name, double lr, double beta1 = 0, double beta2 = 0,
                       double eps = 0) {
  OptimizerConfig c;
  c.set_name(name);
  c.set_learning_rate(lr);
  c.set_beta1(beta1);
  c.set_beta2(beta2);
  c.set_epsilon(eps);
  return c;
}

std::unique_ptr<Optimizer> MustCreate(const OptimizerConfig& config, int64_t n) {
  absl::StatusOr<std::unique_ptr<Optimizer>> opt = CreateOptimizer(config, n);
  EXPECT_TRUE(opt.ok()) << opt.status();
  return opt.ok() ? *std::move(opt) : nullptr;
}

TEST(SgdOptimizerTest, ThreeStepsMatchHandArithmetic) {
  std::unique_ptr<Optimizer> sgd = MustCreate(Config("sgd", 0.1), 3);
  ASSERT_NE(sgd, nullptr);
  EXPECT_EQ(sgd->name(), "sgd");
  std::vector<float> w = {1.0f, -2.0f, 0.5f};
  const std::vector<std::vector<float>> grads = {
      {0.5f, -1.0f, 2.0f}, {0.25f, 0.5f, -1.0f}, {-0.75f, 0.3f, 4.0f}};
  for (const std::vector<float>& g : grads) sgd->Apply(w.data(), g.data(), 3);

  // w -= lr * g, three times.
  EXPECT_NEAR(w[0], 1.0 - 0.1 * 0.5 - 0.1 * 0.25 - 0.1 * -0.75, kTol);  // 1.0
  EXPECT_NEAR(w[1], -2.0 - 0.1 * -1.0 - 0.1 * 0.5 - 0.1 * 0.3, kTol);   // -1.98
  EXPECT_NEAR(w[2], 0.5 - 0.1 * 2.0 - 0.1 * -1.0 - 0.1 * 4.0, kTol);    // 0.0
}

TEST(AdamOptimizerTest, ThreeStepsMatchHandArithmeticWithDefaults) {
  // beta1, beta2, epsilon left at 0 mean 0.9, 0.999, 1e-8.
  std::unique_ptr<Optimizer> adam = MustCreate(Config("adam", 0.01), 2);
  ASSERT_NE(adam, nullptr);
  EXPECT_EQ(adam->name(), "adam");
  std::vector<float> w = {1.0f, -0.5f};
  const std::vector<std::vector<float>> grads = {{0.5f, 2.0f}, {-0.25f, 1.0f}, {1.0f, -3.0f}};
  for (const std::vector<float>& g : grads) adam->Apply(w.data(), g.data(), 2);
  EXPECT_EQ(static_cast<AdamOptimizer*>(adam.get())->step(), 3);

  // Element 0: gradients 0.5, -0.25, 1.0.
  double m = 0, v = 0, w0 = 1.0;
  m = 0.9 * m + 0.1 * 0.5;  // t = 1
  v = 0.999 * v + 0.001 * 0.5 * 0.5;
  w0 -= 0.01 * (m / (1 - 0.9)) / (std::sqrt(v / (1 - 0.999)) + 1e-8);
  m = 0.9 * m + 0.1 * -0.25;  // t = 2
  v = 0.999 * v + 0.001 * -0.25 * -0.25;
  w0 -= 0.01 * (m / (1 - 0.9 * 0.9)) / (std::sqrt(v / (1 - 0.999 * 0.999)) + 1e-8);
  m = 0.9 * m + 0.1 * 1.0;  // t = 3
  v = 0.999 * v + 0.001 * 1.0 * 1.0;
  w0 -= 0.01 * (m / (1 - 0.9 * 0.9 * 0.9)) / (std::sqrt(v / (1 - 0.999 * 0.999 * 0.999)) + 1e-8);
  EXPECT_NEAR(w[0], w0, kTol);

  // Element 1: gradients 2.0, 1.0, -3.0.
  double m1 = 0, v1 = 0, w1 = -0.5;
  m1 = 0.9 * m1 + 0.1 * 2.0;  // t = 1
  v1 = 0.999 * v1 + 0.001 * 2.0 * 2.0;
  w1 -= 0.01 * (m1 / (1 - 0.9)) / (std::sqrt(v1 / (1 - 0.999)) + 1e-8);
  m1 = 0.9 * m1 + 0.1 * 1.0;  // t = 2
  v1 = 0.999 * v1 + 0.001 * 1.0 * 1.0;
  w1 -= 0.01 * (m1 / (1 - 0.9 * 0.9)) / (std::sqrt(v1 / (1 - 0.999 * 0.999)) + 1e-8);
  m1 = 0.9 * m1 + 0.1 * -3.0;  // t = 3
  v1 = 0.999 * v1 + 0.001 * -3.0 * -3.0;
  w1 -= 0.01 * (m1 / (1 - 0.9 * 0.9 * 0.9)) / (std::sqrt(v1 / (1 - 0.999 * 0.999 * 0.999)) + 1e-8);
  EXPECT_NEAR(w[1], w1, kTol);
}

TEST(AdamOptimizerTest, ThreeStepsMatchHandArithmeticWithCustomHyperParameters) {
  // A large epsilon and small betas make every hyper-parameter visible in the result.
  std::unique_ptr<Optimizer> adam = MustCreate(Config("adam", 0.1, 0.5, 0.75, 0.1), 1);
  ASSERT_NE(adam, nullptr);
  float w = 2.0f;
  for (float g : {1.0f, -2.0f, 0.5f}) adam->Apply(&w, &g, 1);

  double m = 0, v = 0, want = 2.0;
  m = 0.5 * m + 0.5 * 1.0;  // t = 1
  v = 0.75 * v + 0.25 * 1.0 * 1.0;
  want -= 0.1 * (m / (1 - 0.5)) / (std::sqrt(v / (1 - 0.75)) + 0.1);
  m = 0.5 * m + 0.5 * -2.0;  // t = 2
  v = 0.75 * v + 0.25 * -2.0 * -2.0;
  want -= 0.1 * (m / (1 - 0.5 * 0.5)) / (std::sqrt(v / (1 - 0.75 * 0.75)) + 0.1);
  m = 0.5 * m + 0.5 * 0.5;  // t = 3
  v = 0.75 * v + 0.25 * 0.5 * 0.5;
  want -= 0.1 * (m / (1 - 0.5 * 0.5 * 0.5)) / (std::sqrt(v / (1 - 0.75 * 0.75 * 0.75)) + 0.1);
  EXPECT_NEAR(w, want, kTol);
}

TEST(AdamOptimizerTest, FirstStepMovesByLearningRateAgainstGradientSign) {
  // With bias correction, mhat = g and vhat = g^2 at t = 1, so the step is lr * g / (|g| + eps).
  std::unique_ptr<Optimizer> adam = MustCreate(Config("adam", 0.001), 3);
  ASSERT_NE(adam, nullptr);
  std::vector<float> w = {0.0f, 0.0f, 0.0f};
  const std::vector<float> g = {1e-3f, -50.0f, 0.0f};
  adam->Apply(w.data(), g.data(), 3);
  EXPECT_NEAR(w[0], -0.001, kTol);
  EXPECT_NEAR(w[1], 0.001, kTol);
  EXPECT_EQ(w[2], 0.0f);  // 0 / (0 + eps)
}

TEST(AdamOptimizerTest, ZeroHyperParametersMeanDefaults) {
  std::unique_ptr<Optimizer> zeros = MustCreate(Config("adam", 0.01), 2);
  std::unique_ptr<Optimizer> explicit_defaults =
      MustCreate(Config("adam", 0.01, 0.9, 0.999, 1e-8), 2);
  ASSERT_NE(zeros, nullptr);
  ASSERT_NE(explicit_defaults, nullptr);
  std::vector<float> a = {1.0f, 2.0f}, b = a;
  for (const std::vector<float>& g : {std::vector<float>{0.1f, -0.2f}, {0.3f, 0.4f}}) {
    zeros->Apply(a.data(), g.data(), 2);
    explicit_defaults->Apply(b.data(), g.data(), 2);
  }
  EXPECT_EQ(a, b);
}

TEST(AdamOptimizerTest, SlotsBelongToEachOptimizer) {
  // Two variables' optimizers do not share moments or step counts.
  std::unique_ptr<Optimizer> a = MustCreate(Config("adam", 0.01), 1);
  std::unique_ptr<Optimizer> b = MustCreate(Config("adam", 0.01), 1);
  float wa = 0, wb = 0, g = 1.0f;
  a->Apply(&wa, &g, 1);
  a->Apply(&wa, &g, 1);
  b->Apply(&wb, &g, 1);
  EXPECT_NEAR(wb, -0.01, kTol);
  EXPECT_NEAR(wa, -0.02, kTol);  // constant gradient: every bias-corrected step is lr
}

void ExpectRejected(const OptimizerConfig& config, const std::string& message) {
  absl::StatusOr<std::unique_ptr<Optimizer>> opt = CreateOptimizer(config, 4);
  ASSERT_FALSE(opt.ok()) << config.DebugString();
  EXPECT_EQ(opt.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(opt.status().message(), HasSubstr(message)) << config.DebugString();
}

TEST(CreateOptimizerTest, RejectsUnknownName) {
  ExpectRejected(Config("foo", 0.1), "unknown optimizer 'foo' (known: sgd, adam)");
  ExpectRejected(Config("", 0.1), "unknown optimizer '' (known: sgd, adam)");
  ExpectRejected(Config("SGD", 0.1), "unknown optimizer 'SGD'");
}

TEST(CreateOptimizerTest, RejectsBadLearningRate) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const char* name : {"sgd", "adam"}) {
    for (double lr : {0.0, -0.1, inf, -inf, nan}) {
      ExpectRejected(Config(name, lr), "learning rate must be finite and positive");
    }
  }
}

TEST(CreateOptimizerTest, RejectsBetaOutsideHalfOpenUnitInterval) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (double beta : {1.0, 1.5, -0.1, nan}) {
    ExpectRejected(Config("adam", 0.1, beta, 0.999), "adam beta1 must be in [0, 1)");
    ExpectRejected(Config("adam", 0.1, 0.9, beta), "adam beta2 must be in [0, 1)");
  }
}

TEST(CreateOptimizerTest, RejectsNegativeOrNonFiniteEpsilon) {
  ExpectRejected(Config("adam", 0.1, 0.9, 0.999, -1e-8),
                 "adam epsilon must be finite and non-negative");
  ExpectRejected(Config("adam", 0.1, 0.9, 0.999, std::numeric_limits<double>::infinity()),
                 "adam epsilon must be finite and non-negative");
}

TEST(CreateOptimizerTest, AcceptsValidConfigs) {
  EXPECT_TRUE(CreateOptimizer(Config("sgd", 1.0), 10).ok());
  EXPECT_TRUE(CreateOptimizer(Config("adam", 1e-3), 10).ok());
  EXPECT_TRUE(CreateOptimizer(Config("adam", 1e-3, 0.5, 0.25, 1e-3), 0).ok());
}

}  // namespace
}  // namespace pstrain
