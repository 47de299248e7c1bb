// The update rules of the optimizers declared in optimizer.h; the kernels of sgd, adagrad, adam
// and ftrl are shared with the embedding tables (optimizer_kernels.h).
//
// The kernels are plain index loops over __restrict parameters with the scalars hoisted out, so
// the compiler can vectorise them without aliasing checks. (Loops with sqrt vectorise only under
// -fno-math-errno; GCC 12 vectorises at -O3, or -O2 only for known trip counts.) Scalars are
// computed in double and used as float, and each float expression follows the order of the
// corresponding torch operations, so results agree with torch.optim to float rounding. The
// gradient is read as g[i] * gs, gs being the clipping scale (1 when not clipping, which is
// exact).
#include "ps/optimizer_kernels.h"

#include <cassert>
#include <cmath>

#include "ps/optimizer.h"

namespace pstrain {
namespace {

using Slots = std::vector<std::pair<std::string, const float*>>;

// torch.optim.SGD with momentum, dampening 0. First update: buf = clone(grad). Later:
// buf.mul_(momentum).add_(grad). Then d_p = nesterov ? grad.add(buf, alpha=momentum) : buf and
// param.add_(d_p, alpha=-lr). The buffer starts at zero, so the first update's 0 * mu + g is
// exactly clone(grad) and needs no special case.
template <bool kNesterov>
void MomentumKernel(float* __restrict w, const float* __restrict g, float* __restrict buf,
                    int64_t n, float gs, float mu, float neg_lr) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * gs;
    const float b = buf[i] * mu + gi;
    buf[i] = b;
    w[i] += neg_lr * (kNesterov ? gi + mu * b : b);
  }
}

// torch.optim.RMSprop, centered=False:
//   square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha); avg = square_avg.sqrt().add_(eps)
//   momentum > 0: buf.mul_(momentum).addcdiv_(grad, avg); param.add_(buf, alpha=-lr)
//   else:         param.addcdiv_(grad, avg, value=-lr)
void RmsPropKernel(float* __restrict w, const float* __restrict g, float* __restrict sq,
                   float* __restrict buf, int64_t n, float gs, float rho, float one_minus_rho,
                   float eps, float mu, float neg_lr) {
  if (buf != nullptr) {
    for (int64_t i = 0; i < n; ++i) {
      const float gi = g[i] * gs;
      const float s = sq[i] * rho + one_minus_rho * gi * gi;
      sq[i] = s;
      const float b = buf[i] * mu + gi / (std::sqrt(s) + eps);
      buf[i] = b;
      w[i] += neg_lr * b;
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * gs;
    const float s = sq[i] * rho + one_minus_rho * gi * gi;
    sq[i] = s;
    w[i] += neg_lr * (gi / (std::sqrt(s) + eps));
  }
}

// FTRL-Proximal per element, in double from the float slots. The new n and z are rounded to
// float before they are used, so the weight is a function of the stored state and the next
// update's n^(-p) equals this one's. kSqrt: p = -0.5, where n^(-p) is an exact sqrt; with the
// branch out of the loop and the l1 test as a select, that loop vectorises.
template <bool kSqrt>
void FtrlLoop(float* __restrict w, const float* __restrict g, float* __restrict acc,
              float* __restrict z, int64_t n, float gs, double lr, double l1, double l2, double p) {
  const double inv_lr = 1.0 / lr;
  for (int64_t i = 0; i < n; ++i) {
    const double gi = g[i] * gs;
    const double n_old = acc[i];
    const float n_new = static_cast<float>(n_old + gi * gi);
    const double pow_new = kSqrt ? std::sqrt(double{n_new}) : std::pow(double{n_new}, -p);
    const double pow_old = kSqrt ? std::sqrt(n_old) : std::pow(n_old, -p);
    const double sigma = (pow_new - pow_old) / lr;
    const float zi = static_cast<float>(z[i] + gi - sigma * w[i]);
    acc[i] = n_new;
    z[i] = zi;
    const double shrunk = zi - std::copysign(l1, static_cast<double>(zi));
    const float updated = static_cast<float>(-shrunk / (pow_new * inv_lr + 2.0 * l2));
    w[i] = std::abs(zi) <= l1 ? 0.0f : updated;
  }
}

}  // namespace

// param.add_(grad, alpha=-lr)
void SgdKernel(float* __restrict w, const float* __restrict g, int64_t n, float gs, float neg_lr) {
  for (int64_t i = 0; i < n; ++i) w[i] += neg_lr * (g[i] * gs);
}

// torch.optim.Adagrad, lr_decay 0: state_sum.addcmul_(grad, grad, value=1);
// std = state_sum.sqrt().add_(eps); param.addcdiv_(grad, std, value=-lr)
void AdagradKernel(float* __restrict w, const float* __restrict g, float* __restrict sum, int64_t n,
                   float gs, float eps, float neg_lr) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * gs;
    const float s = sum[i] + gi * gi;
    sum[i] = s;
    w[i] += neg_lr * (gi / (std::sqrt(s) + eps));
  }
}

// torch.optim.Adam (single-tensor path), per element:
//   exp_avg.lerp_(grad, 1 - beta1); exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2)
//   denom = exp_avg_sq.sqrt() / sqrt(bias_correction2) + eps
//   param.addcdiv_(exp_avg, denom, value=-lr / bias_correction1)
// (torch < 2.0 updates exp_avg as mul_(beta1).add_(grad, alpha=1 - beta1); the two differ by
// float rounding only.)
void AdamKernel(float* __restrict w, const float* __restrict g, float* __restrict m,
                float* __restrict v, int64_t n, float gs, float one_minus_b1, float b2,
                float one_minus_b2, float bc2_sqrt, float eps, float neg_step) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * gs;
    const float mi = m[i] + one_minus_b1 * (gi - m[i]);
    const float vi = v[i] * b2 + one_minus_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    w[i] += neg_step * (mi / (std::sqrt(vi) / bc2_sqrt + eps));
  }
}

void FtrlKernel(float* w, const float* g, float* acc, float* z, int64_t n, float gs, double lr,
                double l1, double l2, double p) {
  if (p == -0.5) {
    FtrlLoop<true>(w, g, acc, z, n, gs, lr, l1, l2, p);
  } else {
    FtrlLoop<false>(w, g, acc, z, n, gs, lr, l1, l2, p);
  }
}

void SgdOptimizer::Update(float* weights, const float* grad, int64_t, int64_t count, double lr,
                          float grad_scale) {
  SgdKernel(weights, grad, count, grad_scale, static_cast<float>(-lr));
}

MomentumOptimizer::MomentumOptimizer(const OptimizerConfig& config, int64_t num_elements,
                                     double momentum, bool nesterov)
    : ScheduledOptimizer(config, num_elements), momentum_(momentum), nesterov_(nesterov) {
  if (momentum_ != 0.0) buf_ = Slot(n_, 0.0f);
}

void MomentumOptimizer::Update(float* weights, const float* grad, int64_t begin, int64_t count,
                               double lr, float grad_scale) {
  if (buf_ == nullptr) {  // torch: momentum 0 is plain SGD
    SgdKernel(weights, grad, count, grad_scale, static_cast<float>(-lr));
    return;
  }
  const float mu = static_cast<float>(momentum_), neg_lr = static_cast<float>(-lr);
  if (nesterov_) {
    MomentumKernel<true>(weights, grad, buf_.get() + begin, count, grad_scale, mu, neg_lr);
  } else {
    MomentumKernel<false>(weights, grad, buf_.get() + begin, count, grad_scale, mu, neg_lr);
  }
}

Slots MomentumOptimizer::slots() const {
  if (buf_ == nullptr) return {};
  return {{"momentum_buffer", buf_.get()}};
}

AdagradOptimizer::AdagradOptimizer(const OptimizerConfig& config, int64_t num_elements,
                                   double initial_accumulator_value, double epsilon)
    : ScheduledOptimizer(config, num_elements),
      eps_(epsilon),
      sum_(Slot(n_, static_cast<float>(initial_accumulator_value))) {}

void AdagradOptimizer::Update(float* weights, const float* grad, int64_t begin, int64_t count,
                              double lr, float grad_scale) {
  AdagradKernel(weights, grad, sum_.get() + begin, count, grad_scale, static_cast<float>(eps_),
                static_cast<float>(-lr));
}

Slots AdagradOptimizer::slots() const { return {{"sum", sum_.get()}}; }

AdamOptimizer::AdamOptimizer(const OptimizerConfig& config, int64_t num_elements, double beta1,
                             double beta2, double epsilon)
    : ScheduledOptimizer(config, num_elements),
      beta1_(beta1),
      beta2_(beta2),
      eps_(epsilon),
      m_(Slot(n_, 0.0f)),
      v_(Slot(n_, 0.0f)) {}

void AdamOptimizer::Update(float* weights, const float* grad, int64_t begin, int64_t count,
                           double lr, float grad_scale) {
  const double t = static_cast<double>(t_);
  const double bias_correction1 = 1.0 - std::pow(beta1_, t);
  const double bias_correction2 = 1.0 - std::pow(beta2_, t);
  AdamKernel(weights, grad, m_.get() + begin, v_.get() + begin, count, grad_scale,
             static_cast<float>(1.0 - beta1_), static_cast<float>(beta2_),
             static_cast<float>(1.0 - beta2_), static_cast<float>(std::sqrt(bias_correction2)),
             static_cast<float>(eps_), static_cast<float>(-lr / bias_correction1));
}

Slots AdamOptimizer::slots() const { return {{"exp_avg", m_.get()}, {"exp_avg_sq", v_.get()}}; }

RmsPropOptimizer::RmsPropOptimizer(const OptimizerConfig& config, int64_t num_elements, double rho,
                                   double epsilon, double momentum)
    : ScheduledOptimizer(config, num_elements),
      rho_(rho),
      eps_(epsilon),
      momentum_(momentum),
      square_avg_(Slot(n_, 0.0f)) {
  if (momentum_ > 0.0) buf_ = Slot(n_, 0.0f);
}

void RmsPropOptimizer::Update(float* weights, const float* grad, int64_t begin, int64_t count,
                              double lr, float grad_scale) {
  RmsPropKernel(weights, grad, square_avg_.get() + begin,
                buf_ == nullptr ? nullptr : buf_.get() + begin, count, grad_scale,
                static_cast<float>(rho_), static_cast<float>(1.0 - rho_), static_cast<float>(eps_),
                static_cast<float>(momentum_), static_cast<float>(-lr));
}

Slots RmsPropOptimizer::slots() const {
  Slots slots = {{"square_avg", square_avg_.get()}};
  if (buf_ != nullptr) slots.emplace_back("momentum_buffer", buf_.get());
  return slots;
}

FtrlOptimizer::FtrlOptimizer(const OptimizerConfig& config, int64_t num_elements,
                             double initial_accumulator_value, double l1, double l2,
                             double learning_rate_power)
    : ScheduledOptimizer(config, num_elements),
      l1_(l1),
      l2_(l2),
      power_(learning_rate_power),
      n_acc_(Slot(n_, static_cast<float>(initial_accumulator_value))),
      z_(Slot(n_, 0.0f)) {}

void FtrlOptimizer::Update(float* weights, const float* grad, int64_t begin, int64_t count,
                           double lr, float grad_scale) {
  FtrlKernel(weights, grad, n_acc_.get() + begin, z_.get() + begin, count, grad_scale, lr, l1_, l2_,
             power_);
}

Slots FtrlOptimizer::slots() const { return {{"accumulator", n_acc_.get()}, {"linear", z_.get()}}; }

}  // namespace pstrain
