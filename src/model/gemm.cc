// The dense layers' matrix product: OpenBLAS's cblas_sgemm, or Eigen's product without it.
#include "model/gemm.h"

#include <algorithm>
#include <cassert>
#include <climits>
#include <cstdlib>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

#ifdef PSTRAIN_HAVE_OPENBLAS
#include "cblas.h"
#else
#include "Eigen/Core"
#endif

namespace pstrain::gemm {
namespace {

#ifdef PSTRAIN_HAVE_OPENBLAS

// OPENBLAS_NUM_THREADS if it is a positive integer, else 1 (with a warning if it was set).
int WantedThreads() {
  const char* env = std::getenv("OPENBLAS_NUM_THREADS");
  if (env == nullptr) return 1;
  int n = 0;
  if (absl::SimpleAtoi(env, &n) && n > 0) return n;
  spdlog::warn("OPENBLAS_NUM_THREADS=\"{}\" is not a positive integer; OpenBLAS runs 1 thread",
               env);
  return 1;
}

// One product of C (256 x 784) = A^T (256 x 256) B (256 x 784). Measured with OpenBLAS 0.3.21
// on an AMD EPYC (Zen kernels), which shape a process's first product has decides how fast the
// ones after it run: after this one the MNIST MLP's products ran 2.4x faster than when its own
// forward product came first. It costs about 100 MFLOP once per process.
void WarmUp() {
  constexpr int kM = 256, kN = 784, kK = 256;
  std::vector<float> a(kK * kM, 0.0f), b(kK * kN, 0.0f), c(kM * kN);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kM, kN, kK, 1.0f, a.data(), kM, b.data(), kN,
              0.0f, c.data(), kN);
}

// Sets OpenBLAS's thread count once per process; returns the count OpenBLAS then reports
// (it caps a request at the number it was built for).
int SetUpThreads() {
  static const int threads = [] {
    openblas_set_num_threads(WantedThreads());
    WarmUp();
    return openblas_get_num_threads();
  }();
  return threads;
}

blasint Int(int64_t v) {
  assert(v >= 0 && v <= INT_MAX);
  return static_cast<blasint>(v);
}

#else

using Strided =
    Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, 0,
               Eigen::OuterStride<> >;
using MutableStrided =
    Eigen::Map<Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, 0,
               Eigen::OuterStride<> >;

// c = beta * c + op_a * op_b, with beta == 0 overwriting c.
template <typename A, typename B>
void Product(const A& op_a, const B& op_b, float beta, MutableStrided* c) {
  if (beta == 0.0f) {
    c->noalias() = op_a * op_b;
  } else {
    if (beta != 1.0f) *c *= beta;
    c->noalias() += op_a * op_b;
  }
}

#endif

}  // namespace

void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  assert(m >= 0 && n >= 0 && k >= 0);
  if (m == 0 || n == 0) return;
  // A stored row has at least the columns it holds; a single stored row may have any stride.
  lda = std::max<int64_t>({lda, trans_a ? m : k, 1});
  ldb = std::max<int64_t>({ldb, trans_b ? k : n, 1});
  ldc = std::max<int64_t>(ldc, n);
#ifdef PSTRAIN_HAVE_OPENBLAS
  SetUpThreads();
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, Int(m), Int(n), Int(k), 1.0f, a, Int(lda), b,
              Int(ldb), beta, c, Int(ldc));
#else
  const Strided sa(a, trans_a ? k : m, trans_a ? m : k, Eigen::OuterStride<>(lda));
  const Strided sb(b, trans_b ? n : k, trans_b ? k : n, Eigen::OuterStride<>(ldb));
  MutableStrided sc(c, m, n, Eigen::OuterStride<>(ldc));
  if (trans_a && trans_b) {
    Product(sa.transpose(), sb.transpose(), beta, &sc);
  } else if (trans_a) {
    Product(sa.transpose(), sb, beta, &sc);
  } else if (trans_b) {
    Product(sa, sb.transpose(), beta, &sc);
  } else {
    Product(sa, sb, beta, &sc);
  }
#endif
}

std::string Backend() {
#ifdef PSTRAIN_HAVE_OPENBLAS
  const int threads = SetUpThreads();
  return absl::StrCat("OpenBLAS ", openblas_get_corename(), " (", threads,
                      threads == 1 ? " thread)" : " threads)");
#else
  return "Eigen";
#endif
}

int Threads() {
#ifdef PSTRAIN_HAVE_OPENBLAS
  return SetUpThreads();
#else
  return 1;
#endif
}

}  // namespace pstrain::gemm
