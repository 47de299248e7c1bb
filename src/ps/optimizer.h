// Optimizers applied on the parameter server (internal to src/ps).
//
// An Optimizer belongs to one variable and owns that variable's slots (Adam's moments and step
// count), so it is sized for the variable when created. It is not thread-safe: the caller holds
// the variable's lock around Apply.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "ps.pb.h"

namespace pstrain {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Updates `weights` in place with `grad`; both hold `n` floats, and `n` must equal the
  // num_elements the optimizer was created for. The gradient is assumed finite.
  virtual void Apply(float* weights, const float* grad, int64_t n) = 0;
  // "sgd" or "adam".
  virtual std::string_view name() const = 0;
};

// Plain SGD: w -= lr * g.
class SgdOptimizer final : public Optimizer {
 public:
  explicit SgdOptimizer(float learning_rate) : lr_(learning_rate) {}
  void Apply(float* weights, const float* grad, int64_t n) override;
  std::string_view name() const override { return "sgd"; }

 private:
  const float lr_;
};

// Adam as torch.optim.Adam computes it (no weight decay, no amsgrad):
//   t += 1; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//   w -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
class AdamOptimizer final : public Optimizer {
 public:
  AdamOptimizer(int64_t num_elements, double learning_rate, double beta1, double beta2,
                double epsilon);
  void Apply(float* weights, const float* grad, int64_t n) override;
  std::string_view name() const override { return "adam"; }

  int64_t step() const { return t_; }
  int64_t num_elements() const { return n_; }

 private:
  const double lr_, beta1_, beta2_, eps_;
  std::unique_ptr<float[]> m_, v_;  // first and second moments, zero-initialised
  int64_t n_;
  int64_t t_ = 0;  // number of Apply calls so far
};

constexpr double kDefaultAdamBeta1 = 0.9;
constexpr double kDefaultAdamBeta2 = 0.999;
constexpr double kDefaultAdamEpsilon = 1e-8;

// Builds the optimizer `config` names for a variable of `num_elements` floats. InvalidArgument for
// an unknown name, a learning rate that is not finite and positive, and (for adam) a beta outside
// [0, 1) or a negative or non-finite epsilon. A zero beta1/beta2/epsilon means the default.
absl::StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(const OptimizerConfig& config,
                                                           int64_t num_elements);

}  // namespace pstrain
