// Optimizers applied on the parameter server (internal to src/ps).
//
// An Optimizer belongs to one variable and owns that variable's slots (moments, accumulators,
// momentum buffers), so it is sized for the variable when created. It is not thread-safe: the
// caller holds the variable's lock around Apply.
//
// Every optimizer matches torch.optim's single-tensor implementation with weight_decay 0 (FTRL,
// which torch lacks, follows TensorFlow's ApplyFtrl): slots are float32 like the weights, scalar
// hyper-parameters and bias corrections are computed in double and used as float, as PyTorch does
// with Python-float hyper-parameters on float32 tensors.
//
//   sgd       w -= lr g
//   momentum  b = g (first update) else mu b + g;  w -= lr (nesterov ? g + mu b : b)
//             (torch.optim.SGD, dampening 0; momentum 0 is plain SGD and keeps no buffer)
//   adagrad   sum += g^2;  w -= lr g / (sqrt(sum) + eps)          (torch.optim.Adagrad)
//   adam      t += 1; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//             w -= lr (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)  (torch.optim.Adam)
//   rmsprop   sq = rho sq + (1-rho) g^2; avg = sqrt(sq) + eps;
//             momentum > 0: buf = momentum buf + g / avg; w -= lr buf;  else w -= lr g / avg
//             (torch.optim.RMSprop, centered=False; rho is torch's alpha)
//   ftrl      FTRL-Proximal (McMahan et al. 2013, Algorithm 1) with learning_rate_power p:
//             n' = n + g^2; sigma = (n'^-p - n^-p) / lr; z += g - sigma w; n = n';
//             w = |z| <= l1 ? 0 : -(z - sign(z) l1) / (n^-p / lr + 2 l2)
//             (p = -0.5 is the paper's rule with beta = 0; 2 l2 as in TensorFlow.) Computed per
//             element in double from the float slots.
//
// Before the update, a gradient is scaled by clip_norm / max(||g||_2, clip_norm) when
// clip_norm > 0 (the L2 norm of this one gradient, computed in double; torch's clip_grad_norm_
// divides by norm + 1e-6 instead, a relative difference of 1e-6 / norm), and lr is the scheduled
// learning rate at `step` (see ScheduledLearningRate).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/optimizer_config.h"
#include "ps.pb.h"

namespace pstrain {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Updates `weights` in place from `grad`; both hold `n` floats, and `n` must equal the
  // num_elements the optimizer was created for. The gradient is assumed finite. `step` is the
  // global step before this update (the variable's update count: 0 for the first update); it
  // drives only the learning-rate schedule. (Adam's bias corrections use the optimizer's own count
  // of Apply calls, like torch's per-parameter state['step'].)
  // With config.clip_norm > 0 the gradient is first scaled by clip_norm / max(norm, clip_norm),
  // norm being the L2 norm of this `grad`; `grad` itself is not modified.
  virtual void Apply(float* weights, const float* grad, int64_t n, int64_t step) = 0;
  // As Apply, with the gradient given in consecutive chunks (a push applied from the pieces it
  // arrived in, without a copy of its size): grad(fn) calls fn(begin, values, count) for ranges
  // covering [0, n) in order, the same ranges and values each time (it is called once, or twice
  // with clipping: the norm first). The result is Apply's on the whole gradient, bit for bit.
  using ChunkSink = absl::FunctionRef<void(int64_t begin, const float* values, int64_t count)>;
  using Chunks = absl::FunctionRef<void(ChunkSink)>;
  virtual void ApplyChunks(float* weights, Chunks grad, int64_t n, int64_t step) = 0;
  // The check before an apply: the index of the first element whose weight or slot the update
  // ApplyChunks(weights, grad, n, step) would make non-finite (an overflow from finite inputs,
  // e.g. two steps of 3.4e38 with lr 1), or -1 when every value stays finite. Computes what
  // ApplyChunks would write, with the same expressions, and changes nothing; `grad` is called as
  // ApplyChunks calls it.
  virtual int64_t FirstNonFiniteUpdate(const float* weights, Chunks grad, int64_t n,
                                       int64_t step) = 0;
  // The config's name: "sgd", "momentum", "adagrad", "adam", "rmsprop" or "ftrl".
  virtual std::string_view name() const = 0;
  // For tests and debugging: the per-element state, each slot `n` floats, named as torch names
  // them: momentum "momentum_buffer" (none when momentum is 0; zeros before the first update,
  // where torch has None); adagrad "sum"; adam "exp_avg", "exp_avg_sq"; rmsprop "square_avg"
  // and, with momentum, "momentum_buffer"; ftrl "accumulator" (n) and "linear" (z); sgd none.
  // The pointers stay valid for the optimizer's lifetime; the values change with Apply.
  virtual std::vector<std::pair<std::string, const float*>> slots() const = 0;
  // For checkpoints: slots() to write into (the optimizer owns that memory), and the
  // optimizer's own count of updates (Adam's t; 0 and ignored for the others).
  std::vector<std::pair<std::string, float*>> mutable_slots();
  virtual const OptimizerConfig& config() const = 0;
  virtual int64_t update_count() const { return 0; }
  virtual void set_update_count(int64_t count) {}
};

// Defaults for unset (or, for non-optional proto3 fields, zero) hyper-parameters.
constexpr double kDefaultAdamBeta1 = 0.9;
constexpr double kDefaultAdamBeta2 = 0.999;
constexpr double kDefaultAdamEpsilon = 1e-8;
constexpr double kDefaultAdagradEpsilon = 1e-10;
constexpr double kDefaultAdagradInitialAccumulator = 0.0;
constexpr double kDefaultRmsPropRho = 0.99;
constexpr double kDefaultRmsPropEpsilon = 1e-8;
constexpr double kDefaultFtrlInitialAccumulator = 0.1;  // used when the field is 0
constexpr double kDefaultFtrlLearningRatePower = -0.5;

// ValidateOptimizerConfig, then the optimizer for a variable of `num_elements` floats with its
// slots allocated (InvalidArgument also for a negative num_elements).
absl::StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(const OptimizerConfig& config,
                                                           int64_t num_elements);

// Learning rate for the update at `step` (0-based; a negative step counts as 0) under
// config.schedule, lr being config.learning_rate:
//   "" or "constant": lr
//   "step":   lr * decay_rate ^ floor(step / step_size)
//   "cosine": step < warmup_steps:  lr * (step + 1) / warmup_steps
//               (linear warm-up: lr / warmup_steps at step 0, reaching lr at step warmup_steps-1)
//             otherwise:  min_lr + 0.5 (lr - min_lr) (1 + cos(pi * min(1, (step - warmup_steps) /
//                                                                   (total_steps - warmup_steps))))
//               (lr at step warmup_steps, min_lr from step total_steps on)
// Expects a config that ValidateOptimizerConfig accepts; for an invalid schedule it returns lr.
double ScheduledLearningRate(const OptimizerConfig& config, int64_t step);

// What one update applies: the scheduled learning rate and the gradient's clipping scale,
// config.clip_norm / max(norm, config.clip_norm) (1 when not clipping). `sum_of_squares`
// returns the squared L2 norm of the whole gradient, in double; it is called only when clipping.
struct StepRate {
  double lr;
  float grad_scale;
};
StepRate RateOfStep(const OptimizerConfig& config, int64_t step,
                    absl::FunctionRef<double()> sum_of_squares);

// ---- Implementations (CreateOptimizer builds these; hyper-parameters already validated) ------

// Schedule and clipping, shared by all optimizers: Apply computes the learning rate and the
// gradient scale, then calls Update.
class ScheduledOptimizer : public Optimizer {
 public:
  void Apply(float* weights, const float* grad, int64_t n, int64_t step) final;
  void ApplyChunks(float* weights, Chunks grad, int64_t n, int64_t step) final;
  int64_t FirstNonFiniteUpdate(const float* weights, Chunks grad, int64_t n, int64_t step) final;
  std::string_view name() const final { return config_.name(); }
  const OptimizerConfig& config() const final { return config_; }
  int64_t num_elements() const { return n_; }

 protected:
  ScheduledOptimizer(const OptimizerConfig& config, int64_t num_elements);
  // Called once per update, before its Update calls (Adam counts its steps here).
  virtual void BeginUpdate() {}
  // The update of elements [begin, begin + count) with learning rate `lr` from the gradient
  // grad[i] * grad_scale (computed in float, as torch's in-place clipping does); `weights` and
  // `grad` point at element `begin`, the slots are indexed from it. With `write` it updates and
  // returns true; without, it is the check of the next update (before its BeginUpdate): it
  // writes nothing, not even through `weights`, and returns whether every new weight and slot
  // value would be finite.
  virtual bool Update(float* weights, const float* grad, int64_t begin, int64_t count, double lr,
                      float grad_scale, bool write) = 0;
  static std::unique_ptr<float[]> Slot(int64_t n, float initial_value);

  const int64_t n_;

 private:
  // RateOfStep of `grad`'s norm.
  StepRate RateAndScale(Chunks grad, int64_t step) const;

  const OptimizerConfig config_;
};

class SgdOptimizer final : public ScheduledOptimizer {
 public:
  SgdOptimizer(const OptimizerConfig& config, int64_t num_elements)
      : ScheduledOptimizer(config, num_elements) {}
  std::vector<std::pair<std::string, const float*>> slots() const override { return {}; }

 private:
  bool Update(float* weights, const float* grad, int64_t begin, int64_t count, double lr,
              float grad_scale, bool write) override;
};

class MomentumOptimizer final : public ScheduledOptimizer {
 public:
  MomentumOptimizer(const OptimizerConfig& config, int64_t num_elements, double momentum,
                    bool nesterov);
  std::vector<std::pair<std::string, const float*>> slots() const override;

 private:
  bool Update(float* weights, const float* grad, int64_t begin, int64_t count, double lr,
              float grad_scale, bool write) override;
  const double momentum_;
  const bool nesterov_;
  std::unique_ptr<float[]> buf_;  // null when momentum_ is 0; zero before the first update
};

class AdagradOptimizer final : public ScheduledOptimizer {
 public:
  AdagradOptimizer(const OptimizerConfig& config, int64_t num_elements,
                   double initial_accumulator_value, double epsilon);
  std::vector<std::pair<std::string, const float*>> slots() const override;

 private:
  bool Update(float* weights, const float* grad, int64_t begin, int64_t count, double lr,
              float grad_scale, bool write) override;
  const double eps_;
  std::unique_ptr<float[]> sum_;
};

class AdamOptimizer final : public ScheduledOptimizer {
 public:
  AdamOptimizer(const OptimizerConfig& config, int64_t num_elements, double beta1, double beta2,
                double epsilon);
  std::vector<std::pair<std::string, const float*>> slots() const override;
  int64_t step() const { return t_; }  // number of updates so far
  int64_t update_count() const override { return t_; }
  void set_update_count(int64_t count) override { t_ = count; }

 private:
  void BeginUpdate() override { ++t_; }
  bool Update(float* weights, const float* grad, int64_t begin, int64_t count, double lr,
              float grad_scale, bool write) override;
  const double beta1_, beta2_, eps_;
  std::unique_ptr<float[]> m_, v_;  // first and second moments, zero-initialised
  int64_t t_ = 0;
};

class RmsPropOptimizer final : public ScheduledOptimizer {
 public:
  RmsPropOptimizer(const OptimizerConfig& config, int64_t num_elements, double rho, double epsilon,
                   double momentum);
  std::vector<std::pair<std::string, const float*>> slots() const override;

 private:
  bool Update(float* weights, const float* grad, int64_t begin, int64_t count, double lr,
              float grad_scale, bool write) override;
  const double rho_, eps_, momentum_;
  std::unique_ptr<float[]> square_avg_, buf_;  // buf_ null when momentum_ is 0
};

class FtrlOptimizer final : public ScheduledOptimizer {
 public:
  FtrlOptimizer(const OptimizerConfig& config, int64_t num_elements,
                double initial_accumulator_value, double l1, double l2, double learning_rate_power);
  std::vector<std::pair<std::string, const float*>> slots() const override;

 private:
  bool Update(float* weights, const float* grad, int64_t begin, int64_t count, double lr,
              float grad_scale, bool write) override;
  const double l1_, l2_, power_;
  std::unique_ptr<float[]> n_acc_, z_;  // accumulator n and linear term z
};

}  // namespace pstrain
