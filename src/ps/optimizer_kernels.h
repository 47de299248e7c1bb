// The per-element update rules shared by the dense optimizers (optimizer.h) and the embedding
// tables (embedding_table.h), which apply them to one row of n = dim floats at a time. Internal
// to src/ps. Every kernel updates n elements in place; the gradient is read as g[i] * gs, gs being
// the clipping scale (1 when not clipping). The arrays must not overlap. The rules, and how they
// follow torch.optim, are described in optimizer_kernels.cc.
#pragma once

#include <cstdint>

namespace pstrain {

// w -= lr g (neg_lr = -lr).
void SgdKernel(float* __restrict w, const float* __restrict g, int64_t n, float gs, float neg_lr);

// sum += g^2; w -= lr g / (sqrt(sum) + eps).
void AdagradKernel(float* __restrict w, const float* __restrict g, float* __restrict sum, int64_t n,
                   float gs, float eps, float neg_lr);

// One Adam step with the bias corrections of the caller's step count t: bc2_sqrt =
// sqrt(1 - beta2^t), neg_step = -lr / (1 - beta1^t).
void AdamKernel(float* __restrict w, const float* __restrict g, float* __restrict m,
                float* __restrict v, int64_t n, float gs, float one_minus_b1, float b2,
                float one_minus_b2, float bc2_sqrt, float eps, float neg_step);

// FTRL-Proximal with accumulator `acc` (n) and linear term `z`, learning_rate_power p.
void FtrlKernel(float* w, const float* g, float* acc, float* z, int64_t n, float gs, double lr,
                double l1, double l2, double p);

}  // namespace pstrain
