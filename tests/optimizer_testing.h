// Helpers shared by the optimizer tests.
#pragma once

#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "ps/optimizer.h"

namespace pstrain {

inline constexpr double kTol = 1e-6;
inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

inline OptimizerConfig Config(const std::string& name, double lr) {
  OptimizerConfig c;
  c.set_name(name);
  c.set_learning_rate(lr);
  return c;
}

inline OptimizerConfig Adam(double lr, double beta1, double beta2, double eps) {
  OptimizerConfig c = Config("adam", lr);
  c.set_beta1(beta1);
  c.set_beta2(beta2);
  c.set_epsilon(eps);
  return c;
}

inline std::unique_ptr<Optimizer> MustCreate(const OptimizerConfig& config, int64_t n) {
  absl::StatusOr<std::unique_ptr<Optimizer>> opt = CreateOptimizer(config, n);
  EXPECT_TRUE(opt.ok()) << opt.status();
  return opt.ok() ? *std::move(opt) : nullptr;
}

inline std::map<std::string, std::vector<float>> SlotValues(const Optimizer& opt, int64_t n) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, values] : opt.slots()) out[name].assign(values, values + n);
  return out;
}

inline OptimizerConfig WithSchedule(OptimizerConfig c, const std::string& kind, int64_t step_size,
                                    double decay_rate, int64_t warmup, int64_t total,
                                    double min_lr) {
  LearningRateSchedule* s = c.mutable_schedule();
  s->set_kind(kind);
  s->set_step_size(step_size);
  s->set_decay_rate(decay_rate);
  s->set_warmup_steps(warmup);
  s->set_total_steps(total);
  s->set_min_lr(min_lr);
  return c;
}

}  // namespace pstrain
