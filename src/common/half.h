// float32 <-> float16 (IEEE 754 binary16) and bfloat16 conversion of whole arrays, for gradients
// pushed as 16-bit values (`--push_dtype`). Rounding is to nearest, ties to even, for both;
// NaN stays NaN and infinities stay infinite; float16 overflows to infinity. Thread-safe. On x86
// CPUs with AVX2 and F16C (checked at run time) whole arrays convert eight values at a time, with
// results identical, bit for bit, to the scalar code's; any alignment and length.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "tensor.pb.h"

namespace pstrain {

void FloatToHalf(const float* in, uint16_t* out, int64_t n);
void HalfToFloat(const uint16_t* in, float* out, int64_t n);
void FloatToBfloat16(const float* in, uint16_t* out, int64_t n);
void Bfloat16ToFloat(const uint16_t* in, float* out, int64_t n);

// Bytes per element of `dtype` on the wire (4 for DT_FLOAT, 2 for DT_HALF and DT_BFLOAT16); 0
// for an unknown one.
int DtypeBytes(DataType dtype);

// `--push_dtype` names: "float32", "float16" or "bfloat16" to DT_FLOAT, DT_HALF or DT_BFLOAT16;
// InvalidArgument naming the known ones otherwise. DtypeName is the inverse ("" if unknown).
absl::StatusOr<DataType> DtypeFromName(const std::string& name);
std::string DtypeName(DataType dtype);

// For tests: whether the functions above take the vector path on this CPU, and the scalar code
// they otherwise run (and run for the tail of an array).
namespace half_internal {
bool Vectorized();
void FloatToHalfScalar(const float* in, uint16_t* out, int64_t n);
void HalfToFloatScalar(const uint16_t* in, float* out, int64_t n);
void FloatToBfloat16Scalar(const float* in, uint16_t* out, int64_t n);
void Bfloat16ToFloatScalar(const uint16_t* in, float* out, int64_t n);
}  // namespace half_internal

}  // namespace pstrain
