// The dot-product interaction layer: hand-computed values and finite-difference gradients.
#include <cmath>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "model/interaction.h"

namespace pstrain {
namespace {

TEST(DotInteractionTest, ForwardHandComputed) {
  // Two rows of three fields of dim 2.
  Matrix x(2, 6);
  x << 1, 2, 3, 4, 5, 6,  //
      -1, 0, 0.5, 2, 0, 0;
  Matrix z(2, 3);
  layers::DotInteractionForward(x, 3, 2, z);
  // Pairs (0,1), (0,2), (1,2).
  EXPECT_FLOAT_EQ(z(0, 0), 1 * 3 + 2 * 4);
  EXPECT_FLOAT_EQ(z(0, 1), 1 * 5 + 2 * 6);
  EXPECT_FLOAT_EQ(z(0, 2), 3 * 5 + 4 * 6);
  EXPECT_FLOAT_EQ(z(1, 0), -0.5f);
  EXPECT_FLOAT_EQ(z(1, 1), 0);
  EXPECT_FLOAT_EQ(z(1, 2), 0);
}

TEST(DotInteractionTest, BackwardMatchesFiniteDifferences) {
  constexpr int kRows = 3, kFields = 5, kDim = 3, kPairs = kFields * (kFields - 1) / 2;
  ASSERT_EQ(layers::InteractionPairs(kFields), kPairs);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  // The layer works on column blocks of wider matrices, as the Wide & Deep model uses it.
  Matrix wide_x(kRows, 2 + kFields * kDim), wide_z(kRows, kPairs + 1), r(kRows, kPairs);
  for (float* m : {wide_x.data(), r.data()}) {
    for (int i = 0; i < kRows * (m == r.data() ? kPairs : 2 + kFields * kDim); ++i) m[i] = u(rng);
  }
  auto x = wide_x.middleCols(2, kFields * kDim);
  // loss = sum of z .* r, so dz = r.
  auto loss = [&] {
    layers::DotInteractionForward(x, kFields, kDim, wide_z.leftCols(kPairs));
    return (wide_z.leftCols(kPairs).cast<double>().array() * r.cast<double>().array()).sum();
  };
  Matrix wide_dx = Matrix::Constant(kRows, 1 + kFields * kDim, 0.25f);
  layers::DotInteractionBackward(x, kFields, kDim, r, wide_dx.rightCols(kFields * kDim));
  EXPECT_FLOAT_EQ(wide_dx(1, 0), 0.25f) << "a column outside dx was written";
  constexpr float kEps = 1e-2f;
  for (int row = 0; row < kRows; ++row) {
    for (int c = 0; c < kFields * kDim; ++c) {
      float& v = x(row, c);
      const float saved = v;
      v = saved + kEps;
      const double up = loss();
      v = saved - kEps;
      const double down = loss();
      v = saved;
      const double numeric = (up - down) / (2 * kEps);
      // The backward pass adds to what dx held.
      EXPECT_NEAR(wide_dx(row, 1 + c) - 0.25f, numeric, 1e-4 + 1e-3 * std::abs(numeric))
          << "row " << row << " column " << c;
    }
  }
}

}  // namespace
}  // namespace pstrain
