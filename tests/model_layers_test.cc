// Layers and Mlp: hand-computed values, finite-difference gradients, init and a training loop.
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/model.h"

namespace pstrain {
namespace {

Matrix RandomMatrix(int rows, int cols, std::mt19937* rng, float scale = 1.0f) {
  std::uniform_real_distribution<float> u(-scale, scale);
  Matrix m(rows, cols);
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < cols; ++j) m(i, j) = u(*rng);
  }
  return m;
}

// Central difference of f with respect to *v; restores *v.
double NumericGrad(float* v, const std::function<double()>& f, float eps = 1e-3f) {
  const float saved = *v;
  *v = saved + eps;
  const double plus = f();
  *v = saved - eps;
  const double minus = f();
  *v = saved;
  return (plus - minus) / (2.0 * static_cast<double>(eps));
}

void ExpectGradNear(double analytic, double numeric, const std::string& what) {
  EXPECT_NEAR(analytic, numeric, 1e-3 + 1e-2 * std::abs(numeric)) << what;
}

// Sum of y .* r in double: a scalar whose gradient with respect to y is r.
double Weighted(const Matrix& y, const Matrix& r) {
  return (y.cast<double>().array() * r.cast<double>().array()).sum();
}

TEST(DenseTest, ForwardHandComputed) {
  Matrix x(2, 3);
  x << 1, 2, 3, 4, 5, 6;
  Matrix w(3, 2);
  w << 1, -1, 0, 2, 0.5, 1;
  const float b[2] = {0.25f, -1.0f};
  Matrix y;
  layers::DenseForward(x, w, b, &y);
  ASSERT_EQ(y.rows(), 2);
  ASSERT_EQ(y.cols(), 2);
  // Row 0: [1 + 0 + 1.5, -1 + 4 + 3] + b; row 1: [4 + 0 + 3, -4 + 10 + 6] + b.
  EXPECT_FLOAT_EQ(y(0, 0), 2.75f);
  EXPECT_FLOAT_EQ(y(0, 1), 5.0f);
  EXPECT_FLOAT_EQ(y(1, 0), 7.25f);
  EXPECT_FLOAT_EQ(y(1, 1), 11.0f);
}

TEST(DenseTest, BackwardMatchesFiniteDifferences) {
  std::mt19937 rng(1);
  Matrix x = RandomMatrix(4, 5, &rng);
  Matrix w = RandomMatrix(5, 3, &rng);
  Matrix bm = RandomMatrix(1, 3, &rng);
  const Matrix r = RandomMatrix(4, 3, &rng);
  Matrix y;
  auto loss = [&] {
    layers::DenseForward(x, w, bm.data(), &y);
    return Weighted(y, r);
  };
  Matrix dx, dw(5, 3), db(1, 3);
  layers::DenseBackward(x, w, r, &dx, dw.data(), db.data());
  ASSERT_EQ(dx.rows(), 4);
  ASSERT_EQ(dx.cols(), 5);
  for (int i = 0; i < x.size(); ++i) {
    ExpectGradNear(dx.data()[i], NumericGrad(x.data() + i, loss), "dx " + std::to_string(i));
  }
  for (int i = 0; i < w.size(); ++i) {
    ExpectGradNear(dw.data()[i], NumericGrad(w.data() + i, loss), "dw " + std::to_string(i));
  }
  for (int i = 0; i < 3; ++i) {
    ExpectGradNear(db(0, i), NumericGrad(bm.data() + i, loss), "db " + std::to_string(i));
  }
  // dx is optional.
  Matrix dw2(5, 3), db2(1, 3);
  layers::DenseBackward(x, w, r, nullptr, dw2.data(), db2.data());
  EXPECT_TRUE(dw2.isApprox(dw));
}

TEST(ReluTest, ForwardAndBackward) {
  std::mt19937 rng(2);
  Matrix x = RandomMatrix(3, 4, &rng);
  // Keep inputs away from the kink so finite differences are meaningful.
  for (int i = 0; i < x.size(); ++i) {
    float& v = x.data()[i];
    if (std::abs(v) < 0.05f) v = v < 0 ? -0.05f : 0.05f;
  }
  const Matrix r = RandomMatrix(3, 4, &rng);
  Matrix y = x;
  layers::ReluForward(&y);
  for (int i = 0; i < x.size(); ++i) EXPECT_EQ(y.data()[i], std::max(x.data()[i], 0.0f));

  Matrix dy = r;
  layers::ReluBackward(y, &dy);
  auto loss = [&] {
    Matrix t = x;
    layers::ReluForward(&t);
    return Weighted(t, r);
  };
  for (int i = 0; i < x.size(); ++i) {
    ExpectGradNear(dy.data()[i], NumericGrad(x.data() + i, loss), "dx " + std::to_string(i));
  }
}

TEST(SoftmaxTest, HandComputed) {
  Matrix logits(1, 3);
  logits << 1, 2, 3;
  const int32_t label = 2;
  Matrix d;
  const float loss = layers::SoftmaxCrossEntropy(logits, &label, &d);
  EXPECT_NEAR(loss, 0.40760596f, 1e-6f);
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_NEAR(d(0, 0), std::exp(1.0) / z, 1e-6);
  EXPECT_NEAR(d(0, 1), std::exp(2.0) / z, 1e-6);
  EXPECT_NEAR(d(0, 2), std::exp(3.0) / z - 1.0, 1e-6);
}

TEST(SoftmaxTest, MeanOverRowsAndStableForLargeLogits) {
  Matrix logits(2, 3);
  logits << 1001, 1002, 1003,  // same as [1, 2, 3] after the max shift
      -50, -50, -50;           // uniform: loss log(3)
  const int32_t labels[2] = {2, 0};
  Matrix d;
  const float loss = layers::SoftmaxCrossEntropy(logits, labels, &d);
  ASSERT_TRUE(std::isfinite(loss));
  EXPECT_NEAR(loss, (0.40760596 + std::log(3.0)) / 2, 1e-5);
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_NEAR(d(0, 2), (std::exp(3.0) / z - 1.0) / 2, 1e-6);
  EXPECT_NEAR(d(1, 0), (1.0 / 3 - 1.0) / 2, 1e-6);
  EXPECT_NEAR(d(1, 1), (1.0 / 3) / 2, 1e-6);
  // Each row of the gradient sums to zero.
  EXPECT_NEAR(d.row(0).sum(), 0.0f, 1e-6f);
  EXPECT_NEAR(d.row(1).sum(), 0.0f, 1e-6f);
}

TEST(SoftmaxTest, GradientMatchesFiniteDifferences) {
  std::mt19937 rng(3);
  Matrix logits = RandomMatrix(4, 5, &rng, 2.0f);
  const int32_t labels[4] = {0, 4, 2, 2};
  Matrix d, scratch;
  layers::SoftmaxCrossEntropy(logits, labels, &d);
  auto loss = [&] { return layers::SoftmaxCrossEntropy(logits, labels, &scratch); };
  for (int i = 0; i < logits.size(); ++i) {
    ExpectGradNear(d.data()[i], NumericGrad(logits.data() + i, loss, 1e-2f),
                   "dlogits " + std::to_string(i));
  }
}

std::vector<const float*> Pointers(const std::vector<Tensor>& ts) {
  std::vector<const float*> out;
  for (const Tensor& t : ts) out.push_back(t.data());
  return out;
}

TEST(MlpTest, ParamSpecs) {
  Mlp mlp({784, 256, 128, 10});
  ASSERT_EQ(mlp.params().size(), 6u);
  EXPECT_EQ(mlp.params()[0].name, "dense0/kernel");
  EXPECT_THAT(mlp.params()[0].shape, ::testing::ElementsAre(784, 256));
  EXPECT_EQ(mlp.params()[1].name, "dense0/bias");
  EXPECT_THAT(mlp.params()[1].shape, ::testing::ElementsAre(256));
  EXPECT_EQ(mlp.params()[4].name, "dense2/kernel");
  EXPECT_THAT(mlp.params()[4].shape, ::testing::ElementsAre(128, 10));
  EXPECT_EQ(mlp.params()[5].name, "dense2/bias");
  EXPECT_THAT(mlp.widths(), ::testing::ElementsAre(784, 256, 128, 10));
  EXPECT_THROW(Mlp({5}), std::invalid_argument);
  EXPECT_THROW(Mlp({5, 0, 3}), std::invalid_argument);
}

TEST(MlpTest, InitializeDeterministicAndWithinGlorotLimit) {
  Mlp mlp({20, 30, 4});
  const std::vector<Tensor> a = mlp.Initialize(7);
  const std::vector<Tensor> b = mlp.Initialize(7);
  const std::vector<Tensor> c = mlp.Initialize(8);
  ASSERT_EQ(a.size(), mlp.params().size());
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(a[k].shape, mlp.params()[k].shape);
    EXPECT_EQ(a[k].values, b[k].values);
  }
  EXPECT_NE(a[0].values, c[0].values);
  for (size_t k : {0u, 2u}) {
    const double limit = std::sqrt(6.0 / static_cast<double>(a[k].shape[0] + a[k].shape[1]));
    float lo = 0, hi = 0;
    double mean = 0;
    for (float v : a[k].values) {
      EXPECT_LE(std::abs(v), limit);
      lo = std::min(lo, v);
      hi = std::max(hi, v);
      mean += v;
    }
    mean /= static_cast<double>(a[k].size());
    // Spread over the whole range, centred on zero.
    EXPECT_LT(lo, -0.9 * limit);
    EXPECT_GT(hi, 0.9 * limit);
    EXPECT_NEAR(mean, 0.0, 0.1 * limit);
  }
  for (size_t k : {1u, 3u}) {
    for (float v : a[k].values) EXPECT_EQ(v, 0.0f);
  }
}

TEST(MlpTest, GradientsMatchFiniteDifferences) {
  Mlp mlp({5, 4, 3, 3});
  std::vector<Tensor> params = mlp.Initialize(11);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  for (Tensor& t : params) {
    if (t.shape.size() == 1) {
      for (float& v : t.values) v = u(rng);  // non-zero biases exercise their gradients
    }
  }
  const Matrix x = RandomMatrix(4, 5, &rng);
  const int32_t labels[4] = {0, 2, 1, 2};
  std::vector<Tensor> grads;
  const float loss0 = mlp.ForwardBackward(Pointers(params), x, labels, &grads);
  ASSERT_TRUE(std::isfinite(loss0));
  ASSERT_EQ(grads.size(), params.size());

  std::vector<Tensor> scratch;
  auto loss = [&] { return mlp.ForwardBackward(Pointers(params), x, labels, &scratch); };
  int checked = 0;
  for (size_t k = 0; k < params.size(); ++k) {
    ASSERT_EQ(grads[k].shape, mlp.params()[k].shape);
    for (int64_t i = 0; i < params[k].size(); ++i, ++checked) {
      ExpectGradNear(grads[k].values[i], NumericGrad(&params[k].values[i], loss),
                     mlp.params()[k].name + "[" + std::to_string(i) + "]");
    }
  }
  EXPECT_EQ(checked, 5 * 4 + 4 + 4 * 3 + 3 + 3 * 3 + 3);
  // The same call again gives the same loss and gradients (scratch reuse is clean).
  std::vector<Tensor> again;
  EXPECT_EQ(mlp.ForwardBackward(Pointers(params), x, labels, &again), loss0);
  for (size_t k = 0; k < params.size(); ++k) EXPECT_EQ(again[k].values, grads[k].values);
}

TEST(MlpTest, SgdLearnsSeparableProblem) {
  constexpr int kFeatures = 8, kClasses = 3, kTrain = 600;
  std::mt19937 rng(9);
  std::normal_distribution<float> noise(0.0f, 0.5f);
  const Matrix centers = RandomMatrix(kClasses, kFeatures, &rng, 2.0f);
  auto make = [&](int n, Matrix* x, std::vector<int32_t>* y) {
    x->resize(n, kFeatures);
    y->resize(n);
    for (int i = 0; i < n; ++i) {
      (*y)[i] = i % kClasses;
      for (int j = 0; j < kFeatures; ++j) (*x)(i, j) = centers((*y)[i], j) + noise(rng);
    }
  };
  Matrix train_x, test_x;
  std::vector<int32_t> train_y, test_y;
  make(kTrain, &train_x, &train_y);
  make(2000, &test_x, &test_y);  // more than one 1024-row evaluation chunk

  Mlp mlp({kFeatures, 16, kClasses});
  std::vector<Tensor> params = mlp.Initialize(3);
  const double before = mlp.Accuracy(Pointers(params), test_x, test_y.data());
  std::vector<Tensor> grads;
  constexpr int kBatch = 32;
  constexpr float kLearningRate = 0.1f;
  float loss = 0;
  for (int step = 0; step < 300; ++step) {
    const int start = (step * kBatch) % (kTrain - kBatch);
    loss = mlp.ForwardBackward(Pointers(params), train_x.middleRows(start, kBatch),
                               train_y.data() + start, &grads);
    for (size_t k = 0; k < params.size(); ++k) {
      for (int64_t i = 0; i < params[k].size(); ++i) {
        params[k].values[i] -= kLearningRate * grads[k].values[i];
      }
    }
  }
  const double after = mlp.Accuracy(Pointers(params), test_x, test_y.data());
  std::printf("accuracy %.3f -> %.3f, final batch loss %.4f\n", before, after, loss);
  EXPECT_GT(after, 0.9);
  EXPECT_LT(loss, 0.5f);
}

TEST(MlpTest, AccuracyCountsArgmax) {
  // One layer with identity kernel: the logits are the inputs.
  Mlp mlp({3, 3});
  Tensor w({3, 3}, 0.0f), b({3}, 0.0f);
  for (int i = 0; i < 3; ++i) w.values[i * 3 + i] = 1.0f;
  Matrix x(4, 3);
  x << 1, 0, 0,  //
      0, 5, 1,   //
      0, 1, 2,   //
      3, 2, 1;
  const int32_t labels[4] = {0, 1, 1, 2};
  EXPECT_DOUBLE_EQ(mlp.Accuracy({w.data(), b.data()}, x, labels), 0.5);
}

}  // namespace
}  // namespace pstrain
