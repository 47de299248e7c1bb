// The dense layers' matrix products (OpenBLAS or Eigen, whichever the build uses) against plain
// loops in double, for odd shapes, views with row strides wider than their rows, every
// transpose, and the thread count OpenBLAS runs with.
//
// Tolerances: a float32 sum of K products, in any order and with or without FMA, is within
// gamma_K * sum|a_i b_i| of the exact sum, gamma_K = K u / (1 - K u), u = 2^-24 (Higham,
// "Accuracy and Stability of Numerical Algorithms", 3.1). The reference in double is off by
// gamma_K in double, which is added. No backend may miss this bound; a wrong transpose or
// stride misses it by orders of magnitude.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "model/gemm.h"
#include "model/model.h"

namespace pstrain {
namespace {

using DMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

double Gamma(int64_t terms) {
  const double uf = std::ldexp(1.0, -24), ud = std::ldexp(1.0, -53);
  const double k = static_cast<double>(terms);
  return k * uf / (1 - k * uf) + k * ud / (1 - k * ud);
}

Matrix Random(int64_t rows, int64_t cols, std::mt19937* rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Matrix m(rows, cols);
  for (int64_t i = 0; i < m.size(); ++i) m.data()[i] = u(*rng);
  return m;
}

// got (float) against the exact value (double) within gamma_terms * magnitude.
void ExpectWithin(const Matrix& got, const DMatrix& exact, const DMatrix& magnitude, int64_t terms,
                  const std::string& what) {
  ASSERT_EQ(got.rows(), exact.rows()) << what;
  ASSERT_EQ(got.cols(), exact.cols()) << what;
  const double gamma = Gamma(terms);
  for (Eigen::Index i = 0; i < got.rows(); ++i) {
    for (Eigen::Index j = 0; j < got.cols(); ++j) {
      ASSERT_NEAR(got(i, j), exact(i, j), gamma * magnitude(i, j))
          << what << " at (" << i << ", " << j << ")";
    }
  }
}

// c(i, j) = sum_k a(i, k) b(k, j) in double, and the same sum of absolute values.
void Reference(const DMatrix& a, const DMatrix& b, DMatrix* c, DMatrix* magnitude) {
  c->setZero(a.rows(), b.cols());
  magnitude->setZero(a.rows(), b.cols());
  for (Eigen::Index i = 0; i < a.rows(); ++i) {
    for (Eigen::Index j = 0; j < b.cols(); ++j) {
      for (Eigen::Index k = 0; k < a.cols(); ++k) {
        (*c)(i, j) += a(i, k) * b(k, j);
        (*magnitude)(i, j) += std::abs(a(i, k) * b(k, j));
      }
    }
  }
}

struct Shape {
  int64_t n, in, out;
};

class DenseReferenceTest : public ::testing::TestWithParam<Shape> {};

// Forward and backward of one dense layer, with x and w given as blocks of larger matrices, so
// their rows are further apart than their widths (as a batch taken from wider data would be).
TEST_P(DenseReferenceTest, MatchesLoopsInDouble) {
  const Shape s = GetParam();
  std::mt19937 rng(static_cast<unsigned>(s.n * 1000003 + s.in * 101 + s.out));
  const Matrix x_big = Random(s.n + 2, s.in + 3, &rng), w_big = Random(s.in + 1, s.out + 5, &rng);
  const auto x = x_big.block(1, 2, s.n, s.in);
  const auto w = w_big.block(1, 3, s.in, s.out);
  const Matrix b = Random(1, s.out, &rng), dy = Random(s.n, s.out, &rng);
  const DMatrix xd = x.cast<double>(), wd = w.cast<double>(), dyd = dy.cast<double>();

  Matrix y;
  layers::DenseForward(x, w, b.data(), &y);
  DMatrix exact, magnitude;
  Reference(xd, wd, &exact, &magnitude);
  exact.rowwise() += b.row(0).cast<double>();
  magnitude.rowwise() += b.row(0).cast<double>().cwiseAbs();
  ExpectWithin(y, exact, magnitude, s.in + 1, "y");

  // dw is written whatever it held, NaN included.
  Matrix dx, dw = Matrix::Constant(s.in, s.out, std::numeric_limits<float>::quiet_NaN());
  Matrix db(1, s.out);
  layers::DenseBackward(x, w, dy, &dx, dw.data(), db.data());
  Reference(xd.transpose(), dyd, &exact, &magnitude);
  ExpectWithin(dw, exact, magnitude, s.n, "dw");
  Reference(dyd, wd.transpose(), &exact, &magnitude);
  ExpectWithin(dx, exact, magnitude, s.out, "dx");
  Reference(DMatrix::Ones(1, s.n), dyd, &exact, &magnitude);
  ExpectWithin(db, exact, magnitude, s.n, "db");
}

INSTANTIATE_TEST_SUITE_P(OddShapes, DenseReferenceTest,
                         ::testing::Values(Shape{1, 1, 1}, Shape{3, 5, 7}, Shape{257, 129, 33},
                                           Shape{256, 784, 10}, Shape{2, 300, 1}),
                         [](const ::testing::TestParamInfo<Shape>& p) {
                           return std::to_string(p.param.n) + "x" + std::to_string(p.param.in) +
                                  "x" + std::to_string(p.param.out);
                         });

TEST(DenseReferenceTest, EmptyBatchGivesZeroGradients) {
  std::mt19937 rng(4);
  const Matrix x(0, 6), w = Random(6, 3, &rng), b = Random(1, 3, &rng), dy(0, 3);
  Matrix y;
  layers::DenseForward(x, w, b.data(), &y);
  EXPECT_EQ(y.rows(), 0);
  EXPECT_EQ(y.cols(), 3);
  Matrix dx, dw = Matrix::Constant(6, 3, std::numeric_limits<float>::quiet_NaN()), db(1, 3);
  layers::DenseBackward(x, w, dy, &dx, dw.data(), db.data());
  EXPECT_TRUE((dw.array() == 0.0f).all()) << dw;
  EXPECT_TRUE((db.array() == 0.0f).all()) << db;
  EXPECT_EQ(dx.rows(), 0);
  EXPECT_EQ(dx.cols(), 6);
}

// Sgemm itself: every transpose, strides wider than the rows, and beta 0, 1 and 0.5.
TEST(SgemmTest, TransposesStridesAndBeta) {
  constexpr int64_t m = 17, n = 9, k = 31;
  std::mt19937 rng(5);
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      for (const float beta : {0.0f, 1.0f, 0.5f}) {
        const std::string what =
            std::string(ta ? "T" : "N") + (tb ? "T" : "N") + " beta=" + std::to_string(beta);
        // Stored as op requires, with 4 floats of padding after every row.
        const Matrix a = Random(ta ? k : m, (ta ? m : k) + 4, &rng);
        const Matrix b = Random(tb ? n : k, (tb ? k : n) + 4, &rng);
        Matrix c = Random(m, n + 4, &rng);
        const Matrix c0 = c;
        DMatrix op_a = a.leftCols(ta ? m : k).cast<double>();
        DMatrix op_b = b.leftCols(tb ? k : n).cast<double>();
        if (ta) op_a.transposeInPlace();
        if (tb) op_b.transposeInPlace();
        gemm::Sgemm(ta, tb, m, n, k, a.data(), a.cols(), b.data(), b.cols(), beta, c.data(),
                    c.cols());
        DMatrix exact, magnitude;
        Reference(op_a, op_b, &exact, &magnitude);
        exact += static_cast<double>(beta) * c0.leftCols(n).cast<double>();
        magnitude += (static_cast<double>(beta) * c0.leftCols(n).cast<double>()).cwiseAbs();
        ExpectWithin(c.leftCols(n), exact, magnitude, k + 2, what);
        EXPECT_EQ(c.rightCols(4), c0.rightCols(4)) << what << ": the padding is left alone";
      }
    }
  }
}

TEST(SgemmTest, EmptySizes) {
  Matrix c = Matrix::Constant(2, 3, 7.0f);
  const float one = 1.0f;
  gemm::Sgemm(false, false, 0, 3, 4, &one, 4, &one, 3, 0.0f, c.data(), 3);  // m == 0: no-op
  gemm::Sgemm(false, false, 2, 0, 4, &one, 4, &one, 0, 0.0f, c.data(), 3);  // n == 0: no-op
  EXPECT_TRUE((c.array() == 7.0f).all());
  gemm::Sgemm(false, false, 2, 3, 0, &one, 0, &one, 3, 0.5f, c.data(), 3);  // k == 0: beta C
  EXPECT_TRUE((c.array() == 3.5f).all()) << c;
}

// The thread count is read once per process, so each case runs in a fresh process.
int ThreadsWith(const char* env) {
  if (env == nullptr) {
    unsetenv("OPENBLAS_NUM_THREADS");
  } else {
    setenv("OPENBLAS_NUM_THREADS", env, 1);
  }
  return gemm::Threads();
}

#ifdef PSTRAIN_HAVE_OPENBLAS
constexpr bool kOpenBlas = true;
#else
constexpr bool kOpenBlas = false;
#endif

// Exits with the thread count; what the process logs goes to stderr, where EXPECT_EXIT looks.
[[noreturn]] void ExitWithThreads(const char* env) {
  dup2(2, 1);
  std::exit(ThreadsWith(env));
}

TEST(GemmThreadsTest, OneThreadUnlessOpenBlasNumThreadsSaysOtherwise) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(ExitWithThreads(nullptr), ::testing::ExitedWithCode(1), "");
  EXPECT_EXIT(ExitWithThreads("2"), ::testing::ExitedWithCode(kOpenBlas ? 2 : 1), "");
  const char* warning = kOpenBlas ? "OPENBLAS_NUM_THREADS=\"0\" is not a positive integer" : "";
  EXPECT_EXIT(ExitWithThreads("0"), ::testing::ExitedWithCode(1), warning);
  warning = kOpenBlas ? "OPENBLAS_NUM_THREADS=\"many\" is not a positive integer" : "";
  EXPECT_EXIT(ExitWithThreads("many"), ::testing::ExitedWithCode(1), warning);
}

TEST(GemmThreadsTest, BackendSaysWhatRuns) {
  if (kOpenBlas) {
    EXPECT_EQ(gemm::Backend().rfind("OpenBLAS ", 0), 0u) << gemm::Backend();
  } else {
    EXPECT_EQ(gemm::Backend(), "Eigen");
  }
  std::printf("backend: %s\n", gemm::Backend().c_str());
}

}  // namespace
}  // namespace pstrain
