// Multi-layer perceptron over caller-owned parameters.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "model/model.h"

namespace pstrain {
namespace {

constexpr Eigen::Index kEvalChunk = 1024;

// Runs layers 0..L-1 over x; acts[i] holds the output of layer i (ReLU applied for all but the
// last, which holds the logits). params holds kernel, bias per layer.
void Forward(const std::vector<int>& widths, const std::vector<const float*>& params,
             const Eigen::Ref<const Matrix>& x, std::vector<Matrix>* acts) {
  const size_t layers = widths.size() - 1;
  for (size_t i = 0; i < layers; ++i) {
    ConstMatrixMap w(params[2 * i], widths[i], widths[i + 1]);
    if (i == 0) {
      layers::DenseForward(x, w, params[1], &(*acts)[0]);
    } else {
      layers::DenseForward((*acts)[i - 1], w, params[2 * i + 1], &(*acts)[i]);
    }
    if (i + 1 < layers) layers::ReluForward(&(*acts)[i]);
  }
}

// The largest |value| of m, or infinity if any value is not finite.
double MaxAbs(const Eigen::Ref<const Matrix>& m) {
  if (m.size() == 0) return 0;
  const float max = m.cwiseAbs().maxCoeff<Eigen::PropagateNaN>();  // one pass
  return std::isfinite(max) ? static_cast<double>(max) : std::numeric_limits<double>::infinity();
}

// Whether the backward pass from dlogits cannot produce a non-finite gradient: with n rows, a
// layer's kernel gradient is bounded by n * max|input| * max|dy|, its bias gradient by
// n * max|dy|, and the dy of the layer below by max|dy| times the largest absolute row sum of
// the kernel (ReLU only zeroes). Every bound must stay far below float's largest value, so that
// no sum of products in float overflows even with rounding; a non-finite input, activation,
// kernel or logit gradient fails the test.
bool BackwardStaysFinite(const std::vector<int>& widths, const std::vector<const float*>& params,
                         const Eigen::Ref<const Matrix>& x, const std::vector<Matrix>& acts,
                         const Matrix& dlogits) {
  constexpr double kLimit = std::numeric_limits<float>::max() / 16.0;
  const double n = static_cast<double>(x.rows());
  const size_t layers = widths.size() - 1;
  double dy = MaxAbs(dlogits);
  for (size_t i = layers; i-- > 0;) {
    const double in = i == 0 ? MaxAbs(x) : MaxAbs(acts[i - 1]);
    if (!(n * in * dy < kLimit && n * dy < kLimit)) return false;
    if (i == 0) break;
    ConstMatrixMap w(params[2 * i], widths[i], widths[i + 1]);
    if (!w.allFinite()) return false;
    dy *= static_cast<double>(w.cwiseAbs().rowwise().sum().maxCoeff());
    if (!(dy < kLimit)) return false;
  }
  return true;
}

}  // namespace

Mlp::Mlp(std::vector<int> widths) : widths_(std::move(widths)) {
  if (widths_.size() < 2) {
    throw std::invalid_argument(
        absl::StrCat("Mlp needs at least 2 widths (inputs and classes), got ", widths_.size()));
  }
  for (int w : widths_) {
    if (w <= 0) throw std::invalid_argument(absl::StrCat("Mlp width ", w, " is not positive"));
  }
  const size_t layers = widths_.size() - 1;
  for (size_t i = 0; i < layers; ++i) {
    params_.push_back({absl::StrCat("dense", i, "/kernel"), {widths_[i], widths_[i + 1]}});
    params_.push_back({absl::StrCat("dense", i, "/bias"), {widths_[i + 1]}});
  }
  acts_.resize(layers);
  grads_.resize(layers);
}

std::vector<Tensor> Mlp::Initialize(uint64_t seed) const {
  std::mt19937_64 rng(seed);
  std::vector<Tensor> out;
  out.reserve(params_.size());
  for (const ParamSpec& spec : params_) {
    Tensor t(spec.shape, 0.0f);
    if (spec.shape.size() == 2) {  // kernel [in, out]: Glorot uniform
      const double limit = std::sqrt(6.0 / static_cast<double>(spec.shape[0] + spec.shape[1]));
      for (float& v : t.values) {
        // 53 random bits -> u in [0, 1); mapped to [-limit, limit). Spelled out rather than
        // std::uniform_real_distribution so values do not depend on the standard library.
        const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
        v = static_cast<float>((2.0 * u - 1.0) * limit);
      }
    }
    out.push_back(std::move(t));
  }
  return out;
}

namespace {

void ShapeGrads(const std::vector<ParamSpec>& specs, std::vector<Tensor>* grads) {
  grads->resize(specs.size());
  for (size_t k = 0; k < specs.size(); ++k) {
    Tensor& g = (*grads)[k];
    if (g.shape != specs[k].shape || g.size() != NumElements(specs[k].shape)) {
      g = Tensor(specs[k].shape, 0.0f);
    }
  }
}

}  // namespace

float Mlp::ForwardBackward(const std::vector<const float*>& params,
                           const Eigen::Ref<const Matrix>& x, const int32_t* labels,
                           std::vector<Tensor>* grads, const GradientsReady& ready) {
  assert(params.size() == params_.size());
  assert(x.cols() == widths_.front());
  ShapeGrads(params_, grads);
  Forward(widths_, params, x, &acts_);
  const float loss = layers::SoftmaxCrossEntropy(acts_.back(), labels, &grads_.back());
  Backward(params, x, grads, ready);
  return loss;
}

float Mlp::ForwardBackwardSquaredError(const std::vector<const float*>& params,
                                       const Eigen::Ref<const Matrix>& x, const float* targets,
                                       std::vector<Tensor>* grads, const GradientsReady& ready) {
  assert(params.size() == params_.size());
  assert(x.cols() == widths_.front() && widths_.back() == 1);
  ShapeGrads(params_, grads);
  Forward(widths_, params, x, &acts_);
  grads_.back().resize(x.rows(), 1);
  const float loss =
      layers::SquaredError(acts_.back().data(), targets, x.rows(), grads_.back().data());
  Backward(params, x, grads, ready);
  return loss;
}

void Mlp::Backward(const std::vector<const float*>& params, const Eigen::Ref<const Matrix>& x,
                   std::vector<Tensor>* grads, const GradientsReady& ready) {
  const size_t layers = widths_.size() - 1;
  const bool early = ready && BackwardStaysFinite(widths_, params, x, acts_, grads_[layers - 1]);
  for (size_t i = layers; i-- > 0;) {
    ConstMatrixMap w(params[2 * i], widths_[i], widths_[i + 1]);
    float* dw = (*grads)[2 * i].data();
    float* db = (*grads)[2 * i + 1].data();
    if (i == 0) {
      layers::DenseBackward(x, w, grads_[0], nullptr, dw, db);
    } else {
      layers::DenseBackward(acts_[i - 1], w, grads_[i], &grads_[i - 1], dw, db);
      layers::ReluBackward(acts_[i - 1], &grads_[i - 1]);
    }
    if (early) ready({static_cast<int>(2 * i), static_cast<int>(2 * i + 1)});
  }
  if (!early) ReportAllReady(ready, params_.size());
}

void Mlp::ForwardInChunks(const std::vector<const float*>& params,
                          const Eigen::Ref<const Matrix>& x,
                          const std::function<void(Eigen::Index, const Matrix&)>& fn) {
  assert(params.size() == params_.size());
  assert(x.cols() == widths_.front());
  const Eigen::Index n = x.rows();
  for (Eigen::Index start = 0; start < n; start += kEvalChunk) {
    const Eigen::Index len = std::min(kEvalChunk, n - start);
    Forward(widths_, params, x.middleRows(start, len), &acts_);
    fn(start, acts_.back());
  }
}

void Mlp::Outputs(const std::vector<const float*>& params, const Eigen::Ref<const Matrix>& x,
                  std::vector<float>* outputs) {
  outputs->resize(x.rows());
  ForwardInChunks(params, x, [&](Eigen::Index start, const Matrix& out) {
    for (Eigen::Index r = 0; r < out.rows(); ++r) (*outputs)[start + r] = out(r, 0);
  });
}

void Mlp::Classify(const std::vector<const float*>& params, const Eigen::Ref<const Matrix>& x,
                   std::vector<int32_t>* classes) {
  classes->resize(x.rows());
  ForwardInChunks(params, x, [&](Eigen::Index start, const Matrix& logits) {
    for (Eigen::Index r = 0; r < logits.rows(); ++r) {
      Eigen::Index best = 0;
      logits.row(r).maxCoeff(&best);
      (*classes)[start + r] = static_cast<int32_t>(best);
    }
  });
}

void Mlp::ClassOneProbabilities(const std::vector<const float*>& params,
                                const Eigen::Ref<const Matrix>& x, std::vector<float>* p) {
  p->resize(x.rows());
  ForwardInChunks(params, x, [&](Eigen::Index start, const Matrix& logits) {
    for (Eigen::Index r = 0; r < logits.rows(); ++r) {
      (*p)[start + r] = 1.0f / (1.0f + std::exp(logits(r, 0) - logits(r, 1)));
    }
  });
}

double Mlp::Accuracy(const std::vector<const float*>& params, const Eigen::Ref<const Matrix>& x,
                     const int32_t* labels) {
  const Eigen::Index n = x.rows();
  if (n == 0) return 0.0;
  std::vector<int32_t> classes;
  Classify(params, x, &classes);
  int64_t correct = 0;
  for (Eigen::Index r = 0; r < n; ++r) correct += classes[r] == labels[r];
  return static_cast<double>(correct) / static_cast<double>(n);
}

}  // namespace pstrain
