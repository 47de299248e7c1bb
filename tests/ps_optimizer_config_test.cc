// The optimizer factory's validation: every bad hyper-parameter is refused with a message that
// names it, and valid configs build optimizers whose slots are named and sized as in torch.
#include <cmath>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "optimizer_testing.h"
#include "ps/optimizer.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

void ExpectRejected(const OptimizerConfig& config, const std::string& message) {
  absl::StatusOr<std::unique_ptr<Optimizer>> opt = CreateOptimizer(config, 4);
  ASSERT_FALSE(opt.ok()) << config.DebugString();
  EXPECT_EQ(opt.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(opt.status().message()), HasSubstr(message)) << config.DebugString();
  // The PS says which optimizer, then what the one validator of configs says.
  const absl::Status validated = ValidateOptimizerConfig(config);
  EXPECT_EQ(validated.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(opt.status().message()), HasSubstr(std::string(validated.message())));
}

TEST(CreateOptimizerTest, RejectsUnknownName) {
  const std::string known = "(known: sgd, momentum, adagrad, adam, rmsprop, ftrl)";
  ExpectRejected(Config("foo", 0.1), "name \"foo\" is not a known optimizer " + known);
  ExpectRejected(Config("", 0.1), "name \"\" is not a known optimizer " + known);
  ExpectRejected(Config("SGD", 0.1), "name \"SGD\" is not a known optimizer");
}

TEST(CreateOptimizerTest, RejectsBadLearningRate) {
  for (const char* name : {"sgd", "momentum", "adagrad", "adam", "rmsprop", "ftrl"}) {
    for (double lr : {0.0, -0.1, kInf, -kInf, kNan}) {
      ExpectRejected(Config(name, lr), "must be positive and finite");
    }
  }
  ExpectRejected(Config("sgd", -1), "learning_rate -1 must be positive and finite");
}

// The documented ranges (docs/semantics.md, "Optimizers"): each bound is valid, past it is not,
// and the message names the field, the value and the bound.
TEST(CreateOptimizerTest, RejectsHyperParametersOutOfTheirRanges) {
  ExpectRejected(Config("sgd", 1e300),
                 "learning_rate 1e+300 must be positive and finite, at most 1e+06");
  ExpectRejected(Config("adam", 1.5e6), "learning_rate 1.5e+06");
  EXPECT_TRUE(CreateOptimizer(Config("sgd", 1e6), 1).ok());
  ExpectRejected(Adam(0.1, 0.9, 0.999, 1.5),
                 "epsilon 1.5 must be non-negative and finite, at most 1");
  EXPECT_TRUE(CreateOptimizer(Adam(0.1, 0.9, 0.999, 1.0), 1).ok());
  struct Case {
    const char* field;
    void (OptimizerConfig::*set)(double);
    double ok, bad;
    const char* message;
  };
  const Case cases[] = {
      {"l1", &OptimizerConfig::set_l1, 1e6, 2e6,
       "l1 2e+06 must be non-negative and finite, at most 1e+06"},
      {"l2", &OptimizerConfig::set_l2, 1e6, 1e300, "l2 1e+300"},
      {"initial_accumulator_value", &OptimizerConfig::set_initial_accumulator_value, 1e6, 1e7,
       "initial_accumulator_value 1e+07 must be non-negative and finite, at most 1e+06"},
      {"clip_norm", &OptimizerConfig::set_clip_norm, 3e38, 1e39, "clip_norm 1e+39"},
      {"learning_rate_power", &OptimizerConfig::set_learning_rate_power, -10, -10.5,
       "learning_rate_power -10.5 must be non-positive and finite, at least -10"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.field);
    OptimizerConfig o = Config("ftrl", 0.1);
    (o.*c.set)(c.ok);
    EXPECT_TRUE(CreateOptimizer(o, 1).ok()) << c.ok;
    (o.*c.set)(c.bad);
    ExpectRejected(o, c.message);
  }
}

TEST(CreateOptimizerTest, RejectsBetaAndRhoOutsideHalfOpenUnitInterval) {
  for (double x : {1.0, 1.5, -0.1, kNan}) {
    ExpectRejected(Adam(0.1, x, 0.999, 1e-8), "beta1 ");
    ExpectRejected(Adam(0.1, 0.9, x, 1e-8), "beta2 ");
    OptimizerConfig c = Config("rmsprop", 0.1);
    c.set_rho(x);
    ExpectRejected(c, "rho ");
  }
  ExpectRejected(Adam(0.1, 1.0, 0.999, 1e-8), "beta1 1 must be in [0, 1)");
  OptimizerConfig c = Config("rmsprop", 0.1);
  c.set_rho(-0.5);
  ExpectRejected(c, "rho -0.5 must be in [0, 1)");
}

TEST(CreateOptimizerTest, RejectsNegativeOrNonFiniteEpsilon) {
  ExpectRejected(Adam(0.1, 0.9, 0.999, -0.001), "epsilon -0.001 must be non-negative and finite");
  ExpectRejected(Adam(0.1, 0.9, 0.999, kInf), "epsilon inf must be non-negative and finite");
  OptimizerConfig c = Config("adagrad", 0.1);
  c.set_epsilon(kNan);
  ExpectRejected(c, "epsilon nan must be non-negative and finite");
}

TEST(CreateOptimizerTest, RejectsBadMomentumAndNesterov) {
  for (const char* name : {"momentum", "rmsprop"}) {
    OptimizerConfig c = Config(name, 0.1);
    c.set_momentum(1.0);
    ExpectRejected(c, "momentum 1 must be in [0, 1)");
    c.set_momentum(-0.5);
    ExpectRejected(c, "momentum -0.5 must be in [0, 1)");
  }
  OptimizerConfig c = Config("momentum", 0.1);
  c.set_nesterov(true);
  ExpectRejected(c, "nesterov requires momentum > 0");
}

TEST(CreateOptimizerTest, RejectsBadFtrlParameters) {
  OptimizerConfig c = Config("ftrl", 0.1);
  c.set_l1(-1);
  ExpectRejected(c, "l1 -1 must be non-negative and finite");
  c = Config("ftrl", 0.1);
  c.set_l2(kInf);
  ExpectRejected(c, "l2 inf must be non-negative and finite");
  c = Config("ftrl", 0.1);
  c.set_learning_rate_power(0.5);
  ExpectRejected(c, "learning_rate_power 0.5 must be non-positive and finite");
  c.set_learning_rate_power(-kInf);
  ExpectRejected(c, "learning_rate_power -inf");
  for (const char* name : {"ftrl", "adagrad"}) {
    c = Config(name, 0.1);
    c.set_initial_accumulator_value(-0.1);
    ExpectRejected(c, "initial_accumulator_value -0.1 must be non-negative and finite");
  }
}

TEST(CreateOptimizerTest, RejectsBadClipNorm) {
  OptimizerConfig c = Config("sgd", 0.1);
  c.set_clip_norm(-1);
  ExpectRejected(c, "clip_norm -1 must be non-negative and finite");
  c.set_clip_norm(kNan);
  ExpectRejected(c, "clip_norm nan");
}

TEST(CreateOptimizerTest, RejectsBadSchedules) {
  const OptimizerConfig sgd = Config("sgd", 0.1);
  ExpectRejected(WithSchedule(sgd, "linear", 0, 0, 0, 0, 0),
                 "unknown learning-rate schedule \"linear\" (known: constant, step, cosine)");
  ExpectRejected(WithSchedule(sgd, "step", 0, 0.5, 0, 0, 0), "step_size 0 must be positive");
  ExpectRejected(WithSchedule(sgd, "step", 10, 0, 0, 0, 0), "decay_rate 0 must be in (0, 1]");
  ExpectRejected(WithSchedule(sgd, "step", 10, 1.5, 0, 0, 0), "decay_rate 1.5 must be in (0, 1]");
  ExpectRejected(WithSchedule(sgd, "cosine", 0, 0, 5, 5, 0),
                 "total_steps 5 must exceed schedule.warmup_steps 5");
  ExpectRejected(WithSchedule(sgd, "cosine", 0, 0, 0, 0, 0),
                 "total_steps 0 must exceed schedule.warmup_steps 0");
  ExpectRejected(WithSchedule(sgd, "cosine", 0, 0, -1, 5, 0), "warmup_steps -1 must be");
  ExpectRejected(WithSchedule(sgd, "cosine", 0, 0, 0, 5, 0.2),
                 "min_lr 0.2 must be in [0, learning_rate 0.1]");
  ExpectRejected(WithSchedule(sgd, "cosine", 0, 0, 0, 5, -0.01), "min_lr -0.01");
}

TEST(CreateOptimizerTest, RejectsNegativeNumElements) {
  EXPECT_EQ(CreateOptimizer(Config("sgd", 0.1), -1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CreateOptimizerTest, AcceptsValidConfigs) {
  EXPECT_TRUE(CreateOptimizer(Config("sgd", 1.0), 10).ok());
  EXPECT_TRUE(CreateOptimizer(Config("adam", 1e-3), 10).ok());
  EXPECT_TRUE(CreateOptimizer(Adam(1e-3, 0.5, 0.25, 1e-3), 0).ok());
  EXPECT_TRUE(CreateOptimizer(Adam(1e-3, 0.0, 0.0, 0.0), 3).ok());
  OptimizerConfig c = Config("momentum", 0.1);
  c.set_momentum(0.9);
  c.set_nesterov(true);
  c.set_clip_norm(2.0);
  EXPECT_TRUE(CreateOptimizer(WithSchedule(c, "step", 1, 1.0, 0, 0, 0), 5).ok());
  c = Config("ftrl", 0.1);
  c.set_l1(0.0);
  c.set_learning_rate_power(0.0);
  EXPECT_TRUE(CreateOptimizer(WithSchedule(c, "cosine", 0, 0, 0, 1, 0.1), 5).ok());
}

TEST(CreateOptimizerTest, SlotsAreNamedAsInTorchAndSized) {
  const std::map<std::string, std::vector<std::string>> want = {
      {"sgd", {}},
      {"adagrad", {"sum"}},
      {"adam", {"exp_avg", "exp_avg_sq"}},
      {"rmsprop", {"square_avg"}},
      {"ftrl", {"accumulator", "linear"}}};
  for (const auto& [name, slots] : want) {
    std::unique_ptr<Optimizer> opt = MustCreate(Config(name, 0.1), 3);
    ASSERT_NE(opt, nullptr);
    EXPECT_EQ(opt->name(), name);
    std::vector<std::string> got;
    for (const auto& [slot, values] : opt->slots()) got.push_back(slot);
    EXPECT_EQ(got, slots) << name;
  }
  OptimizerConfig c = Config("rmsprop", 0.1);
  c.set_momentum(0.5);
  std::map<std::string, std::vector<float>> slots = SlotValues(*MustCreate(c, 3), 3);
  EXPECT_THAT(slots["momentum_buffer"], ElementsAre(0, 0, 0));
}

}  // namespace
}  // namespace pstrain
