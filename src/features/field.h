// Internal to src/features: what the statistics and the transform both do to a row and its
// fields.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "features/features.h"
#include "nlohmann/json_fwd.hpp"

namespace pstrain::features_internal {

// Schema::FromJson and Schema::FromYaml past their parsers: the schema of a parsed document.
absl::StatusOr<Schema> SchemaOfJson(const nlohmann::json& j, absl::string_view source);

// The field's number (surrounding spaces ignored), or nullopt when it is not a finite number.
std::optional<double> ParseNumber(absl::string_view field);

// A regression target: a number within a float's range (a model's labels are floats).
std::optional<double> ParseTarget(absl::string_view field);

// What a numeric or bucketized column's statistics are of: the value, or for kLog1p
// sign(x) log(1 + |x|).
inline double ScaledInput(const ColumnSpec& c, double x) {
  return c.kind == ColumnSpec::Kind::kNumeric && c.normalizer == Normalizer::kLog1p
             ? std::copysign(std::log1p(std::fabs(x)), x)
             : x;
}

// An identity column's id of the (stripped, present) field, or nullopt when it is not an
// integer from 0 to num_ids - 1.
std::optional<uint64_t> IdentityId(const ColumnSpec& c, absl::string_view field);

// What an identity column's bad field is, and a regression target's.
std::string IdNotInRange(const ColumnSpec& c);
inline constexpr char kNotATarget[] = "is not a number within a float's range (task regression)";

// A 64-bit hash of the bytes (XXH3), the same in every run and on every machine: the ids it
// gives are in the checkpoints.
uint64_t StableHash(absl::string_view bytes, uint64_t seed = 0);

// The error of a field: `where: column "name": "field" what`.
absl::Status FieldError(absl::string_view where, absl::string_view column, absl::string_view field,
                        absl::string_view what);

// Where a schema's columns and label are in a header: each name once (a name the header has
// twice is ambiguous), the label not among the features.
struct Layout {
  std::vector<int> field;  // per schema column
  int label = 0;
  size_t width = 0;  // fields per row
};
absl::StatusOr<Layout> LayoutOf(const Schema& schema, const std::vector<std::string>& header);
// The index of `name` in `header`: InvalidArgument when it is missing or there twice.
absl::StatusOr<int> FieldIndex(const std::vector<std::string>& header, const std::string& name);

// InvalidArgument "where: N fields where the header has M" unless the row has `width` fields.
absl::Status CheckWidth(const std::vector<absl::string_view>& fields, size_t width,
                        absl::string_view where);

}  // namespace pstrain::features_internal
