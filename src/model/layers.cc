// Dense, ReLU and softmax cross-entropy with explicit backward passes.
#include <cassert>
#include <cmath>
#include <cstdint>

#include "model/gemm.h"
#include "model/model.h"

namespace pstrain::layers {

namespace {

// Floats between the starts of two rows of m.
template <typename M>
int64_t Stride(const M& m) {
  return static_cast<int64_t>(m.outerStride());
}

}  // namespace

void DenseForward(const Eigen::Ref<const Matrix>& x, const Eigen::Ref<const Matrix>& w,
                  const float* b, Matrix* y) {
  assert(x.cols() == w.rows());
  // y = b in every row (no reallocation when the shape is unchanged), then y += x w.
  *y = Eigen::Map<const Vector>(b, w.cols()).replicate(x.rows(), 1);
  gemm::Sgemm(false, false, x.rows(), w.cols(), x.cols(), x.data(), Stride(x), w.data(), Stride(w),
              1.0f, y->data(), y->cols());
}

void DenseBackward(const Eigen::Ref<const Matrix>& x, const Eigen::Ref<const Matrix>& w,
                   const Matrix& dy, Matrix* dx, float* dw, float* db) {
  assert(x.rows() == dy.rows() && x.cols() == w.rows() && dy.cols() == w.cols());
  // dw = x^T dy: (in x n) (n x out)
  gemm::Sgemm(true, false, x.cols(), dy.cols(), x.rows(), x.data(), Stride(x), dy.data(), dy.cols(),
              0.0f, dw, w.cols());
  Eigen::Map<Vector> bias_grad(db, w.cols());
  if (dy.rows() == 0) {
    bias_grad.setZero();  // a column sum of no rows would offset dy's null data pointer
  } else {
    bias_grad.noalias() = dy.colwise().sum();
  }
  if (dx != nullptr) {
    dx->resize(dy.rows(), w.rows());
    // dx = dy w^T: (n x out) (out x in)
    gemm::Sgemm(false, true, dy.rows(), w.rows(), dy.cols(), dy.data(), dy.cols(), w.data(),
                Stride(w), 0.0f, dx->data(), dx->cols());
  }
}

void ReluForward(Matrix* x) { *x = x->cwiseMax(0.0f); }

void ReluBackward(const Matrix& y, Matrix* dy) {
  assert(y.rows() == dy->rows() && y.cols() == dy->cols());
  dy->array() = (y.array() > 0.0f).select(dy->array(), 0.0f);
}

float SoftmaxCrossEntropy(const Matrix& logits, const int32_t* labels, Matrix* dlogits) {
  const Eigen::Index n = logits.rows();
  const Eigen::Index classes = logits.cols();
  dlogits->resize(n, classes);
  if (n == 0) return 0.0f;
  const float inv_n = 1.0f / static_cast<float>(n);
  double total = 0.0;
  for (Eigen::Index i = 0; i < n; ++i) {
    const int32_t label = labels[i];
    assert(label >= 0 && label < classes);
    const float max = logits.row(i).maxCoeff();
    auto d = dlogits->row(i);
    d = (logits.row(i).array() - max).exp().matrix();
    const float sum = d.sum();
    // loss_i = log(sum_j e^(l_j - max)) - (l_label - max)
    total += std::log(static_cast<double>(sum)) - static_cast<double>(logits(i, label) - max);
    d *= inv_n / sum;
    d(label) -= inv_n;
  }
  return static_cast<float>(total / static_cast<double>(n));
}

float SquaredError(const float* outputs, const float* targets, int64_t n, float* doutputs) {
  if (n <= 0) return 0.0f;
  const float two_over_n = 2.0f / static_cast<float>(n);
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float e = outputs[i] - targets[i];
    total += static_cast<double>(e) * e;
    doutputs[i] = two_over_n * e;
  }
  return static_cast<float>(total / static_cast<double>(n));
}

}  // namespace pstrain::layers
