// Optimizer configs: validation, defaults, the learning-rate schedule, gradient clipping and the
// factory. The update rules themselves are in optimizer_kernels.cc.
#include "ps/optimizer.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <numbers>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ps/ps_internal.h"

namespace pstrain {
namespace {

constexpr const char* kKnownOptimizers = "sgd, momentum, adagrad, adam, rmsprop, ftrl";

bool IsKnownOptimizer(const std::string& name) {
  return name == "sgd" || name == "momentum" || name == "adagrad" || name == "adam" ||
         name == "rmsprop" || name == "ftrl";
}

absl::Status Invalid(const OptimizerConfig& config, const auto&... message) {
  return absl::InvalidArgumentError(absl::StrCat("optimizer '", config.name(), "': ", message...));
}

// All checks are written so that NaN fails them.
bool InUnitInterval(double x) { return x >= 0.0 && x < 1.0; }  // [0, 1)
bool NonNegativeFinite(double x) { return std::isfinite(x) && x >= 0.0; }

absl::Status ValidateSchedule(const OptimizerConfig& config) {
  const LearningRateSchedule& s = config.schedule();
  const std::string& kind = s.kind();
  if (kind.empty() || kind == "constant") return absl::OkStatus();
  if (kind == "step") {
    if (s.step_size() <= 0) {
      return Invalid(config, "step schedule: step_size ", s.step_size(), " must be positive");
    }
    if (!(s.decay_rate() > 0.0 && s.decay_rate() <= 1.0)) {
      return Invalid(config, "step schedule: decay_rate ", s.decay_rate(), " must be in (0, 1]");
    }
    return absl::OkStatus();
  }
  if (kind == "cosine") {
    if (s.warmup_steps() < 0) {
      return Invalid(config, "cosine schedule: warmup_steps ", s.warmup_steps(),
                     " must be non-negative");
    }
    if (s.total_steps() <= s.warmup_steps()) {
      return Invalid(config, "cosine schedule: total_steps ", s.total_steps(),
                     " must exceed warmup_steps ", s.warmup_steps());
    }
    if (!(s.min_lr() >= 0.0 && s.min_lr() <= config.learning_rate())) {
      return Invalid(config, "cosine schedule: min_lr ", s.min_lr(),
                     " must be in [0, learning rate ", config.learning_rate(), "]");
    }
    return absl::OkStatus();
  }
  return Invalid(config, "unknown learning-rate schedule ", Quoted(kind),
                 " (known: constant, step, cosine)");
}

// The value of an optional field, or `def` when it is unset.
double Get(bool has, double value, double def) { return has ? value : def; }

}  // namespace

absl::Status ValidateOptimizerConfig(const OptimizerConfig& config) {
  if (!IsKnownOptimizer(config.name())) {
    return absl::InvalidArgumentError(absl::StrCat("unknown optimizer ", Quoted(config.name()),
                                                   " (known: ", kKnownOptimizers, ")"));
  }
  const double lr = config.learning_rate();
  if (!(std::isfinite(lr) && lr > 0.0)) {
    return Invalid(config, "learning rate ", lr, " must be positive and finite");
  }
  if (config.has_beta1() && !InUnitInterval(config.beta1())) {
    return Invalid(config, "beta1 ", config.beta1(), " must be in [0, 1)");
  }
  if (config.has_beta2() && !InUnitInterval(config.beta2())) {
    return Invalid(config, "beta2 ", config.beta2(), " must be in [0, 1)");
  }
  if (config.has_rho() && !InUnitInterval(config.rho())) {
    return Invalid(config, "rho ", config.rho(), " must be in [0, 1)");
  }
  if (config.has_epsilon() && !NonNegativeFinite(config.epsilon())) {
    return Invalid(config, "epsilon ", config.epsilon(), " must be non-negative and finite");
  }
  if (!InUnitInterval(config.momentum())) {
    return Invalid(config, "momentum ", config.momentum(), " must be in [0, 1)");
  }
  if (config.nesterov() && config.momentum() == 0.0) {
    return Invalid(config, "nesterov requires momentum > 0, got momentum ", config.momentum());
  }
  if (!NonNegativeFinite(config.l1())) {
    return Invalid(config, "l1 ", config.l1(), " must be non-negative and finite");
  }
  if (!NonNegativeFinite(config.l2())) {
    return Invalid(config, "l2 ", config.l2(), " must be non-negative and finite");
  }
  if (config.has_learning_rate_power() &&
      !(std::isfinite(config.learning_rate_power()) && config.learning_rate_power() <= 0.0)) {
    return Invalid(config, "learning_rate_power ", config.learning_rate_power(),
                   " must be non-positive and finite");
  }
  if (!NonNegativeFinite(config.initial_accumulator_value())) {
    return Invalid(config, "initial_accumulator_value ", config.initial_accumulator_value(),
                   " must be non-negative and finite");
  }
  if (!NonNegativeFinite(config.clip_norm())) {
    return Invalid(config, "clip_norm ", config.clip_norm(), " must be non-negative and finite");
  }
  return ValidateSchedule(config);
}

double ScheduledLearningRate(const OptimizerConfig& config, int64_t step) {
  const double lr = config.learning_rate();
  const LearningRateSchedule& s = config.schedule();
  if (step < 0) step = 0;
  if (s.kind() == "step") {
    if (s.step_size() <= 0) return lr;
    return lr * std::pow(s.decay_rate(), static_cast<double>(step / s.step_size()));
  }
  if (s.kind() == "cosine") {
    const int64_t warmup = s.warmup_steps();
    if (warmup < 0 || s.total_steps() <= warmup) return lr;
    if (step < warmup) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
    const double progress = std::min(
        1.0, static_cast<double>(step - warmup) / static_cast<double>(s.total_steps() - warmup));
    return s.min_lr() + 0.5 * (lr - s.min_lr()) * (1.0 + std::cos(std::numbers::pi * progress));
  }
  return lr;
}

ScheduledOptimizer::ScheduledOptimizer(const OptimizerConfig& config, int64_t num_elements)
    : n_(num_elements), config_(config) {}

std::unique_ptr<float[]> ScheduledOptimizer::Slot(int64_t n, float initial_value) {
  std::unique_ptr<float[]> slot(new float[n]);
  for (int64_t i = 0; i < n; ++i) slot[i] = initial_value;
  return slot;
}

void ScheduledOptimizer::Apply(float* weights, const float* grad, int64_t n, int64_t step) {
  assert(n == n_);
  (void)n;
  float grad_scale = 1.0f;
  if (const double clip = config_.clip_norm(); clip > 0.0) {
    double sum_sq = 0.0;
    for (int64_t i = 0; i < n_; ++i) sum_sq += static_cast<double>(grad[i]) * grad[i];
    // clip / max(norm, clip): exactly 1 (no change) unless the norm exceeds clip.
    if (const double norm = std::sqrt(sum_sq); norm > clip) {
      grad_scale = static_cast<float>(clip / norm);
    }
  }
  Update(weights, grad, ScheduledLearningRate(config_, step), grad_scale);
}

absl::StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(const OptimizerConfig& config,
                                                           int64_t num_elements) {
  if (num_elements < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer for a negative number of elements (", num_elements, ")"));
  }
  if (absl::Status s = ValidateOptimizerConfig(config); !s.ok()) return s;

  const std::string& name = config.name();
  const int64_t n = num_elements;
  const double initial_accumulator = config.initial_accumulator_value();
  if (name == "sgd") return std::make_unique<SgdOptimizer>(config, n);
  if (name == "momentum") {
    return std::make_unique<MomentumOptimizer>(config, n, config.momentum(), config.nesterov());
  }
  if (name == "adagrad") {
    return std::make_unique<AdagradOptimizer>(
        config, n, initial_accumulator,
        Get(config.has_epsilon(), config.epsilon(), kDefaultAdagradEpsilon));
  }
  if (name == "adam") {
    return std::make_unique<AdamOptimizer>(
        config, n, Get(config.has_beta1(), config.beta1(), kDefaultAdamBeta1),
        Get(config.has_beta2(), config.beta2(), kDefaultAdamBeta2),
        Get(config.has_epsilon(), config.epsilon(), kDefaultAdamEpsilon));
  }
  if (name == "rmsprop") {
    return std::make_unique<RmsPropOptimizer>(
        config, n, Get(config.has_rho(), config.rho(), kDefaultRmsPropRho),
        Get(config.has_epsilon(), config.epsilon(), kDefaultRmsPropEpsilon), config.momentum());
  }
  assert(name == "ftrl");
  return std::make_unique<FtrlOptimizer>(
      config, n, initial_accumulator == 0.0 ? kDefaultFtrlInitialAccumulator : initial_accumulator,
      config.l1(), config.l2(),
      Get(config.has_learning_rate_power(), config.learning_rate_power(),
          kDefaultFtrlLearningRatePower));
}

}  // namespace pstrain
