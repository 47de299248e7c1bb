#include "ps/optimizer.h"

#include <cassert>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pstrain {
namespace {

// The kernels are plain index loops over __restrict parameters with the scalars hoisted out, so
// the compiler can vectorise them without aliasing checks. (The Adam loop's sqrt vectorises only
// under -fno-math-errno; GCC 12 vectorises at -O3, or -O2 only for known trip counts.) Scalars are
// computed in double and used as float, as PyTorch does with Python-float hyper-parameters on
// float32 tensors.

void SgdKernel(float* __restrict w, const float* __restrict g, int64_t n, float neg_lr) {
  for (int64_t i = 0; i < n; ++i) w[i] += neg_lr * g[i];
}

// torch.optim.Adam (single-tensor path), per element:
//   exp_avg.lerp_(grad, 1 - beta1); exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2)
//   denom = exp_avg_sq.sqrt() / sqrt(bias_correction2) + eps
//   param.addcdiv_(exp_avg, denom, value=-lr / bias_correction1)
void AdamKernel(float* __restrict w, const float* __restrict g, float* __restrict m,
                float* __restrict v, int64_t n, float one_minus_b1, float b2, float one_minus_b2,
                float bc2_sqrt, float eps, float neg_step) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = m[i] + one_minus_b1 * (gi - m[i]);
    const float vi = v[i] * b2 + one_minus_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    w[i] += neg_step * (mi / (std::sqrt(vi) / bc2_sqrt + eps));
  }
}

// 0 means "use the default" for the adam fields.
double OrDefault(double value, double def) { return value == 0.0 ? def : value; }

absl::Status CheckBeta(const char* what, double beta) {
  if (!(beta >= 0.0 && beta < 1.0)) {  // also rejects NaN
    return absl::InvalidArgumentError(
        absl::StrCat("adam ", what, " must be in [0, 1), got ", beta));
  }
  return absl::OkStatus();
}

}  // namespace

void SgdOptimizer::Apply(float* weights, const float* grad, int64_t n) {
  SgdKernel(weights, grad, n, -lr_);
}

AdamOptimizer::AdamOptimizer(int64_t num_elements, double learning_rate, double beta1, double beta2,
                             double epsilon)
    : lr_(learning_rate),
      beta1_(beta1),
      beta2_(beta2),
      eps_(epsilon),
      m_(new float[num_elements]()),
      v_(new float[num_elements]()),
      n_(num_elements) {}

void AdamOptimizer::Apply(float* weights, const float* grad, int64_t n) {
  assert(n == n_);
  ++t_;
  const double t = static_cast<double>(t_);
  const double bias_correction1 = 1.0 - std::pow(beta1_, t);
  const double bias_correction2 = 1.0 - std::pow(beta2_, t);
  AdamKernel(weights, grad, m_.get(), v_.get(), n, static_cast<float>(1.0 - beta1_),
             static_cast<float>(beta2_), static_cast<float>(1.0 - beta2_),
             static_cast<float>(std::sqrt(bias_correction2)), static_cast<float>(eps_),
             static_cast<float>(-lr_ / bias_correction1));
}

absl::StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(const OptimizerConfig& config,
                                                           int64_t num_elements) {
  if (num_elements < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer for a negative number of elements (", num_elements, ")"));
  }
  const std::string& name = config.name();
  if (name != "sgd" && name != "adam") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown optimizer '", name, "' (known: sgd, adam)"));
  }
  const double lr = config.learning_rate();
  if (!std::isfinite(lr) || lr <= 0.0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " learning rate must be finite and positive, got ", lr));
  }
  if (name == "sgd") return std::make_unique<SgdOptimizer>(static_cast<float>(lr));

  const double beta1 = OrDefault(config.beta1(), kDefaultAdamBeta1);
  const double beta2 = OrDefault(config.beta2(), kDefaultAdamBeta2);
  const double eps = OrDefault(config.epsilon(), kDefaultAdamEpsilon);
  if (absl::Status s = CheckBeta("beta1", beta1); !s.ok()) return s;
  if (absl::Status s = CheckBeta("beta2", beta2); !s.ok()) return s;
  if (!std::isfinite(eps) || eps < 0.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("adam epsilon must be finite and non-negative, got ", eps));
  }
  return std::make_unique<AdamOptimizer>(num_elements, lr, beta1, beta2, eps);
}

}  // namespace pstrain
