// Initial values of variables (MakeInitialValue): determinism, ranges, moments and errors.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/model.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

Initializer Make(const std::string& kind, uint64_t seed = 1) {
  Initializer init;
  init.kind = kind;
  init.seed = seed;
  return init;
}

Tensor Draw(const std::vector<int64_t>& shape, const Initializer& init) {
  absl::StatusOr<Tensor> t = MakeInitialValue(shape, init);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : Tensor();
}

struct Moments {
  double mean = 0, stddev = 0;
};
Moments MomentsOf(const Tensor& t) {
  double sum = 0, sq = 0;
  for (float v : t.values) sum += v;
  const double mean = sum / t.size();
  for (float v : t.values) sq += (v - mean) * (v - mean);
  return {mean, std::sqrt(sq / t.size())};
}

const std::vector<std::string> kRandomKinds = {"uniform", "normal", "truncated_normal",
                                               "glorot_uniform"};

TEST(InitializerTest, SameSeedSameValuesOtherSeedOtherValues) {
  for (const std::string& kind : kRandomKinds) {
    SCOPED_TRACE(kind);
    const Tensor a = Draw({30, 7}, Make(kind, 42));
    const Tensor b = Draw({30, 7}, Make(kind, 42));
    const Tensor c = Draw({30, 7}, Make(kind, 43));
    EXPECT_EQ(a.shape, (std::vector<int64_t>{30, 7}));
    EXPECT_EQ(a.values, b.values);
    EXPECT_NE(a.values, c.values);
  }
}

// Pins the generator: values must not change with the standard library or a refactoring, or
// a job restarted elsewhere would start from other weights.
TEST(InitializerTest, ValuesArePinnedForASeed) {
  const Tensor u = Draw({3}, Make("uniform", 5));
  const Tensor n = Draw({3}, Make("normal", 5));
  std::mt19937_64 rng(5);
  for (int i = 0; i < 3; ++i) {
    const double x = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    EXPECT_EQ(u.values[i], static_cast<float>(-0.05 + 0.1 * x));
  }
  // Box-Muller from the same stream: (u1, u2) -> r cos(2 pi u2), r sin(2 pi u2).
  std::mt19937_64 rng2(5);
  const double u1 = 1.0 - static_cast<double>(rng2() >> 11) * 0x1.0p-53;
  const double u2 = static_cast<double>(rng2() >> 11) * 0x1.0p-53;
  const double r = std::sqrt(-2.0 * std::log(u1));
  EXPECT_FLOAT_EQ(n.values[0], static_cast<float>(0.05 * r * std::cos(2 * std::numbers::pi * u2)));
  EXPECT_FLOAT_EQ(n.values[1], static_cast<float>(0.05 * r * std::sin(2 * std::numbers::pi * u2)));
}

TEST(InitializerTest, ZerosAndConstant) {
  for (float v : Draw({4, 5}, Make("zeros")).values) EXPECT_EQ(v, 0.0f);
  for (float v : Draw({4, 5}, Make("")).values) EXPECT_EQ(v, 0.0f);  // unset proto kind
  Initializer c = Make("constant");
  c.value = -2.5;
  const Tensor t = Draw({4, 5}, c);
  ASSERT_EQ(t.size(), 20);
  for (float v : t.values) EXPECT_EQ(v, -2.5f);
}

TEST(InitializerTest, UniformStaysInRangeWithExpectedMoments) {
  Initializer init = Make("uniform", 3);
  init.low = -1.0;
  init.high = 3.0;
  const Tensor t = Draw({100000}, init);
  for (float v : t.values) {
    ASSERT_GE(v, -1.0f);
    ASSERT_LT(v, 3.0f);
  }
  const Moments m = MomentsOf(t);
  EXPECT_NEAR(m.mean, 1.0, 0.02);                      // (low + high) / 2
  EXPECT_NEAR(m.stddev, 4.0 / std::sqrt(12.0), 0.01);  // (high - low) / sqrt(12)
}

TEST(InitializerTest, UniformKeepsTheOpenUpperBoundAfterRoundingToFloat) {
  Initializer init = Make("uniform", 9);
  init.low = 0.1 - 1e-12;  // the width is far below a float's resolution at 0.1
  init.high = 0.1;
  for (float v : Draw({1000}, init).values) ASSERT_LT(v, static_cast<float>(init.high));
}

TEST(InitializerTest, NormalHasExpectedMoments) {
  Initializer init = Make("normal", 11);
  init.mean = 2.0;
  init.stddev = 0.5;
  const Moments m = MomentsOf(Draw({100000}, init));
  EXPECT_NEAR(m.mean, 2.0, 0.01);
  EXPECT_NEAR(m.stddev, 0.5, 0.01);
}

TEST(InitializerTest, TruncatedNormalStaysWithinTwoStddev) {
  Initializer init = Make("truncated_normal", 13);
  init.mean = -1.0;
  init.stddev = 0.25;
  const Tensor t = Draw({100000}, init);
  for (float v : t.values) ASSERT_LE(std::abs(v + 1.0), 0.5 + 1e-6);
  const Moments m = MomentsOf(t);
  EXPECT_NEAR(m.mean, -1.0, 0.01);
  // A standard normal truncated at +-2 has stddev 0.8796.
  EXPECT_NEAR(m.stddev, 0.25 * 0.8796, 0.005);
}

TEST(InitializerTest, GlorotUniformUsesTheFans) {
  struct Case {
    std::vector<int64_t> shape;
    double fans;
  };
  for (const Case& c : std::vector<Case>{{{400, 250}, 650}, {{100000}, 200000}, {{}, 2}}) {
    SCOPED_TRACE(ShapeString(c.shape));
    const double limit = std::sqrt(6.0 / c.fans);
    const Tensor t = Draw(c.shape, Make("glorot_uniform", 17));
    ASSERT_EQ(t.size(), NumElements(c.shape));
    float max_abs = 0;
    for (float v : t.values) {
      ASSERT_GE(v, static_cast<float>(-limit));
      ASSERT_LT(v, static_cast<float>(limit));
      max_abs = std::max(max_abs, std::abs(v));
    }
    if (t.size() >= 100000) {
      EXPECT_GT(max_abs, 0.99 * limit);  // the whole range is used
      const Moments m = MomentsOf(t);
      EXPECT_NEAR(m.mean, 0.0, 0.01 * limit);
      EXPECT_NEAR(m.stddev, limit / std::sqrt(3.0), 0.01 * limit);
    }
  }
}

TEST(InitializerTest, EmptyShapesAndZeroDims) {
  for (const std::string& kind : kRandomKinds) {
    EXPECT_EQ(Draw({0, 5}, Make(kind)).size(), 0) << kind;
  }
  EXPECT_EQ(Draw({}, Make("normal")).size(), 1);  // a scalar has one value
}

TEST(InitializerTest, ErrorsSayWhatIsWrong) {
  auto error = [](const std::vector<int64_t>& shape, const Initializer& init) {
    absl::StatusOr<Tensor> t = MakeInitialValue(shape, init);
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << t.status();
    return std::string(t.status().message());
  };
  EXPECT_THAT(error({2}, Make("xavier")),
              HasSubstr("unknown initializer 'xavier' (known: zeros, constant, uniform, normal, "
                        "truncated_normal, glorot_uniform)"));
  Initializer u = Make("uniform");
  u.low = 1;
  u.high = 1;
  EXPECT_THAT(error({2}, u), HasSubstr("low < high"));
  u.low = NAN;
  EXPECT_THAT(error({2}, u), HasSubstr("low"));
  for (const std::string kind : {"normal", "truncated_normal"}) {
    Initializer n = Make(kind);
    n.stddev = 0;
    EXPECT_THAT(error({2}, n), HasSubstr("stddev > 0"));
    n.stddev = -1;
    EXPECT_THAT(error({2}, n), HasSubstr("stddev > 0"));
  }
  Initializer c = Make("constant");
  c.value = INFINITY;
  EXPECT_THAT(error({2}, c), HasSubstr("value"));
  EXPECT_THAT(error({3, -1}, Make("zeros")), HasSubstr("[3, -1] has a negative dimension"));
  EXPECT_THAT(error({1 << 20, 1 << 20}, Make("zeros")), HasSubstr("more than 2^31 elements"));
  EXPECT_THAT(error({INT64_MAX, 4}, Make("zeros")), HasSubstr("more than 2^31 elements"));
}

}  // namespace
}  // namespace pstrain
