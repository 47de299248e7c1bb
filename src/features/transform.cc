// A row of raw fields to a model's inputs, by a schema and the statistics of the training rows.
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "data/data.h"
#include "features/features.h"
#include "features/field.h"

namespace pstrain {

using features_internal::ParseNumber;

namespace {

// The largest magnitude of a normalized value (docs/features.md).
constexpr long double kMaxScaled = 1e6;

// A categorical value's id within its column, and whether it was missing (a key of its own).
struct Id {
  uint64_t id = 0;
  bool missing = false;
};

// The ids of a categorical or bucketized column: a vocabulary's values and "other" (id 0),
// identity codes, hash buckets, or the buckets between boundaries.
int64_t IdsOf(const ColumnSpec& c, const ColumnStats& s) {
  if (c.kind == ColumnSpec::Kind::kBucketized) return static_cast<int64_t>(s.boundaries.size()) + 1;
  switch (c.encoding) {
    case Encoding::kVocabulary:
      return static_cast<int64_t>(s.vocabulary.size()) + 1;
    case Encoding::kHash:
      return c.hash_buckets;
    case Encoding::kIdentity:
      return c.num_ids;
  }
  return 0;
}

}  // namespace

absl::StatusOr<Transform> Transform::Create(Schema schema, FeatureStats stats,
                                            const std::vector<std::string>& header) {
  if (stats.columns.size() != schema.columns.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the feature statistics have ", stats.columns.size(), " columns and the schema ",
        schema.columns.size(), ": they were computed for another schema"));
  }
  const bool classify = schema.task == Schema::Task::kClassification;
  if (classify != !stats.classes.empty()) {
    return absl::InvalidArgumentError(
        "the feature statistics were computed for another task than the schema's");
  }
  absl::StatusOr<features_internal::Layout> layout = features_internal::LayoutOf(schema, header);
  if (!layout.ok()) return layout.status();
  Transform t;
  t.field_of_column_ = layout->field;
  t.label_field_ = layout->label;
  t.width_ = layout->width;
  for (size_t i = 0; i < schema.columns.size(); ++i) {
    const ColumnSpec& c = schema.columns[i];
    int64_t width = 0;
    if (c.kind == ColumnSpec::Kind::kNumeric) {
      t.shape_.dense_features += c.missing_indicator ? 2 : 1;
    } else if (!c.indicator) {
      ++t.shape_.categorical_fields;
    } else {
      // One input per id (IdsOf) and one for a missing value.
      width = IdsOf(c, stats.columns[i]) + 1;
      if (width > ColumnSpec::kMaxIndicatorWidth) {
        return absl::InvalidArgumentError(absl::StrCat(
            "column \"", c.name, "\" has ", width - 1, " ids: more than an indicator's ",
            ColumnSpec::kMaxIndicatorWidth - 1, " (an embedding reads it: --model wide_deep)"));
      }
      t.shape_.dense_features += static_cast<int>(width);
    }
    t.indicator_width_.push_back(width);
  }
  for (const CrossSpec& x : schema.crosses) {
    std::vector<int> columns;
    for (const std::string& name : x.columns) {
      for (size_t i = 0; i < schema.columns.size(); ++i) {
        if (schema.columns[i].name == name) columns.push_back(static_cast<int>(i));
      }
    }
    t.cross_columns_.push_back(std::move(columns));
    ++t.shape_.categorical_fields;
  }
  t.shape_.num_classes = static_cast<int>(stats.classes.size());
  for (size_t k = 0; k < stats.classes.size(); ++k) {
    t.class_of_[stats.classes[k]] = static_cast<int>(k);
    if (std::optional<double> v = ParseNumber(stats.classes[k])) {
      t.class_of_number_[*v] = static_cast<int>(k);
    }
  }
  for (size_t i = 0; i < schema.columns.size(); ++i) {
    std::vector<std::string>& vocab = stats.columns[i].vocabulary;
    absl::flat_hash_map<std::string, uint64_t> ids;
    for (size_t v = 0; v < vocab.size(); ++v) ids[vocab[v]] = v + 1;
    t.vocabulary_.push_back(std::move(ids));
  }
  t.schema_ = std::move(schema);
  t.stats_ = std::move(stats);
  return t;
}

absl::Status Transform::Append(const std::vector<absl::string_view>& fields,
                               absl::string_view where, Examples* out) const {
  if (absl::Status s = features_internal::CheckWidth(fields, width_, where); !s.ok()) return s;
  auto bad = [&](absl::string_view column, absl::string_view field, absl::string_view what) {
    return features_internal::FieldError(where, column, field, what);
  };
  // The label first: nothing is appended for a row that fails.
  float label = 0;
  const absl::string_view l = absl::StripAsciiWhitespace(fields[label_field_]);
  if (schema_.task == Schema::Task::kRegression) {
    std::optional<double> v = features_internal::ParseTarget(l);
    if (!v) return bad(schema_.label, l, features_internal::kNotATarget);
    label = static_cast<float>(*v);
  } else {
    auto it = class_of_.find(l);
    std::optional<double> v = ParseNumber(l);
    auto num = v ? class_of_number_.find(*v) : class_of_number_.end();
    if (it != class_of_.end()) {
      label = static_cast<float>(it->second);
    } else if (num != class_of_number_.end()) {
      label = static_cast<float>(num->second);
    } else {
      return bad(schema_.label, l, "is a class the training rows never had");
    }
  }
  std::vector<float> dense;
  std::vector<Id> ids(schema_.columns.size());
  for (size_t i = 0; i < schema_.columns.size(); ++i) {
    const ColumnSpec& c = schema_.columns[i];
    const ColumnStats& s = stats_.columns[i];
    const absl::string_view f = absl::StripAsciiWhitespace(fields[field_of_column_[i]]);
    const bool missing = IsMissing(f);
    // A missing id or bucket takes the last input of an indicator's one-hot block.
    auto one_hot = [&](const Id& id) {
      const size_t at = dense.size();
      dense.resize(at + static_cast<size_t>(indicator_width_[i]), 0.0f);
      dense[at + (id.missing ? indicator_width_[i] - 1 : static_cast<int64_t>(id.id))] = 1.0f;
    };
    if (c.kind == ColumnSpec::Kind::kCategorical) {
      if (missing) {
        ids[i].missing = true;
      } else if (c.encoding == Encoding::kVocabulary) {
        auto it = vocabulary_[i].find(f);
        ids[i].id = it == vocabulary_[i].end() ? 0 : it->second;  // 0: other
      } else if (c.encoding == Encoding::kHash) {
        ids[i].id = features_internal::StableHash(f) % static_cast<uint64_t>(c.hash_buckets);
      } else {
        std::optional<uint64_t> id = features_internal::IdentityId(c, f);
        if (!id) return bad(c.name, f, features_internal::IdNotInRange(c));
        ids[i].id = *id;
      }
      if (c.indicator) one_hot(ids[i]);
      continue;
    }
    std::optional<double> v;
    if (!missing) {
      v = ParseNumber(f);
      if (!v) return bad(c.name, f, "is not a finite number");
    }
    if (c.kind == ColumnSpec::Kind::kBucketized) {
      ids[i].missing = missing;
      if (!missing) {
        ids[i].id =
            std::upper_bound(s.boundaries.begin(), s.boundaries.end(), *v) - s.boundaries.begin();
      }
      if (c.indicator) one_hot(ids[i]);
      continue;
    }
    long double x = missing ? s.mean : features_internal::ScaledInput(c, *v);
    switch (c.normalizer) {
      case Normalizer::kStandardize:
      case Normalizer::kLog1p:
        x = s.stddev > 0 ? (x - s.mean) / s.stddev : 0;
        break;
      case Normalizer::kMinMax:
        x = s.max > s.min ? (x - s.min) / (static_cast<long double>(s.max) - s.min) : 0;
        break;
      case Normalizer::kNone:
        if (std::fabs(x) > std::numeric_limits<float>::max()) {
          return bad(c.name, f, "is beyond a float's range (normalizer none)");
        }
        break;
    }
    // Far outside the training rows' range a scaled value could pass a float's largest.
    if (c.normalizer != Normalizer::kNone) x = std::clamp<long double>(x, -kMaxScaled, kMaxScaled);
    dense.push_back(static_cast<float>(x));
    if (c.missing_indicator) dense.push_back(missing ? 1.0f : 0.0f);
  }
  // One key per categorical or bucketized column, then one per cross.
  int field = 0;
  auto key = [&](uint64_t id, bool missing) {
    out->sparse_keys.push_back(
        CategoricalKey(field, static_cast<uint32_t>(id & 0xffffffffu), missing));
    out->sparse_values.push_back(1.0f);
    out->sparse_fields.push_back(field);
    ++field;
  };
  for (size_t i = 0; i < schema_.columns.size(); ++i) {
    const ColumnSpec& c = schema_.columns[i];
    if (c.kind != ColumnSpec::Kind::kNumeric && !c.indicator) key(ids[i].id, ids[i].missing);
  }
  for (size_t x = 0; x < schema_.crosses.size(); ++x) {
    uint64_t h = 0;
    for (int i : cross_columns_[x]) {
      // The id's bytes, little-endian whatever the machine.
      const uint64_t part = ids[i].missing ? ~uint64_t{0} : ids[i].id;
      char bytes[8];
      for (int b = 0; b < 8; ++b) bytes[b] = static_cast<char>((part >> (8 * b)) & 0xff);
      h = features_internal::StableHash(absl::string_view(bytes, sizeof(bytes)), h);
    }
    key(h % static_cast<uint64_t>(schema_.crosses[x].hash_buckets), false);
  }
  out->dense.insert(out->dense.end(), dense.begin(), dense.end());
  out->sparse_offsets.push_back(static_cast<int64_t>(out->sparse_keys.size()));
  out->labels.push_back(label);
  return absl::OkStatus();
}

}  // namespace pstrain
