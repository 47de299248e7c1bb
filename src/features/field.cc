#include "features/field.h"

#include <xxhash.h>

#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pstrain::features_internal {

std::optional<double> ParseNumber(absl::string_view field) {
  double v = 0;
  if (!absl::SimpleAtod(absl::StripAsciiWhitespace(field), &v) || !std::isfinite(v)) {
    return std::nullopt;
  }
  return v;
}

std::optional<double> ParseTarget(absl::string_view field) {
  std::optional<double> v = ParseNumber(field);
  if (v && std::fabs(*v) > std::numeric_limits<float>::max()) return std::nullopt;
  return v;
}

std::optional<uint64_t> IdentityId(const ColumnSpec& c, absl::string_view field) {
  std::optional<double> v = ParseNumber(field);
  if (!v || *v != std::floor(*v) || *v < 0 || *v >= static_cast<double>(c.num_ids)) {
    return std::nullopt;
  }
  return static_cast<uint64_t>(*v);
}

std::string IdNotInRange(const ColumnSpec& c) {
  return absl::StrCat("is not an id from 0 to ", c.num_ids - 1);
}

uint64_t StableHash(absl::string_view bytes, uint64_t seed) {
  return XXH3_64bits_withSeed(bytes.data(), bytes.size(), seed);
}

absl::Status FieldError(absl::string_view where, absl::string_view column, absl::string_view field,
                        absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(where, ": column \"", column, "\": \"", field, "\" ", what));
}

absl::StatusOr<int> FieldIndex(const std::vector<std::string>& header, const std::string& name) {
  int found = -1;
  for (size_t i = 0; i < header.size(); ++i) {
    if (header[i] != name) continue;
    if (found >= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the header names column \"", name, "\" twice (fields ", found + 1, " and ", i + 1, ")"));
    }
    found = static_cast<int>(i);
  }
  if (found < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the data has no column \"", name, "\" (its header: ", absl::StrJoin(header, ","), ")"));
  }
  return found;
}

absl::StatusOr<Layout> LayoutOf(const Schema& schema, const std::vector<std::string>& header) {
  Layout layout;
  layout.width = header.size();
  for (const ColumnSpec& c : schema.columns) {
    absl::StatusOr<int> f = FieldIndex(header, c.name);
    if (!f.ok()) return f.status();
    layout.field.push_back(*f);
  }
  absl::StatusOr<int> label = FieldIndex(header, schema.label);
  if (!label.ok()) return label.status();
  layout.label = *label;
  return layout;
}

absl::Status CheckWidth(const std::vector<absl::string_view>& fields, size_t width,
                        absl::string_view where) {
  if (fields.size() == width) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(where, ": ", fields.size(), " fields where the header has ", width));
}

}  // namespace pstrain::features_internal
