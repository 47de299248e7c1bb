// The initial rows of embedding tables.
//
// Every row has its own stream, splitmix64 seeded with RowSeed(seed, key) (common/keys.h), so a
// row depends only on the table's initializer and the key: not on the order keys arrive in, nor
// on which PS task (of how many) holds it. Uniform values are low + (high - low) u with u taken
// from the top 53 bits; normal values come from Box-Muller (both outputs used) with u1 in (0, 1];
// truncated_normal redraws values beyond 2 stddev. Arithmetic is in double, rounded to float at
// the end, so results agree across platforms up to the last ulp of libm's log, sin and cos,
// which the rounding to float hides.
#include "ps/embedding_init.h"

#include <cmath>
#include <limits>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "common/keys.h"
#include "ps/embedding_table.h"

namespace pstrain {
namespace {

class RowStream {
 public:
  explicit RowStream(uint64_t seed) : state_(seed) {}
  // splitmix64
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1).
  double Unit() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // Standard normal, by Box-Muller.
  double Normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = 1.0 - Unit();  // (0, 1]: log is finite
    const double angle = 2.0 * std::numbers::pi * Unit();
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(angle);
    has_spare_ = true;
    return r * std::cos(angle);
  }

 private:
  uint64_t state_;
  double spare_ = 0;
  bool has_spare_ = false;
};

absl::Status Finite(const char* field, double value) {
  if (std::isfinite(value)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("initializer.", field, " ", value, " must be finite"));
}

}  // namespace

absl::Status ValidateRowInitializer(const InitializerDef& init) {
  const std::string& kind = init.kind();
  if (kind.empty() || kind == "zeros") return absl::OkStatus();
  if (kind == "constant") return Finite("value", init.value());
  if (kind == "uniform") {
    if (absl::Status s = Finite("low", init.low()); !s.ok()) return s;
    if (absl::Status s = Finite("high", init.high()); !s.ok()) return s;
    if (!(init.low() < init.high())) {
      return absl::InvalidArgumentError(absl::StrCat("initializer.low ", init.low(),
                                                     " must be below initializer.high ",
                                                     init.high(), " for uniform"));
    }
    return absl::OkStatus();
  }
  if (kind == "normal" || kind == "truncated_normal") {
    if (absl::Status s = Finite("mean", init.mean()); !s.ok()) return s;
    if (absl::Status s = Finite("stddev", init.stddev()); !s.ok()) return s;
    if (!(init.stddev() > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("initializer.stddev ", init.stddev(), " must be > 0 for ", kind));
    }
    return absl::OkStatus();
  }
  if (kind == "glorot_uniform") {
    return absl::InvalidArgumentError(
        "initializer.kind 'glorot_uniform' needs a fan-in, which an embedding row does not have "
        "(use uniform, normal or truncated_normal)");
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "initializer.kind '", kind.substr(0, 64),
      "' is unknown (known for tables: zeros, constant, uniform, normal, truncated_normal)"));
}

void InitialRow(const InitializerDef& init, uint64_t key, int dim, float* out) {
  const std::string& kind = init.kind();
  if (kind == "constant") {
    const float v = static_cast<float>(init.value());
    for (int i = 0; i < dim; ++i) out[i] = v;
    return;
  }
  RowStream rng(RowSeed(init.seed(), key));
  if (kind == "uniform") {
    const double low = init.low(), width = init.high() - init.low();
    const float high = static_cast<float>(init.high());
    for (int i = 0; i < dim; ++i) {
      const float v = static_cast<float>(low + width * rng.Unit());
      // Rounding to float may reach `high`; the interval is half-open.
      out[i] = v < high ? v : std::nextafter(high, -std::numeric_limits<float>::infinity());
    }
    return;
  }
  if (kind == "normal" || kind == "truncated_normal") {
    const bool truncated = kind == "truncated_normal";
    for (int i = 0; i < dim; ++i) {
      double z = rng.Normal();
      while (truncated && std::abs(z) > 2.0) z = rng.Normal();
      out[i] = static_cast<float>(init.mean() + init.stddev() * z);
    }
    return;
  }
  for (int i = 0; i < dim; ++i) out[i] = 0.0f;  // zeros, or ""
}

}  // namespace pstrain
