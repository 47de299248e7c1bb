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

// The value of an optional field, or `def` when it is unset.
double Get(bool has, double value, double def) { return has ? value : def; }

}  // namespace

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
  ApplyChunks(
      weights, [grad, n](ChunkSink fn) { fn(0, grad, n); }, n, step);
}

StepRate RateOfStep(const OptimizerConfig& config, int64_t step,
                    absl::FunctionRef<double()> sum_of_squares) {
  float grad_scale = 1.0f;
  if (const double clip = config.clip_norm(); clip > 0.0) {
    // clip / max(norm, clip): exactly 1 (no change) unless the norm exceeds clip.
    if (const double norm = std::sqrt(sum_of_squares()); norm > clip) {
      grad_scale = static_cast<float>(clip / norm);
    }
  }
  return {ScheduledLearningRate(config, step), grad_scale};
}

StepRate ScheduledOptimizer::RateAndScale(Chunks grad, int64_t step) const {
  return RateOfStep(config_, step, [grad] {
    // One running sum in element order, whatever the chunks: the norm of the whole gradient.
    double sum_sq = 0.0;
    grad([&sum_sq](int64_t, const float* g, int64_t count) {
      for (int64_t i = 0; i < count; ++i) sum_sq += static_cast<double>(g[i]) * g[i];
    });
    return sum_sq;
  });
}

void ScheduledOptimizer::ApplyChunks(float* weights, Chunks grad, int64_t n, int64_t step) {
  assert(n == n_);
  (void)n;
  const StepRate rate = RateAndScale(grad, step);
  BeginUpdate();
  grad([&](int64_t begin, const float* g, int64_t count) {
    Update(weights + begin, g, begin, count, rate.lr, rate.grad_scale, /*write=*/true);
  });
}

int64_t ScheduledOptimizer::FirstNonFiniteUpdate(const float* weights, Chunks grad, int64_t n,
                                                 int64_t step) {
  assert(n == n_);
  (void)n;
  const StepRate rate = RateAndScale(grad, step);
  // Update without `write` only reads through its weights pointer.
  float* w = const_cast<float*>(weights);
  int64_t bad = -1;
  grad([&](int64_t begin, const float* g, int64_t count) {
    if (bad >= 0 || Update(w + begin, g, begin, count, rate.lr, rate.grad_scale, false)) return;
    // The chunk has a bad element: find it one element at a time (a refused push only).
    for (int64_t i = 0; i < count; ++i) {
      if (!Update(w + begin + i, g + i, begin + i, 1, rate.lr, rate.grad_scale, false)) {
        bad = begin + i;
        return;
      }
    }
  });
  return bad;
}

absl::StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(const OptimizerConfig& config,
                                                           int64_t num_elements) {
  if (num_elements < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer for a negative number of elements (", num_elements, ")"));
  }
  if (absl::Status s = ValidateOptimizerConfig(config); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer '", config.name().substr(0, 64), "': ", s.message()));
  }

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

std::vector<std::pair<std::string, float*>> Optimizer::mutable_slots() {
  std::vector<std::pair<std::string, float*>> out;
  for (auto& [name, p] : slots()) out.emplace_back(name, const_cast<float*>(p));
  return out;
}

}  // namespace pstrain
