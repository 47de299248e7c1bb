// The per-element update rules shared by the dense optimizers (optimizer.h) and the embedding
// tables (embedding_table.h), which apply them to one row of n = dim floats at a time. Internal
// to src/ps. Every kernel updates n elements in place; the gradient is read as g[i] * gs, gs being
// the clipping scale (1 when not clipping). The arrays must not overlap. The rules, and how they
// follow torch.optim, are described in optimizer_kernels.cc.
#pragma once

#include <cstdint>

namespace pstrain {

// With write false a kernel stores nothing and returns whether every new weight and slot value
// it computed would be finite (the check of a push before it is applied: the same expressions, so
// the same values); with write true it updates in place and returns true.

// w -= lr g (neg_lr = -lr).
bool SgdKernel(float* w, const float* g, int64_t n, float gs, float neg_lr, bool write = true);

// sum += g^2; w -= lr g / (sqrt(sum) + eps).
bool AdagradKernel(float* w, const float* g, float* sum, int64_t n, float gs, float eps,
                   float neg_lr, bool write = true);

// One Adam step with the bias corrections of the caller's step count t: bc2_sqrt =
// sqrt(1 - beta2^t), neg_step = -lr / (1 - beta1^t).
bool AdamKernel(float* w, const float* g, float* m, float* v, int64_t n, float gs,
                float one_minus_b1, float b2, float one_minus_b2, float bc2_sqrt, float eps,
                float neg_step, bool write = true);

// FTRL-Proximal with accumulator `acc` (n) and linear term `z`, learning_rate_power p.
bool FtrlKernel(float* w, const float* g, float* acc, float* z, int64_t n, float gs, double lr,
                double l1, double l2, double p, bool write = true);

}  // namespace pstrain
