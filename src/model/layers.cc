// Dense, ReLU and softmax cross-entropy with explicit backward passes.
#include <cassert>
#include <cmath>

#include "model/model.h"

namespace pstrain::layers {

void DenseForward(const Eigen::Ref<const Matrix>& x, const Eigen::Ref<const Matrix>& w,
                  const float* b, Matrix* y) {
  assert(x.cols() == w.rows());
  y->resize(x.rows(), w.cols());  // no reallocation when the shape is unchanged
  y->noalias() = x * w;
  y->rowwise() += Eigen::Map<const Vector>(b, w.cols());
}

void DenseBackward(const Eigen::Ref<const Matrix>& x, const Eigen::Ref<const Matrix>& w,
                   const Matrix& dy, Matrix* dx, float* dw, float* db) {
  assert(x.rows() == dy.rows() && x.cols() == w.rows() && dy.cols() == w.cols());
  MatrixMap(dw, w.rows(), w.cols()).noalias() = x.transpose() * dy;
  Eigen::Map<Vector>(db, w.cols()).noalias() = dy.colwise().sum();
  if (dx != nullptr) {
    dx->resize(dy.rows(), w.rows());
    dx->noalias() = dy * w.transpose();
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

}  // namespace pstrain::layers
