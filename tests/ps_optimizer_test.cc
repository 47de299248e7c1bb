// Optimizers on the parameter server against arithmetic written out in double: SGD, momentum,
// Adagrad, Adam, RMSprop and FTRL updates, learning-rate schedules, gradient clipping, slots, and
// slots. (ps_optimizer_config_test checks validation; ps_torch_optim_test compares with torch.)

#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <numbers>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "optimizer_testing.h"
#include "ps/optimizer.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Applies `grads` in turn at steps 0, 1, ...
void ApplyAll(Optimizer& opt, std::vector<float>& w, const std::vector<std::vector<float>>& grads) {
  int64_t step = 0;
  for (const std::vector<float>& g : grads) {
    opt.Apply(w.data(), g.data(), static_cast<int64_t>(w.size()), step++);
  }
}

TEST(SgdOptimizerTest, ThreeStepsMatchHandArithmetic) {
  std::unique_ptr<Optimizer> sgd = MustCreate(Config("sgd", 0.1), 3);
  ASSERT_NE(sgd, nullptr);
  EXPECT_EQ(sgd->name(), "sgd");
  EXPECT_TRUE(sgd->slots().empty());
  std::vector<float> w = {1.0f, -2.0f, 0.5f};
  ApplyAll(*sgd, w, {{0.5f, -1.0f, 2.0f}, {0.25f, 0.5f, -1.0f}, {-0.75f, 0.3f, 4.0f}});

  // w -= lr * g, three times.
  EXPECT_NEAR(w[0], 1.0 - 0.1 * 0.5 - 0.1 * 0.25 - 0.1 * -0.75, kTol);  // 1.0
  EXPECT_NEAR(w[1], -2.0 - 0.1 * -1.0 - 0.1 * 0.5 - 0.1 * 0.3, kTol);   // -1.98
  EXPECT_NEAR(w[2], 0.5 - 0.1 * 2.0 - 0.1 * -1.0 - 0.1 * 4.0, kTol);    // 0.0
}

TEST(MomentumOptimizerTest, ThreeStepsMatchHandArithmetic) {
  OptimizerConfig c = Config("momentum", 0.1);
  c.set_momentum(0.9);
  std::unique_ptr<Optimizer> opt = MustCreate(c, 1);
  ASSERT_NE(opt, nullptr);
  EXPECT_EQ(opt->name(), "momentum");
  std::vector<float> w = {1.0f};
  ApplyAll(*opt, w, {{0.5f}, {-1.0f}, {2.0f}});
  double b = 0.5, want = 1.0 - 0.1 * b;  // first update: b = g
  b = 0.9 * b + -1.0, want -= 0.1 * b;
  b = 0.9 * b + 2.0, want -= 0.1 * b;
  EXPECT_NEAR(w[0], want, kTol);
  EXPECT_NEAR(SlotValues(*opt, 1)["momentum_buffer"][0], b, kTol);
}

TEST(MomentumOptimizerTest, NesterovThreeStepsMatchHandArithmetic) {
  OptimizerConfig c = Config("momentum", 0.1);
  c.set_momentum(0.5);
  c.set_nesterov(true);
  std::unique_ptr<Optimizer> opt = MustCreate(c, 1);
  ASSERT_NE(opt, nullptr);
  std::vector<float> w = {1.0f};
  ApplyAll(*opt, w, {{0.5f}, {-1.0f}, {2.0f}});
  double b = 0.5, want = 1.0 - 0.1 * (0.5 + 0.5 * b);
  b = 0.5 * b + -1.0, want -= 0.1 * (-1.0 + 0.5 * b);
  b = 0.5 * b + 2.0, want -= 0.1 * (2.0 + 0.5 * b);
  EXPECT_NEAR(w[0], want, kTol);
}

TEST(MomentumOptimizerTest, ZeroMomentumIsPlainSgdWithoutSlots) {
  std::unique_ptr<Optimizer> opt = MustCreate(Config("momentum", 0.1), 1);
  ASSERT_NE(opt, nullptr);
  EXPECT_TRUE(opt->slots().empty());
  std::vector<float> w = {1.0f};
  ApplyAll(*opt, w, {{0.5f}, {-1.0f}});
  EXPECT_NEAR(w[0], 1.0 - 0.05 + 0.1, kTol);
}

TEST(AdagradOptimizerTest, ThreeStepsMatchHandArithmetic) {
  OptimizerConfig c = Config("adagrad", 0.5);
  c.set_initial_accumulator_value(0.25);
  c.set_epsilon(0.01);
  std::unique_ptr<Optimizer> opt = MustCreate(c, 1);
  ASSERT_NE(opt, nullptr);
  EXPECT_EQ(SlotValues(*opt, 1)["sum"], std::vector<float>{0.25f});
  std::vector<float> w = {1.0f};
  ApplyAll(*opt, w, {{0.5f}, {-1.0f}, {2.0f}});
  double sum = 0.25, want = 1.0;
  for (double g : {0.5, -1.0, 2.0}) {
    sum += g * g;
    want -= 0.5 * g / (std::sqrt(sum) + 0.01);
  }
  EXPECT_NEAR(w[0], want, kTol);
  EXPECT_NEAR(SlotValues(*opt, 1)["sum"][0], 5.5, kTol);
}

TEST(AdagradOptimizerTest, DefaultsAreZeroAccumulatorAndTinyEpsilon) {
  std::unique_ptr<Optimizer> opt = MustCreate(Config("adagrad", 0.1), 1);
  ASSERT_NE(opt, nullptr);
  std::vector<float> w = {0.0f};
  ApplyAll(*opt, w, {{4.0f}});
  EXPECT_NEAR(w[0], -0.1 * 4.0 / (4.0 + 1e-10), kTol);  // sum = 16
}

TEST(RmsPropOptimizerTest, ThreeStepsMatchHandArithmeticWithAndWithoutMomentum) {
  for (double momentum : {0.0, 0.8}) {
    OptimizerConfig c = Config("rmsprop", 0.01);
    c.set_rho(0.9);
    c.set_epsilon(0.1);
    c.set_momentum(momentum);
    std::unique_ptr<Optimizer> opt = MustCreate(c, 1);
    ASSERT_NE(opt, nullptr);
    EXPECT_EQ(opt->slots().size(), momentum > 0 ? 2u : 1u);
    std::vector<float> w = {1.0f};
    ApplyAll(*opt, w, {{0.5f}, {-1.0f}, {2.0f}});
    double sq = 0, buf = 0, want = 1.0;
    for (double g : {0.5, -1.0, 2.0}) {
      sq = 0.9 * sq + 0.1 * g * g;
      const double avg = std::sqrt(sq) + 0.1;
      if (momentum > 0) {
        buf = momentum * buf + g / avg;
        want -= 0.01 * buf;
      } else {
        want -= 0.01 * g / avg;
      }
    }
    EXPECT_NEAR(w[0], want, kTol) << "momentum " << momentum;
    EXPECT_NEAR(SlotValues(*opt, 1)["square_avg"][0], sq, kTol);
  }
}

TEST(AdamOptimizerTest, ThreeStepsMatchHandArithmeticWithDefaults) {
  // beta1, beta2, epsilon unset mean 0.9, 0.999, 1e-8.
  std::unique_ptr<Optimizer> adam = MustCreate(Config("adam", 0.01), 2);
  ASSERT_NE(adam, nullptr);
  EXPECT_EQ(adam->name(), "adam");
  std::vector<float> w = {1.0f, -0.5f};
  ApplyAll(*adam, w, {{0.5f, 2.0f}, {-0.25f, 1.0f}, {1.0f, -3.0f}});
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
  EXPECT_NEAR(SlotValues(*adam, 2)["exp_avg"][0], m, kTol);
  EXPECT_NEAR(SlotValues(*adam, 2)["exp_avg_sq"][0], v, kTol);

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
  std::unique_ptr<Optimizer> adam = MustCreate(Adam(0.1, 0.5, 0.75, 0.1), 1);
  ASSERT_NE(adam, nullptr);
  std::vector<float> w = {2.0f};
  ApplyAll(*adam, w, {{1.0f}, {-2.0f}, {0.5f}});

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
  EXPECT_NEAR(w[0], want, kTol);
}

TEST(AdamOptimizerTest, FirstStepMovesByLearningRateAgainstGradientSign) {
  // With bias correction, mhat = g and vhat = g^2 at t = 1, so the step is lr * g / (|g| + eps).
  std::unique_ptr<Optimizer> adam = MustCreate(Config("adam", 0.001), 3);
  ASSERT_NE(adam, nullptr);
  std::vector<float> w = {0.0f, 0.0f, 0.0f};
  ApplyAll(*adam, w, {{1e-3f, -50.0f, 0.0f}});
  EXPECT_NEAR(w[0], -0.001, kTol);
  EXPECT_NEAR(w[1], 0.001, kTol);
  EXPECT_EQ(w[2], 0.0f);  // 0 / (0 + eps)
}

TEST(AdamOptimizerTest, UnsetHyperParametersMeanDefaults) {
  std::unique_ptr<Optimizer> unset = MustCreate(Config("adam", 0.01), 2);
  std::unique_ptr<Optimizer> explicit_defaults = MustCreate(Adam(0.01, 0.9, 0.999, 1e-8), 2);
  ASSERT_NE(unset, nullptr);
  ASSERT_NE(explicit_defaults, nullptr);
  std::vector<float> a = {1.0f, 2.0f}, b = a;
  ApplyAll(*unset, a, {{0.1f, -0.2f}, {0.3f, 0.4f}});
  ApplyAll(*explicit_defaults, b, {{0.1f, -0.2f}, {0.3f, 0.4f}});
  EXPECT_EQ(a, b);
}

TEST(AdamOptimizerTest, ExplicitZeroBetasAreNotDefaults) {
  // beta1 = beta2 = 0: m = g, v = g^2, no bias correction; each step is lr * g / (|g| + eps).
  std::unique_ptr<Optimizer> adam = MustCreate(Adam(0.1, 0.0, 0.0, 0.5), 1);
  ASSERT_NE(adam, nullptr);
  std::vector<float> w = {0.0f};
  ApplyAll(*adam, w, {{2.0f}, {-0.5f}});
  EXPECT_NEAR(w[0], -0.1 * 2.0 / 2.5 + 0.1 * 0.5 / 1.0, kTol);
}

TEST(AdamOptimizerTest, SlotsBelongToEachOptimizer) {
  // Two variables' optimizers do not share moments or step counts.
  std::unique_ptr<Optimizer> a = MustCreate(Config("adam", 0.01), 1);
  std::unique_ptr<Optimizer> b = MustCreate(Config("adam", 0.01), 1);
  std::vector<float> wa = {0}, wb = {0};
  ApplyAll(*a, wa, {{1.0f}, {1.0f}});
  ApplyAll(*b, wb, {{1.0f}});
  EXPECT_NEAR(wb[0], -0.01, kTol);
  EXPECT_NEAR(wa[0], -0.02, kTol);  // constant gradient: every bias-corrected step is lr
}

// McMahan et al. 2013, Algorithm 1, one coordinate, with beta = 0 and TensorFlow's 2 * l2.
struct McMahanFtrl {
  double alpha, l1, l2, n, z = 0, w;
  void Step(double g) {
    const double sigma = (std::sqrt(n + g * g) - std::sqrt(n)) / alpha;
    z += g - sigma * w;
    n += g * g;
    const double sgn = z < 0 ? -1.0 : 1.0;
    w = std::abs(z) <= l1 ? 0.0 : -(z - sgn * l1) / (std::sqrt(n) / alpha + 2 * l2);
  }
};

TEST(FtrlOptimizerTest, ThreeStepsMatchMcMahanRule) {
  OptimizerConfig c = Config("ftrl", 0.5);
  c.set_l1(0.1);
  c.set_l2(0.2);  // initial_accumulator_value 0.1 and learning_rate_power -0.5 by default
  std::unique_ptr<Optimizer> opt = MustCreate(c, 2);
  ASSERT_NE(opt, nullptr);
  EXPECT_EQ(opt->name(), "ftrl");
  std::vector<float> w = {0.3f, -0.2f};
  const std::vector<std::vector<float>> grads = {{1.0f, -0.25f}, {-0.5f, 0.75f}, {0.8f, 2.0f}};
  ApplyAll(*opt, w, {grads[0]});
  // First step of element 0 by hand: n = 0.1 + 1 = 1.1, sigma = (sqrt(1.1) - sqrt(0.1)) / 0.5,
  // z = 1 - sigma * 0.3 = 0.56045135, w = -(z - 0.1) / (sqrt(1.1) / 0.5 + 0.4) = -0.18435622.
  EXPECT_NEAR(w[0], -0.18435621727965, kTol);
  ApplyAll(*opt, w, {grads[1], grads[2]});

  McMahanFtrl e0{.alpha = 0.5, .l1 = 0.1, .l2 = 0.2, .n = 0.1, .w = 0.3};
  McMahanFtrl e1{.alpha = 0.5, .l1 = 0.1, .l2 = 0.2, .n = 0.1, .w = -0.2};
  for (const std::vector<float>& g : grads) e0.Step(g[0]), e1.Step(g[1]);
  EXPECT_NEAR(w[0], e0.w, kTol);
  EXPECT_NEAR(w[1], e1.w, kTol);
  std::map<std::string, std::vector<float>> slots = SlotValues(*opt, 2);
  EXPECT_NEAR(slots["accumulator"][0], e0.n, kTol);  // 0.1 + 1 + 0.25 + 0.64
  EXPECT_NEAR(slots["linear"][0], e0.z, kTol);
  EXPECT_NEAR(slots["accumulator"][1], e1.n, kTol);
  EXPECT_NEAR(slots["linear"][1], e1.z, kTol);
}

TEST(FtrlOptimizerTest, LinearTermWithinL1GivesExactZero) {
  OptimizerConfig c = Config("ftrl", 0.1);
  c.set_l1(1.0);
  c.set_initial_accumulator_value(0.5);
  std::unique_ptr<Optimizer> opt = MustCreate(c, 2);
  ASSERT_NE(opt, nullptr);
  std::vector<float> w = {0.0f, 0.0f};
  ApplyAll(*opt, w, {{0.4f, -0.9f}, {0.5f, -0.6f}});
  // From w = 0, sigma * w = 0, so z sums the gradients: 0.9 is within l1 = 1, -1.5 is not.
  EXPECT_EQ(w[0], 0.0f);
  EXPECT_FALSE(std::signbit(w[0]));
  McMahanFtrl e1{.alpha = 0.1, .l1 = 1.0, .l2 = 0.0, .n = 0.5, .w = 0.0};
  e1.Step(-0.9);
  EXPECT_EQ(e1.w, 0.0);
  e1.Step(-0.6);
  EXPECT_NEAR(w[1], e1.w, kTol);  // -(-1.5 + 1) / (sqrt(0.5 + 0.81 + 0.36) / 0.1) > 0
  EXPECT_GT(w[1], 0.0f);
}

TEST(FtrlOptimizerTest, GeneralLearningRatePower) {
  // p = -1: n^-p = n, so sigma = g^2 / lr and the denominator is n / lr + 2 l2.
  OptimizerConfig c = Config("ftrl", 0.5);
  c.set_learning_rate_power(-1.0);
  c.set_l1(0.05);
  c.set_l2(0.1);
  c.set_initial_accumulator_value(0.2);
  std::unique_ptr<Optimizer> opt = MustCreate(c, 1);
  ASSERT_NE(opt, nullptr);
  std::vector<float> w = {0.4f};
  ApplyAll(*opt, w, {{1.0f}, {-0.5f}, {0.25f}});
  double n = 0.2, z = 0, want = 0.4;
  for (double g : {1.0, -0.5, 0.25}) {
    z += g - (g * g / 0.5) * want;
    n += g * g;
    want = std::abs(z) <= 0.05 ? 0.0 : -(z - std::copysign(0.05, z)) / (n / 0.5 + 0.2);
  }
  EXPECT_NEAR(w[0], want, kTol);

  // p = 0: a fixed learning rate, sigma = 0, z is the sum of the gradients (here 1.5).
  c.set_learning_rate_power(0.0);
  opt = MustCreate(c, 1);
  ASSERT_NE(opt, nullptr);
  w = {0.4f};
  ApplyAll(*opt, w, {{1.0f}, {0.5f}});
  EXPECT_NEAR(w[0], -(1.5 - 0.05) / (1 / 0.5 + 0.2), kTol);
}

TEST(FtrlOptimizerTest, SlotsStartAtDefaultAccumulatorAndZeroLinear) {
  std::unique_ptr<Optimizer> opt = MustCreate(Config("ftrl", 0.1), 2);
  ASSERT_NE(opt, nullptr);
  std::map<std::string, std::vector<float>> slots = SlotValues(*opt, 2);
  EXPECT_THAT(slots["accumulator"], ElementsAre(0.1f, 0.1f));
  EXPECT_THAT(slots["linear"], ElementsAre(0.0f, 0.0f));
  EXPECT_EQ(slots.size(), 2u);
}

TEST(LearningRateScheduleTest, ConstantIgnoresStep) {
  for (const char* kind : {"", "constant"}) {
    const OptimizerConfig c = WithSchedule(Config("sgd", 0.3), kind, 0, 0, 0, 0, 0);
    for (int64_t step : {0, 1, 7, 1000000}) EXPECT_EQ(ScheduledLearningRate(c, step), 0.3);
  }
}

TEST(LearningRateScheduleTest, StepDecaysEveryStepSizeSteps) {
  const OptimizerConfig c = WithSchedule(Config("sgd", 0.8), "step", 3, 0.5, 0, 0, 0);
  const std::map<int64_t, double> want = {{0, 0.8}, {2, 0.8}, {3, 0.4},  {5, 0.4},
                                          {6, 0.2}, {9, 0.1}, {11, 0.1}, {12, 0.05}};
  for (const auto& [step, lr] : want) EXPECT_DOUBLE_EQ(ScheduledLearningRate(c, step), lr) << step;
  EXPECT_EQ(ScheduledLearningRate(c, -5), 0.8);  // negative steps count as 0
  // decay_rate 1 is allowed and constant.
  EXPECT_EQ(ScheduledLearningRate(WithSchedule(Config("sgd", 0.8), "step", 1, 1, 0, 0, 0), 50),
            0.8);
}

TEST(LearningRateScheduleTest, CosineWarmsUpLinearlyThenDecaysToMinLr) {
  const OptimizerConfig c = WithSchedule(Config("sgd", 1.0), "cosine", 0, 0, 4, 12, 0.1);
  // Warm-up: lr * (step + 1) / 4.
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(c, 0), 0.25);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(c, 1), 0.5);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(c, 3), 1.0);
  // Decay over steps 4..12: 0.1 + 0.45 (1 + cos(pi (step - 4) / 8)).
  EXPECT_NEAR(ScheduledLearningRate(c, 4), 1.0, 1e-12);
  EXPECT_NEAR(ScheduledLearningRate(c, 6), 0.1 + 0.45 * (1 + std::cos(std::numbers::pi / 4)),
              1e-12);
  EXPECT_NEAR(ScheduledLearningRate(c, 8), 0.55, 1e-12);
  EXPECT_NEAR(ScheduledLearningRate(c, 11), 0.1 + 0.45 * (1 + std::cos(7 * std::numbers::pi / 8)),
              1e-12);
  EXPECT_NEAR(ScheduledLearningRate(c, 12), 0.1, 1e-12);
  EXPECT_NEAR(ScheduledLearningRate(c, 1000), 0.1, 1e-12);
}

TEST(LearningRateScheduleTest, CosineWithoutWarmupStartsAtLr) {
  const OptimizerConfig c = WithSchedule(Config("sgd", 2.0), "cosine", 0, 0, 0, 4, 0);
  EXPECT_NEAR(ScheduledLearningRate(c, 0), 2.0, 1e-12);
  EXPECT_NEAR(ScheduledLearningRate(c, 2), 1.0, 1e-12);
  EXPECT_NEAR(ScheduledLearningRate(c, 4), 0.0, 1e-12);
}

TEST(LearningRateScheduleTest, ApplyUsesTheStepArgument) {
  // Step schedule halving every 2 steps; the update count passed in, not the number of calls,
  // picks the rate.
  std::unique_ptr<Optimizer> sgd =
      MustCreate(WithSchedule(Config("sgd", 1.0), "step", 2, 0.5, 0, 0, 0), 1);
  ASSERT_NE(sgd, nullptr);
  float w = 0.0f;
  const float g = 1.0f;
  sgd->Apply(&w, &g, 1, 5);  // lr 0.25
  EXPECT_EQ(w, -0.25f);
  sgd->Apply(&w, &g, 1, 0);  // lr 1
  EXPECT_EQ(w, -1.25f);
}

TEST(GradientClippingTest, ScalesGradientDownToClipNorm) {
  OptimizerConfig c = Config("sgd", 1.0);
  c.set_clip_norm(1.0);
  std::unique_ptr<Optimizer> sgd = MustCreate(c, 2);
  ASSERT_NE(sgd, nullptr);
  std::vector<float> w = {0.0f, 0.0f};
  const std::vector<float> g = {3.0f, -4.0f};  // norm 5
  sgd->Apply(w.data(), g.data(), 2, 0);
  EXPECT_NEAR(w[0], -0.6, kTol);
  EXPECT_NEAR(w[1], 0.8, kTol);
  EXPECT_THAT(g, ElementsAre(3.0f, -4.0f));  // the caller's gradient is left alone
}

TEST(GradientClippingTest, LeavesGradientsWithinClipNormUnchanged) {
  OptimizerConfig c = Config("sgd", 1.0);
  c.set_clip_norm(5.0);
  std::unique_ptr<Optimizer> sgd = MustCreate(c, 2);
  ASSERT_NE(sgd, nullptr);
  std::vector<float> w = {0.0f, 0.0f};
  ApplyAll(*sgd, w, {{3.0f, -4.0f}, {0.3f, 0.4f}});  // norm exactly 5, then 0.5
  EXPECT_EQ(w[0], -3.0f - 0.3f);
  EXPECT_EQ(w[1], 4.0f - 0.4f);
}

TEST(GradientClippingTest, ZeroClipNormMeansNoClipping) {
  std::unique_ptr<Optimizer> sgd = MustCreate(Config("sgd", 1.0), 1);
  ASSERT_NE(sgd, nullptr);
  std::vector<float> w = {0.0f};
  ApplyAll(*sgd, w, {{1e6f}});
  EXPECT_EQ(w[0], -1e6f);
}

TEST(GradientClippingTest, ClipsBeforeTheOptimizerSeesTheGradient) {
  OptimizerConfig c = Config("adam", 0.1);
  c.set_clip_norm(0.5);
  std::unique_ptr<Optimizer> adam = MustCreate(c, 2);
  ASSERT_NE(adam, nullptr);
  std::vector<float> w = {0.0f, 0.0f};
  ApplyAll(*adam, w, {{6.0f, 8.0f}});  // norm 10 -> (0.3, 0.4)
  std::map<std::string, std::vector<float>> slots = SlotValues(*adam, 2);
  EXPECT_NEAR(slots["exp_avg"][0], 0.1 * 0.3, kTol);
  EXPECT_NEAR(slots["exp_avg"][1], 0.1 * 0.4, kTol);
  EXPECT_NEAR(slots["exp_avg_sq"][1], 0.001 * 0.4 * 0.4, kTol);
}

}  // namespace
}  // namespace pstrain
