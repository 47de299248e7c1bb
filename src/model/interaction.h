// The pairwise dot-product interaction of DLRM (Naumov et al. 2019): for every example, the dot
// products of all pairs of its field vectors, with an explicit backward pass.
#pragma once

#include "model/model.h"

namespace pstrain::layers {

// Number of distinct pairs of `fields` vectors: fields * (fields - 1) / 2.
inline int InteractionPairs(int fields) { return fields * (fields - 1) / 2; }

// x: n rows of `fields` vectors of `dim` floats side by side (n x fields*dim). Writes into z
// (n x InteractionPairs(fields)) the dot products <x_f, x_g> for f < g, pairs in the order
// (0,1), (0,2), ..., (0,F-1), (1,2), ..., (F-2,F-1).
void DotInteractionForward(const Eigen::Ref<const Matrix>& x, int fields, int dim,
                           Eigen::Ref<Matrix> z);

// Given dz (the gradient with respect to z), adds the gradient with respect to x into dx
// (n x fields*dim): dx_f += sum over g != f of dz_(f,g) x_g.
void DotInteractionBackward(const Eigen::Ref<const Matrix>& x, int fields, int dim,
                            const Eigen::Ref<const Matrix>& dz, Eigen::Ref<Matrix> dx);

}  // namespace pstrain::layers
