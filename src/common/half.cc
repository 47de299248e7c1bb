#include "common/half.h"

#include <cstring>

namespace pstrain {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}
float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

uint16_t ToHalf(float f) {
  const uint32_t x = Bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow, infinity
  if (abs < 0x38800000u) {  // a float16 subnormal or zero: round abs * 2^24 to an integer
    const float scaled = FromBits(abs) * 16777216.0f;        // exact
    const float rounded = scaled + 8388608.0f - 8388608.0f;  // round to nearest even
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(rounded));
  }
  // Normal: rebias the exponent, round the 13 dropped mantissa bits to nearest even.
  const uint32_t r = abs + 0x0fffu + ((abs >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((r - 0x38000000u) >> 13));
}

float FromHalf(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: man * 2^-24
    const float v = static_cast<float>(man) * (1.0f / 16777216.0f);
    return FromBits(Bits(v) | sign);
  }
  if (exp == 31) return FromBits(sign | 0x7f800000u | (man << 13));
  return FromBits(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t ToBfloat16(float f) {
  const uint32_t x = Bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace

void FloatToHalf(const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = ToHalf(in[i]);
}
void HalfToFloat(const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = FromHalf(in[i]);
}
void FloatToBfloat16(const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = ToBfloat16(in[i]);
}
void Bfloat16ToFloat(const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = FromBits(static_cast<uint32_t>(in[i]) << 16);
}

int DtypeBytes(DataType dtype) {
  switch (dtype) {
    case DT_FLOAT:
      return 4;
    case DT_HALF:
    case DT_BFLOAT16:
      return 2;
    default:
      return 0;
  }
}

}  // namespace pstrain
