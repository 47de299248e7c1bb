#include "common/half.h"

#include <bit>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define PSTRAIN_HALF_X86 1
#endif

namespace pstrain {
namespace {

uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }
float FromBits(uint32_t u) { return std::bit_cast<float>(u); }

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

#ifdef PSTRAIN_HALF_X86
// Eight lanes at a time. The hardware conversions (F16C) round to nearest even and handle
// subnormals and overflow as ToHalf does; only NaNs differ (the hardware keeps the payload,
// FromHalf and ToHalf give what the scalar code gives), so NaN lanes are patched with integer
// ops. Loads and stores are unaligned: callers pass any offset into a tensor.
#define PSTRAIN_AVX2 __attribute__((target("avx2,f16c")))

PSTRAIN_AVX2 void FloatToHalfAvx2(const float* in, uint16_t* out, int64_t n) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf = _mm256_set1_epi32(0x7f800000);
  const __m128i quiet = _mm_set1_epi16(0x7e00);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(in + i);
    __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
    const __m256i x = _mm256_castps_si256(v);
    const __m256i nan32 = _mm256_cmpgt_epi32(_mm256_and_si256(x, abs_mask), inf);
    if (!_mm256_testz_si256(nan32, nan32)) {
      // Narrow the 32-bit lane mask to 16 bits (all-ones or zero saturate to themselves).
      const __m128i nan16 =
          _mm_packs_epi32(_mm256_castsi256_si128(nan32), _mm256_extracti128_si256(nan32, 1));
      const __m128i sign = _mm_and_si128(h, _mm_set1_epi16(static_cast<int16_t>(0x8000)));
      h = _mm_blendv_epi8(h, _mm_or_si128(sign, quiet), nan16);
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < n; ++i) out[i] = ToHalf(in[i]);
}

PSTRAIN_AVX2 void HalfToFloatAvx2(const uint16_t* in, float* out, int64_t n) {
  const __m256i exp_mask = _mm256_set1_epi32(0x7c00);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    __m256i f = _mm256_castps_si256(_mm256_cvtph_ps(h));
    const __m256i h32 = _mm256_cvtepu16_epi32(h);
    const __m256i special = _mm256_cmpeq_epi32(_mm256_and_si256(h32, exp_mask), exp_mask);
    if (!_mm256_testz_si256(special, special)) {
      // Infinities and NaNs as FromHalf builds them: sign, all-ones exponent, mantissa << 13
      // (a signalling NaN stays signalling).
      const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(h32, _mm256_set1_epi32(0x8000)), 16);
      const __m256i man = _mm256_slli_epi32(_mm256_and_si256(h32, _mm256_set1_epi32(0x3ff)), 13);
      const __m256i bits =
          _mm256_or_si256(_mm256_or_si256(sign, _mm256_set1_epi32(0x7f800000)), man);
      f = _mm256_blendv_epi8(f, bits, special);
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), f);
  }
  for (; i < n; ++i) out[i] = FromHalf(in[i]);
}

// ToBfloat16 in integer lanes: add 0x7fff plus the lowest kept bit, keep the high half.
PSTRAIN_AVX2 void FloatToBfloat16Avx2(const float* in, uint16_t* out, int64_t n) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf = _mm256_set1_epi32(0x7f800000);
  const __m256i bias = _mm256_set1_epi32(0x7fff);
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i quiet = _mm256_set1_epi32(0x40);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i r[2];
    for (int k = 0; k < 2; ++k) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i + 8 * k));
      const __m256i high = _mm256_srli_epi32(x, 16);
      const __m256i rounded = _mm256_srli_epi32(
          _mm256_add_epi32(_mm256_add_epi32(x, bias), _mm256_and_si256(high, one)), 16);
      const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, abs_mask), inf);
      r[k] = _mm256_blendv_epi8(rounded, _mm256_or_si256(high, quiet), nan);
    }
    // Every lane is at most 0xffff, so the unsigned saturating pack is exact; it interleaves
    // 128-bit halves, which the permute puts back in order.
    const __m256i packed = _mm256_packus_epi32(r[0], r[1]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        _mm256_permute4x64_epi64(packed, 0xd8));
  }
  for (; i < n; ++i) out[i] = ToBfloat16(in[i]);
}

PSTRAIN_AVX2 void Bfloat16ToFloatAvx2(const uint16_t* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  for (; i < n; ++i) out[i] = FromBits(static_cast<uint32_t>(in[i]) << 16);
}

#undef PSTRAIN_AVX2

bool CpuHasAvx2F16c() {
  static const bool has = [] {
    __builtin_cpu_init();
    // F16C from CPUID (leaf 1, ECX bit 29): clang's __builtin_cpu_supports does not know it.
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
    return __builtin_cpu_supports("avx2") && f16c;
  }();
  return has;
}
#else
bool CpuHasAvx2F16c() { return false; }
#endif

}  // namespace

namespace half_internal {

bool Vectorized() { return CpuHasAvx2F16c(); }

void FloatToHalfScalar(const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = ToHalf(in[i]);
}
void HalfToFloatScalar(const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = FromHalf(in[i]);
}
void FloatToBfloat16Scalar(const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = ToBfloat16(in[i]);
}
void Bfloat16ToFloatScalar(const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = FromBits(static_cast<uint32_t>(in[i]) << 16);
}

}  // namespace half_internal

// Each picks the vector path once per process (CpuHasAvx2F16c caches the answer).
void FloatToHalf(const float* in, uint16_t* out, int64_t n) {
#ifdef PSTRAIN_HALF_X86
  if (CpuHasAvx2F16c()) return FloatToHalfAvx2(in, out, n);
#endif
  half_internal::FloatToHalfScalar(in, out, n);
}
void HalfToFloat(const uint16_t* in, float* out, int64_t n) {
#ifdef PSTRAIN_HALF_X86
  if (CpuHasAvx2F16c()) return HalfToFloatAvx2(in, out, n);
#endif
  half_internal::HalfToFloatScalar(in, out, n);
}
void FloatToBfloat16(const float* in, uint16_t* out, int64_t n) {
#ifdef PSTRAIN_HALF_X86
  if (CpuHasAvx2F16c()) return FloatToBfloat16Avx2(in, out, n);
#endif
  half_internal::FloatToBfloat16Scalar(in, out, n);
}
void Bfloat16ToFloat(const uint16_t* in, float* out, int64_t n) {
#ifdef PSTRAIN_HALF_X86
  if (CpuHasAvx2F16c()) return Bfloat16ToFloatAvx2(in, out, n);
#endif
  half_internal::Bfloat16ToFloatScalar(in, out, n);
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

absl::StatusOr<DataType> DtypeFromName(const std::string& name) {
  if (name == "float32") return DT_FLOAT;
  if (name == "float16") return DT_HALF;
  if (name == "bfloat16") return DT_BFLOAT16;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype \"", name, "\" (known: float32, float16, bfloat16)"));
}

std::string DtypeName(DataType dtype) {
  switch (dtype) {
    case DT_FLOAT:
      return "float32";
    case DT_HALF:
      return "float16";
    case DT_BFLOAT16:
      return "bfloat16";
    default:
      return "";
  }
}

}  // namespace pstrain
