// Initial values of variables: TensorFlow's initializers, drawn so that a seed gives the same
// values with every standard library (no std:: distributions, whose algorithms are unspecified).
#include <cmath>
#include <limits>
#include <numbers>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/model.h"

namespace pstrain {
namespace {

constexpr int64_t kMaxElements = int64_t{1} << 31;
constexpr const char* kKnown = "zeros, constant, uniform, normal, truncated_normal, glorot_uniform";

// 53 random bits -> u in [0, 1).
double Uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// Standard normal draws by the Box-Muller transform; both values of a pair are used, in order.
class StandardNormal {
 public:
  explicit StandardNormal(std::mt19937_64* rng) : rng_(rng) {}
  double Next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = 1.0 - Uniform01(*rng_);  // (0, 1]: log(u1) is finite
    const double u2 = Uniform01(*rng_);
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double theta = 2.0 * std::numbers::pi * u2;
    spare_ = r * std::sin(theta);
    has_spare_ = true;
    return r * std::cos(theta);
  }

 private:
  std::mt19937_64* rng_;
  bool has_spare_ = false;
  double spare_ = 0;
};

// Fills t with draws from [low, high), keeping the half-open bound after rounding to float.
void FillUniform(double low, double high, std::mt19937_64& rng, Tensor* t) {
  const float top = static_cast<float>(high);
  for (float& v : t->values) {
    float f = static_cast<float>(low + (high - low) * Uniform01(rng));
    if (f >= top) f = std::nextafter(top, -std::numeric_limits<float>::infinity());
    v = f;
  }
}

absl::Status CheckShape(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", ShapeString(shape), " has a negative dimension"));
    }
    if (d > 0 && n > kMaxElements / d) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", ShapeString(shape), " has more than 2^31 elements"));
    }
    n *= d;
  }
  return absl::OkStatus();
}

absl::Status CheckFinite(const char* kind, const char* field, double x) {
  if (std::isfinite(x)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(kind, " initializer: ", field, " is ", x));
}

// fan_in + fan_out as Keras computes them (tf.keras.initializers.GlorotUniform).
double FanSum(const std::vector<int64_t>& shape) {
  if (shape.empty()) return 2;
  if (shape.size() == 1) return 2.0 * static_cast<double>(shape[0]);
  double receptive = 1;
  for (size_t i = 0; i + 2 < shape.size(); ++i) receptive *= static_cast<double>(shape[i]);
  return receptive * static_cast<double>(shape[shape.size() - 2] + shape[shape.size() - 1]);
}

}  // namespace

absl::StatusOr<Tensor> MakeInitialValue(const std::vector<int64_t>& shape,
                                        const Initializer& init) {
  const std::string kind = init.kind.empty() ? "zeros" : init.kind;
  if (kind != "zeros" && kind != "constant" && kind != "uniform" && kind != "normal" &&
      kind != "truncated_normal" && kind != "glorot_uniform") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown initializer '", init.kind, "' (known: ", kKnown, ")"));
  }
  if (absl::Status s = CheckShape(shape); !s.ok()) return s;
  std::mt19937_64 rng(init.seed);
  Tensor t(shape, 0.0f);

  if (kind == "constant") {
    if (absl::Status s = CheckFinite("constant", "value", init.value); !s.ok()) return s;
    for (float& v : t.values) v = static_cast<float>(init.value);
  } else if (kind == "uniform") {
    if (absl::Status s = CheckFinite("uniform", "low", init.low); !s.ok()) return s;
    if (absl::Status s = CheckFinite("uniform", "high", init.high); !s.ok()) return s;
    if (!(init.low < init.high)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "uniform initializer needs low < high, got low=", init.low, " high=", init.high));
    }
    FillUniform(init.low, init.high, rng, &t);
  } else if (kind == "normal" || kind == "truncated_normal") {
    const char* k = kind.c_str();
    if (absl::Status s = CheckFinite(k, "mean", init.mean); !s.ok()) return s;
    if (absl::Status s = CheckFinite(k, "stddev", init.stddev); !s.ok()) return s;
    if (!(init.stddev > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat(kind, " initializer needs stddev > 0, got ", init.stddev));
    }
    const bool truncated = kind == "truncated_normal";
    StandardNormal normal(&rng);
    for (float& v : t.values) {
      double z = normal.Next();
      while (truncated && std::abs(z) > 2.0) z = normal.Next();  // ~4.6% of draws are redrawn
      v = static_cast<float>(init.mean + init.stddev * z);
    }
  } else if (kind == "glorot_uniform") {
    const double fans = FanSum(shape);
    if (fans > 0) {  // else the variable has no elements
      const double limit = std::sqrt(6.0 / fans);
      FillUniform(-limit, limit, rng, &t);
    }
  }
  return t;
}

}  // namespace pstrain
