// Internal to src/features: what the statistics and the transform both do to one raw field.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"

namespace pstrain::features_internal {

// The field's number (surrounding spaces ignored), or nullopt when it is not a finite number.
std::optional<double> ParseNumber(absl::string_view field);

// sign(x) log(1 + |x|): the kLog1p normalizer before it standardizes.
inline double SignedLog1p(double x) { return std::copysign(std::log1p(std::fabs(x)), x); }

// A 64-bit hash of the bytes (XXH3), the same in every run and on every machine: the ids it
// gives are in the checkpoints.
uint64_t StableHash(absl::string_view bytes, uint64_t seed = 0);

}  // namespace pstrain::features_internal
