// Internal to src/model: the single-precision matrix product under the dense layers. It runs
// OpenBLAS's cblas_sgemm when the build found OpenBLAS (CMake option PSTRAIN_OPENBLAS, on by
// default) and Eigen's product otherwise.
//
// OpenBLAS runs one thread per process unless the environment variable OPENBLAS_NUM_THREADS
// says otherwise (a positive integer): a pstrain cluster runs several processes per machine, and
// OpenBLAS's default of one thread per core would have them all contend for every core. The
// count is set once, at the first product; Sgemm is thread-safe.
#pragma once

#include <cstdint>
#include <string>

namespace pstrain::gemm {

// Row-major C (m x n) = op(A) * op(B) + beta * C, where op(A) is m x k and op(B) is k x n.
// A is stored m x k (k x m if trans_a) with lda floats between the starts of its rows, likewise
// B (k x n, or n x k if trans_b) with ldb, and C with ldc. beta == 0 ignores what C held (NaN
// included). Any of m, n, k may be 0.
void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// What runs the products: "OpenBLAS <the CPU kernels it chose> (<n> thread[s])", e.g. "OpenBLAS
// Haswell (1 thread)", or "Eigen".
std::string Backend();

// Threads a product may use: OpenBLAS's count once set up (this call sets it up), 1 for Eigen
// (pstrain builds Eigen without OpenMP).
int Threads();

}  // namespace pstrain::gemm
