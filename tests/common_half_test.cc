// The float16 and bfloat16 converters (common/half.h) against independent references: numpy's
// float16 and torch's bfloat16 (Debian's /usr/bin/python3), on every 16-bit value and on many
// random and edge-case floats; and the vector path against the scalar one on the same inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/half.h"

namespace pstrain {
namespace {

uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }
float FromBits(uint32_t u) { return std::bit_cast<float>(u); }
bool HalfIsNan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }
bool Bf16IsNan(uint16_t b) { return (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0; }

std::vector<uint16_t> Every16BitValue() {
  std::vector<uint16_t> all(65536);
  for (int i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  return all;
}

// Floats that exercise every rounding case: each float16's neighbourhood (exact, the midpoint
// to the next value, one float ulp either side of it), bfloat16 ties, the edges of the ranges,
// non-finite values with assorted payloads, and random bit patterns and magnitudes.
std::vector<float> TestFloats() {
  std::vector<float> f;
  std::vector<float> halves(65536);
  half_internal::HalfToFloatScalar(Every16BitValue().data(), halves.data(), 65536);
  for (int h = 0; h < 65536; ++h) {
    if ((h & 0x7fff) >= 0x7c00) continue;  // the midpoints of finite values only
    const float lo = halves[h];
    const float hi = (h & 0x7fff) == 0x7bff ? std::copysign(65536.0f, lo) : halves[h + 1];
    const float mid = lo + (hi - lo) / 2;  // exact: both have at most 11 significant bits
    f.insert(f.end(), {lo, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 2 * mid)});
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {0.0f, 65504.0f, 65519.0f, 65519.996f, 65520.0f, 65536.0f, 1e10f,
                  std::numeric_limits<float>::max(), std::numeric_limits<float>::min(),
                  std::numeric_limits<float>::denorm_min(), 1e-40f, 5.96e-8f, 2.98e-8f,
                  2.9802322e-8f, 2.9802326e-8f, 6.1035156e-5f, 6.1032e-5f, inf}) {
    f.push_back(v);
    f.push_back(-v);
  }
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0x7fbfffffu, 0x7f802000u, 0x7fffe000u, 0x7f801fffu,
                       0x7ff00000u}) {
    f.push_back(FromBits(nan));
    f.push_back(FromBits(nan | 0x80000000u));
  }
  std::mt19937 rng(20261201);
  for (int i = 0; i < 200000; ++i) f.push_back(FromBits(static_cast<uint32_t>(rng())));
  std::uniform_real_distribution<float> exponent(-30, 17);
  std::normal_distribution<float> gauss(0, 1);
  for (int i = 0; i < 200000; ++i) f.push_back(gauss(rng) * std::exp2(exponent(rng)));
  for (int i = 0; i < 50000; ++i) {  // bfloat16 ties and their neighbours
    const uint32_t high = static_cast<uint32_t>(rng()) & 0xffff0000u;
    for (uint32_t low : {0x8000u, 0x7fffu, 0x8001u}) f.push_back(FromBits(high | low));
  }
  return f;
}

template <typename T>
void WriteFile(const std::string& path, const std::vector<T>& v) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  ASSERT_TRUE(out.good()) << path;
}
template <typename T>
std::vector<T> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<T> v(bytes.size() / sizeof(T));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(T));
  return v;
}

// What numpy and torch make of the test floats and of every 16-bit pattern.
struct Reference {
  std::vector<float> floats;
  std::vector<uint16_t> to_half, to_bf16;   // per float
  std::vector<float> from_half, from_bf16;  // per 16-bit pattern
};

const Reference& GetReference() {
  static const Reference* ref = [] {
    auto* r = new Reference;
    r->floats = TestFloats();
    // A directory of its own, removed once the reference is read.
    std::string dir = ::testing::TempDir() + "/half-ref-XXXXXX";
    if (mkdtemp(dir.data()) == nullptr) {
      ADD_FAILURE() << "cannot create " << dir;
      return r;
    }
    struct Remove {
      const std::string& dir;
      ~Remove() { std::filesystem::remove_all(dir); }
    } remove{dir};
    WriteFile(dir + "/half_in.f32", r->floats);
    const std::string script = dir + "/half_ref.py";
    std::ofstream(script) << R"(import sys, numpy as np, torch
d = sys.argv[1]
f = np.fromfile(d + '/half_in.f32', dtype=np.float32)
with np.errstate(all='ignore'):
    f.astype(np.float16).view(np.uint16).tofile(d + '/to_half.u16')
torch.from_numpy(f).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16).tofile(d + '/to_bf16.u16')
u = np.arange(65536, dtype=np.uint16)
u.view(np.float16).astype(np.float32).tofile(d + '/from_half.f32')
torch.from_numpy(u.view(np.int16)).view(torch.bfloat16).float().numpy().tofile(d + '/from_bf16.f32')
)";
    const std::string cmd = "/usr/bin/python3 " + script + " " + dir;
    if (std::system(cmd.c_str()) != 0) {
      ADD_FAILURE() << "the reference (" << cmd << ") failed: needs numpy and torch";
      return r;
    }
    r->to_half = ReadFile<uint16_t>(dir + "/to_half.u16");
    r->to_bf16 = ReadFile<uint16_t>(dir + "/to_bf16.u16");
    r->from_half = ReadFile<float>(dir + "/from_half.f32");
    r->from_bf16 = ReadFile<float>(dir + "/from_bf16.f32");
    return r;
  }();
  return *ref;
}

TEST(HalfTest, EveryHalfRoundTrips) {
  const std::vector<uint16_t> all = Every16BitValue();
  std::vector<float> f(all.size());
  std::vector<uint16_t> back(all.size());
  HalfToFloat(all.data(), f.data(), f.size());
  FloatToHalf(f.data(), back.data(), f.size());
  int nans = 0;
  for (int h = 0; h < 65536; ++h) {
    if (HalfIsNan(h)) {  // NaN comes back as the quiet NaN of its sign
      ++nans;
      EXPECT_EQ(back[h], (h & 0x8000) | 0x7e00) << h;
      EXPECT_TRUE(std::isnan(f[h])) << h;
    } else {
      EXPECT_EQ(back[h], h) << h << " -> " << f[h];
    }
  }
  EXPECT_EQ(nans, 2 * 1023);
}

TEST(HalfTest, EveryBfloat16RoundTrips) {
  const std::vector<uint16_t> all = Every16BitValue();
  std::vector<float> f(all.size());
  std::vector<uint16_t> back(all.size());
  Bfloat16ToFloat(all.data(), f.data(), f.size());
  FloatToBfloat16(f.data(), back.data(), f.size());
  for (int b = 0; b < 65536; ++b) {
    EXPECT_EQ(back[b], Bf16IsNan(b) ? b | 0x40 : b) << b;  // a NaN comes back quiet
  }
}

TEST(HalfTest, FloatToHalfMatchesNumpy) {
  const Reference& ref = GetReference();
  ASSERT_EQ(ref.to_half.size(), ref.floats.size());
  std::vector<uint16_t> got(ref.floats.size());
  FloatToHalf(ref.floats.data(), got.data(), got.size());
  int mismatches = 0;
  for (size_t i = 0; i < got.size() && mismatches < 20; ++i) {
    const bool nan_ok = HalfIsNan(ref.to_half[i]) && HalfIsNan(got[i]) &&
                        (got[i] & 0x8000) == (ref.to_half[i] & 0x8000);
    if (got[i] != ref.to_half[i] && !nan_ok) {
      ++mismatches;
      ADD_FAILURE() << std::hex << "float bits " << Bits(ref.floats[i]) << ": got " << got[i]
                    << ", numpy " << ref.to_half[i];
    }
  }
}

TEST(HalfTest, FloatToBfloat16MatchesTorch) {
  const Reference& ref = GetReference();
  ASSERT_EQ(ref.to_bf16.size(), ref.floats.size());
  std::vector<uint16_t> got(ref.floats.size());
  FloatToBfloat16(ref.floats.data(), got.data(), got.size());
  int mismatches = 0;
  for (size_t i = 0; i < got.size() && mismatches < 20; ++i) {
    // torch makes every NaN its canonical 0x7fc0; ours keeps the sign and payload.
    const bool nan_ok = Bf16IsNan(ref.to_bf16[i]) && Bf16IsNan(got[i]);
    if (got[i] != ref.to_bf16[i] && !nan_ok) {
      ++mismatches;
      ADD_FAILURE() << std::hex << "float bits " << Bits(ref.floats[i]) << ": got " << got[i]
                    << ", torch " << ref.to_bf16[i];
    }
  }
}

TEST(HalfTest, WideningMatchesNumpyAndTorch) {
  const Reference& ref = GetReference();
  ASSERT_EQ(ref.from_half.size(), 65536u);
  ASSERT_EQ(ref.from_bf16.size(), 65536u);
  const std::vector<uint16_t> all = Every16BitValue();
  std::vector<float> half(65536), bf16(65536);
  HalfToFloat(all.data(), half.data(), 65536);
  Bfloat16ToFloat(all.data(), bf16.data(), 65536);
  for (int i = 0; i < 65536; ++i) {
    if (std::isnan(ref.from_half[i])) {
      EXPECT_TRUE(std::isnan(half[i])) << i;
    } else {
      EXPECT_EQ(Bits(half[i]), Bits(ref.from_half[i])) << std::hex << i;
    }
    if (std::isnan(ref.from_bf16[i])) {
      EXPECT_TRUE(std::isnan(bf16[i])) << i;
    } else {
      EXPECT_EQ(Bits(bf16[i]), Bits(ref.from_bf16[i])) << std::hex << i;
    }
  }
}

// Whether /proc/cpuinfo's flags name `flag` (the kernel's view, apart from the code's CPUID).
bool CpuinfoHasFlag(const std::string& flag) {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    for (std::string w; words >> w;) {
      if (w == flag) return true;
    }
    return false;
  }
  return false;
}

// The dispatching functions (vector path with a scalar tail) against the scalar code, bit for
// bit including NaN payloads, at every alignment and for lengths around the vector widths.
TEST(HalfTest, VectorPathMatchesScalarAtEveryOffsetAndLength) {
#if defined(__x86_64__)
  if (CpuinfoHasFlag("avx2") && CpuinfoHasFlag("f16c")) {
    ASSERT_TRUE(half_internal::Vectorized()) << "this CPU has AVX2 and F16C";
  }
#endif
  std::vector<float> floats = TestFloats();
  const std::vector<uint16_t> all = Every16BitValue();
  std::vector<uint16_t> patterns(all.begin(), all.end());
  patterns.insert(patterns.end(), all.rbegin(), all.rend());
  std::vector<uint16_t> got16(floats.size() + 8), want16(floats.size() + 8);
  std::vector<float> got32(patterns.size() + 8), want32(patterns.size() + 8);
  std::vector<int64_t> lengths;
  for (int64_t n = 0; n <= 40; ++n) lengths.push_back(n);
  lengths.push_back(1001);
  for (int off = 0; off < 8; ++off) {
    for (int64_t n : lengths) {
      const float* in32 = floats.data() + off * 97 + n;  // different values per case
      FloatToHalf(in32, got16.data() + off, n);
      half_internal::FloatToHalfScalar(in32, want16.data() + off, n);
      ASSERT_TRUE(std::equal(got16.begin() + off, got16.begin() + off + n, want16.begin() + off))
          << "FloatToHalf offset " << off << " length " << n;
      FloatToBfloat16(in32, got16.data() + off, n);
      half_internal::FloatToBfloat16Scalar(in32, want16.data() + off, n);
      ASSERT_TRUE(std::equal(got16.begin() + off, got16.begin() + off + n, want16.begin() + off))
          << "FloatToBfloat16 offset " << off << " length " << n;
      const uint16_t* in16 = patterns.data() + off * 31 + n;
      HalfToFloat(in16, got32.data() + off, n);
      half_internal::HalfToFloatScalar(in16, want32.data() + off, n);
      ASSERT_EQ(0, std::memcmp(got32.data() + off, want32.data() + off, n * 4))
          << "HalfToFloat offset " << off << " length " << n;
      Bfloat16ToFloat(in16, got32.data() + off, n);
      half_internal::Bfloat16ToFloatScalar(in16, want32.data() + off, n);
      ASSERT_EQ(0, std::memcmp(got32.data() + off, want32.data() + off, n * 4))
          << "Bfloat16ToFloat offset " << off << " length " << n;
    }
  }
  // Whole arrays: every test float, every 16-bit pattern.
  const int64_t nf = floats.size(), np = patterns.size();
  FloatToHalf(floats.data(), got16.data(), nf);
  half_internal::FloatToHalfScalar(floats.data(), want16.data(), nf);
  EXPECT_TRUE(std::equal(got16.begin(), got16.begin() + nf, want16.begin()));
  FloatToBfloat16(floats.data(), got16.data(), nf);
  half_internal::FloatToBfloat16Scalar(floats.data(), want16.data(), nf);
  EXPECT_TRUE(std::equal(got16.begin(), got16.begin() + nf, want16.begin()));
  HalfToFloat(patterns.data(), got32.data(), np);
  half_internal::HalfToFloatScalar(patterns.data(), want32.data(), np);
  EXPECT_EQ(0, std::memcmp(got32.data(), want32.data(), np * 4));
  Bfloat16ToFloat(patterns.data(), got32.data(), np);
  half_internal::Bfloat16ToFloatScalar(patterns.data(), want32.data(), np);
  EXPECT_EQ(0, std::memcmp(got32.data(), want32.data(), np * 4));
}

TEST(HalfTest, DtypeBytes) {
  EXPECT_EQ(DtypeBytes(DT_FLOAT), 4);
  EXPECT_EQ(DtypeBytes(DT_HALF), 2);
  EXPECT_EQ(DtypeBytes(DT_BFLOAT16), 2);
  EXPECT_EQ(DtypeBytes(DT_INVALID), 0);
}

}  // namespace
}  // namespace pstrain
