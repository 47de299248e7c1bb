// float32 <-> float16 (IEEE 754 binary16) and bfloat16 conversion of whole arrays, for gradients
// pushed as 16-bit values (`--push_dtype`). Rounding is to nearest, ties to even, for both;
// NaN stays NaN and infinities stay infinite; float16 overflows to infinity. Thread-safe.
#pragma once

#include <cstdint>

#include "tensor.pb.h"

namespace pstrain {

void FloatToHalf(const float* in, uint16_t* out, int64_t n);
void HalfToFloat(const uint16_t* in, float* out, int64_t n);
void FloatToBfloat16(const float* in, uint16_t* out, int64_t n);
void Bfloat16ToFloat(const uint16_t* in, float* out, int64_t n);

// Bytes per element of `dtype` on the wire (4 for DT_FLOAT, 2 for DT_HALF and DT_BFLOAT16); 0
// for an unknown one.
int DtypeBytes(DataType dtype);

}  // namespace pstrain
