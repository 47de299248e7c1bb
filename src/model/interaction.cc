// The dot-product interaction: per example, the Gram matrix of its field vectors, upper triangle.
#include "model/interaction.h"

#include <cassert>
#include <type_traits>

namespace pstrain::layers {
namespace {

// The fields x dim vectors of row r of x (rows of a row-major matrix are contiguous).
template <typename Ref>
auto FieldsOf(Ref& x, Eigen::Index r, int fields, int dim) {
  using Scalar = std::remove_pointer_t<decltype(x.data())>;
  using Map = Eigen::Map<std::conditional_t<std::is_const_v<Scalar>, const Matrix, Matrix>>;
  return Map(x.data() + r * x.outerStride(), fields, dim);
}

}  // namespace

void DotInteractionForward(const Eigen::Ref<const Matrix>& x, int fields, int dim,
                           Eigen::Ref<Matrix> z) {
  assert(x.cols() == fields * dim && z.rows() == x.rows() && z.cols() == InteractionPairs(fields));
  Matrix gram(fields, fields);
  for (Eigen::Index r = 0; r < x.rows(); ++r) {
    const auto e = FieldsOf(x, r, fields, dim);
    gram.noalias() = e * e.transpose();
    float* out = z.data() + r * z.outerStride();
    for (int f = 0; f < fields; ++f) {
      for (int g = f + 1; g < fields; ++g) *out++ = gram(f, g);
    }
  }
}

void DotInteractionBackward(const Eigen::Ref<const Matrix>& x, int fields, int dim,
                            const Eigen::Ref<const Matrix>& dz, Eigen::Ref<Matrix> dx) {
  assert(x.cols() == fields * dim && dz.rows() == x.rows() && dx.rows() == x.rows());
  assert(dz.cols() == InteractionPairs(fields) && dx.cols() == x.cols());
  // z = upper triangle of E E^T, so dE = (G + G^T) E with G the upper triangle holding dz.
  Matrix g = Matrix::Zero(fields, fields);
  for (Eigen::Index r = 0; r < x.rows(); ++r) {
    const float* in = dz.data() + r * dz.outerStride();
    for (int f = 0; f < fields; ++f) {
      for (int h = f + 1; h < fields; ++h) g(f, h) = g(h, f) = *in++;
    }
    auto d = FieldsOf(dx, r, fields, dim);
    d.noalias() += g * FieldsOf(x, r, fields, dim);
  }
}

}  // namespace pstrain::layers
