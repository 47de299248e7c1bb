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
#include <limits>
#include <type_traits>

#include "ps/optimizer.h"

namespace pstrain {
namespace {

using Slots = std::vector<std::pair<std::string, const float*>>;

// Every loop below has two instantiations: kWrite stores the new weights and slots; the check
// (kWrite false) computes the same values with the same expressions, stores nothing, and says
// whether they are all finite. A push is checked before it is applied, so an update that would
// overflow a weight or a slot is refused with nothing written (ps.h, Push). The check has no
// early exit, so it vectorises like the update.
template <bool kWrite>
using Out = std::conditional_t<kWrite, float*, const float*>;

// 1 if x is not finite (NaN compares false).
inline int NonFinite(float x) { return !(std::fabs(x) <= std::numeric_limits<float>::max()); }

// torch.optim.SGD: param.add_(grad, alpha=-lr)
template <bool kWrite>
bool SgdLoop(Out<kWrite> __restrict w, const float* __restrict g, int64_t n, float gs,
             float neg_lr) {
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float wi = w[i] + neg_lr * (g[i] * gs);
    if constexpr (kWrite) {
      w[i] = wi;
    } else {
      bad |= NonFinite(wi);
    }
  }
  return bad == 0;
}

// torch.optim.SGD with momentum, dampening 0. First update: buf = clone(grad). Later:
// buf.mul_(momentum).add_(grad). Then d_p = nesterov ? grad.add(buf, alpha=momentum) : buf and
// param.add_(d_p, alpha=-lr). The buffer starts at zero, so the first update's 0 * mu + g is
// exactly clone(grad) and needs no special case.
template <bool kWrite, bool kNesterov>
bool MomentumLoop(Out<kWrite> __restrict w, const float* __restrict g, Out<kWrite> __restrict buf,
                  int64_t n, float gs, float mu, float neg_lr) {
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * gs;
    const float b = buf[i] * mu + gi;
    const float wi = w[i] + neg_lr * (kNesterov ? gi + mu * b : b);
    if constexpr (kWrite) {
      buf[i] = b;
      w[i] = wi;
    } else {
      bad |= NonFinite(b) | NonFinite(wi);
    }
  }
  return bad == 0;
}

// torch.optim.RMSprop, centered=False:
//   square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha); avg = square_avg.sqrt().add_(eps)
//   momentum > 0: buf.mul_(momentum).addcdiv_(grad, avg); param.add_(buf, alpha=-lr)
//   else:         param.addcdiv_(grad, avg, value=-lr)
template <bool kWrite, bool kMomentum>
bool RmsPropLoop(Out<kWrite> __restrict w, const float* __restrict g, Out<kWrite> __restrict sq,
                 Out<kWrite> __restrict buf, int64_t n, float gs, float rho, float one_minus_rho,
                 float eps, float mu, float neg_lr) {
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * gs;
    const float s = sq[i] * rho + one_minus_rho * gi * gi;
    float b = 0.0f, wi;
    if constexpr (kMomentum) {
      b = buf[i] * mu + gi / (std::sqrt(s) + eps);
      wi = w[i] + neg_lr * b;
    } else {
      wi = w[i] + neg_lr * (gi / (std::sqrt(s) + eps));
    }
    if constexpr (kWrite) {
      sq[i] = s;
      if constexpr (kMomentum) buf[i] = b;
      w[i] = wi;
    } else {
      bad |= NonFinite(s) | NonFinite(b) | NonFinite(wi);
    }
  }
  return bad == 0;
}

// torch.optim.Adagrad, lr_decay 0: state_sum.addcmul_(grad, grad, value=1);
// std = state_sum.sqrt().add_(eps); param.addcdiv_(grad, std, value=-lr)
template <bool kWrite>
bool AdagradLoop(Out<kWrite> __restrict w, const float* __restrict g, Out<kWrite> __restrict sum,
                 int64_t n, float gs, float eps, float neg_lr) {
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * gs;
    const float s = sum[i] + gi * gi;
    const float wi = w[i] + neg_lr * (gi / (std::sqrt(s) + eps));
    if constexpr (kWrite) {
      sum[i] = s;
      w[i] = wi;
    } else {
      bad |= NonFinite(s) | NonFinite(wi);
    }
  }
  return bad == 0;
}

// torch.optim.Adam (single-tensor path), per element:
//   exp_avg.lerp_(grad, 1 - beta1); exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2)
//   denom = exp_avg_sq.sqrt() / sqrt(bias_correction2) + eps
//   param.addcdiv_(exp_avg, denom, value=-lr / bias_correction1)
// (torch < 2.0 updates exp_avg as mul_(beta1).add_(grad, alpha=1 - beta1); the two differ by
// float rounding only.)
template <bool kWrite>
bool AdamLoop(Out<kWrite> __restrict w, const float* __restrict g, Out<kWrite> __restrict m,
              Out<kWrite> __restrict v, int64_t n, float gs, float one_minus_b1, float b2,
              float one_minus_b2, float bc2_sqrt, float eps, float neg_step) {
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * gs;
    const float mi = m[i] + one_minus_b1 * (gi - m[i]);
    const float vi = v[i] * b2 + one_minus_b2 * gi * gi;
    const float wi = w[i] + neg_step * (mi / (std::sqrt(vi) / bc2_sqrt + eps));
    if constexpr (kWrite) {
      m[i] = mi;
      v[i] = vi;
      w[i] = wi;
    } else {
      bad |= NonFinite(mi) | NonFinite(vi) | NonFinite(wi);
    }
  }
  return bad == 0;
}

// FTRL-Proximal per element, in double from the float slots. The new n and z are rounded to
// float before they are used, so the weight is a function of the stored state and the next
// update's n^(-p) equals this one's. kSqrt: p = -0.5, where n^(-p) is an exact sqrt; with the
// branch out of the loop and the l1 test as a select, that loop vectorises.
template <bool kWrite, bool kSqrt>
bool FtrlLoop(Out<kWrite> __restrict w, const float* __restrict g, Out<kWrite> __restrict acc,
              Out<kWrite> __restrict z, int64_t n, float gs, double lr, double l1, double l2,
              double p) {
  const double inv_lr = 1.0 / lr;
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double gi = g[i] * gs;
    const double n_old = acc[i];
    const float n_new = static_cast<float>(n_old + gi * gi);
    const double pow_new = kSqrt ? std::sqrt(double{n_new}) : std::pow(double{n_new}, -p);
    const double pow_old = kSqrt ? std::sqrt(n_old) : std::pow(n_old, -p);
    const double sigma = (pow_new - pow_old) / lr;
    const float zi = static_cast<float>(z[i] + gi - sigma * w[i]);
    const double shrunk = zi - std::copysign(l1, static_cast<double>(zi));
    const float updated = static_cast<float>(-shrunk / (pow_new * inv_lr + 2.0 * l2));
    const float wi = std::abs(zi) <= l1 ? 0.0f : updated;
    if constexpr (kWrite) {
      acc[i] = n_new;
      z[i] = zi;
      w[i] = wi;
    } else {
      bad |= NonFinite(n_new) | NonFinite(zi) | NonFinite(wi);
    }
  }
  return bad == 0;
}

// Runs a loop's store (write) or check instantiation: f(std::bool_constant<kWrite>).
template <typename F>
bool Run(bool write, F f) {
  return write ? f(std::true_type{}) : f(std::false_type{});
}

}  // namespace

bool SgdKernel(float* w, const float* g, int64_t n, float gs, float neg_lr, bool write) {
  return Run(write, [&](auto kw) { return SgdLoop<decltype(kw)::value>(w, g, n, gs, neg_lr); });
}

bool AdagradKernel(float* w, const float* g, float* sum, int64_t n, float gs, float eps,
                   float neg_lr, bool write) {
  return Run(write, [&](auto kw) {
    return AdagradLoop<decltype(kw)::value>(w, g, sum, n, gs, eps, neg_lr);
  });
}

bool AdamKernel(float* w, const float* g, float* m, float* v, int64_t n, float gs,
                float one_minus_b1, float b2, float one_minus_b2, float bc2_sqrt, float eps,
                float neg_step, bool write) {
  return Run(write, [&](auto kw) {
    return AdamLoop<decltype(kw)::value>(w, g, m, v, n, gs, one_minus_b1, b2, one_minus_b2,
                                         bc2_sqrt, eps, neg_step);
  });
}

bool FtrlKernel(float* w, const float* g, float* acc, float* z, int64_t n, float gs, double lr,
                double l1, double l2, double p, bool write) {
  return Run(write, [&](auto kw) {
    if (p == -0.5) return FtrlLoop<decltype(kw)::value, true>(w, g, acc, z, n, gs, lr, l1, l2, p);
    return FtrlLoop<decltype(kw)::value, false>(w, g, acc, z, n, gs, lr, l1, l2, p);
  });
}

bool SgdOptimizer::Update(float* weights, const float* grad, int64_t, int64_t count, double lr,
                          float grad_scale, bool write) {
  return SgdKernel(weights, grad, count, grad_scale, static_cast<float>(-lr), write);
}

MomentumOptimizer::MomentumOptimizer(const OptimizerConfig& config, int64_t num_elements,
                                     double momentum, bool nesterov)
    : ScheduledOptimizer(config, num_elements), momentum_(momentum), nesterov_(nesterov) {
  if (momentum_ != 0.0) buf_ = Slot(n_, 0.0f);
}

bool MomentumOptimizer::Update(float* weights, const float* grad, int64_t begin, int64_t count,
                               double lr, float grad_scale, bool write) {
  const float neg_lr = static_cast<float>(-lr);
  if (buf_ == nullptr) {  // torch: momentum 0 is plain SGD
    return SgdKernel(weights, grad, count, grad_scale, neg_lr, write);
  }
  const float mu = static_cast<float>(momentum_);
  float* buf = buf_.get() + begin;
  return Run(write, [&](auto kw) {
    if (nesterov_)
      return MomentumLoop<decltype(kw)::value, true>(weights, grad, buf, count, grad_scale, mu,
                                                     neg_lr);
    return MomentumLoop<decltype(kw)::value, false>(weights, grad, buf, count, grad_scale, mu,
                                                    neg_lr);
  });
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

bool AdagradOptimizer::Update(float* weights, const float* grad, int64_t begin, int64_t count,
                              double lr, float grad_scale, bool write) {
  return AdagradKernel(weights, grad, sum_.get() + begin, count, grad_scale,
                       static_cast<float>(eps_), static_cast<float>(-lr), write);
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

bool AdamOptimizer::Update(float* weights, const float* grad, int64_t begin, int64_t count,
                           double lr, float grad_scale, bool write) {
  // A check runs before BeginUpdate counts the update it checks.
  const double t = static_cast<double>(write ? t_ : t_ + 1);
  const double bias_correction1 = 1.0 - std::pow(beta1_, t);
  const double bias_correction2 = 1.0 - std::pow(beta2_, t);
  return AdamKernel(weights, grad, m_.get() + begin, v_.get() + begin, count, grad_scale,
                    static_cast<float>(1.0 - beta1_), static_cast<float>(beta2_),
                    static_cast<float>(1.0 - beta2_),
                    static_cast<float>(std::sqrt(bias_correction2)), static_cast<float>(eps_),
                    static_cast<float>(-lr / bias_correction1), write);
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

bool RmsPropOptimizer::Update(float* weights, const float* grad, int64_t begin, int64_t count,
                              double lr, float grad_scale, bool write) {
  float* sq = square_avg_.get() + begin;
  const float rho = static_cast<float>(rho_), one_minus_rho = static_cast<float>(1.0 - rho_),
              eps = static_cast<float>(eps_), mu = static_cast<float>(momentum_),
              neg_lr = static_cast<float>(-lr);
  return Run(write, [&](auto kw) {
    if (buf_ == nullptr) {
      return RmsPropLoop<decltype(kw)::value, false>(weights, grad, sq, nullptr, count, grad_scale,
                                                     rho, one_minus_rho, eps, mu, neg_lr);
    }
    return RmsPropLoop<decltype(kw)::value, true>(weights, grad, sq, buf_.get() + begin, count,
                                                  grad_scale, rho, one_minus_rho, eps, mu, neg_lr);
  });
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

bool FtrlOptimizer::Update(float* weights, const float* grad, int64_t begin, int64_t count,
                           double lr, float grad_scale, bool write) {
  return FtrlKernel(weights, grad, n_acc_.get() + begin, z_.get() + begin, count, grad_scale, lr,
                    l1_, l2_, power_, write);
}

Slots FtrlOptimizer::slots() const { return {{"accumulator", n_acc_.get()}, {"linear", z_.get()}}; }

}  // namespace pstrain
