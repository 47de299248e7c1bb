// One pass over the training rows: the statistics a schema needs, and a schema inferred for a
// table nobody described.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/moments.h"
#include "features/features.h"
#include "features/field.h"
#include "nlohmann/json.hpp"

namespace pstrain {

using features_internal::CheckWidth;
using features_internal::FieldError;
using features_internal::IdNotInRange;
using features_internal::kNotATarget;
using features_internal::ParseNumber;

bool IsMissing(absl::string_view field) {
  const absl::string_view f = absl::StripAsciiWhitespace(field);
  if (f.empty()) return true;
  for (absl::string_view m : {"na", "n/a", "nan", "?", "null"}) {
    if (absl::EqualsIgnoreCase(f, m)) return true;
  }
  return false;
}

namespace {

bool IsUtf8(const std::string& text) {
  try {
    (void)nlohmann::json(text).dump();
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

// The label's classes: when every value is a number, one class per number (the first text of
// it in byte order names it: "1" and "1.0" are one class) in numeric order; otherwise the texts
// in byte order.
std::vector<std::string> ClassesOf(const absl::flat_hash_map<std::string, int64_t>& counts) {
  std::vector<std::string> texts;
  for (const auto& [value, n] : counts) texts.push_back(value);
  std::sort(texts.begin(), texts.end());
  std::map<double, std::string> numbers;
  for (const std::string& t : texts) {
    std::optional<double> v = ParseNumber(t);
    if (!v) return texts;
    numbers.emplace(*v, t);  // keeps the first text of a number
  }
  std::vector<std::string> classes;
  for (auto& [v, t] : numbers) classes.push_back(std::move(t));
  return classes;
}

}  // namespace

struct StatsBuilder::State {
  Schema schema;
  features_internal::Layout layout;
  std::vector<Moments> moments;
  std::vector<int64_t> missing;
  std::vector<std::vector<double>> sample;                        // bucketized
  std::vector<absl::flat_hash_map<std::string, int64_t>> counts;  // kVocabulary
  absl::flat_hash_map<std::string, int64_t> labels;               // classification
  Moments target;                                                 // regression
  uint64_t rng = 0x9e3779b97f4a7c15ULL;                           // the quantile sample's draw
  int64_t rows = 0;
};

StatsBuilder::StatsBuilder(std::unique_ptr<State> state) : state_(std::move(state)) {}
StatsBuilder::StatsBuilder(StatsBuilder&&) noexcept = default;
StatsBuilder& StatsBuilder::operator=(StatsBuilder&&) noexcept = default;
StatsBuilder::~StatsBuilder() = default;

absl::StatusOr<StatsBuilder> StatsBuilder::Create(const Schema& schema,
                                                  const std::vector<std::string>& header) {
  absl::StatusOr<features_internal::Layout> layout = features_internal::LayoutOf(schema, header);
  if (!layout.ok()) return layout.status();
  auto st = std::make_unique<State>();
  st->schema = schema;
  st->layout = *std::move(layout);
  const size_t n = schema.columns.size();
  st->moments.resize(n);
  st->missing.resize(n);
  st->sample.resize(n);
  st->counts.resize(n);
  return StatsBuilder(std::move(st));
}

absl::Status StatsBuilder::Add(const std::vector<absl::string_view>& fields,
                               absl::string_view where) {
  State& st = *state_;
  if (absl::Status s = CheckWidth(fields, st.layout.width, where); !s.ok()) return s;
  // Every field is checked before any is counted: a row refused leaves the statistics as they
  // were (a reader that skips bad lines goes on from them).
  const size_t n = st.schema.columns.size();
  std::vector<std::optional<double>> values(n);  // numeric and bucketized, nullopt if missing
  std::vector<absl::string_view> present(n);     // the field, empty if missing
  for (size_t i = 0; i < n; ++i) {
    const ColumnSpec& c = st.schema.columns[i];
    const absl::string_view f = absl::StripAsciiWhitespace(fields[st.layout.field[i]]);
    if (IsMissing(f)) continue;
    present[i] = f;
    std::optional<double> v = ParseNumber(f);
    if (c.kind != ColumnSpec::Kind::kCategorical) {
      if (!v) return FieldError(where, c.name, f, "is not a finite number");
      values[i] = features_internal::ScaledInput(c, *v);
    } else if (c.encoding == Encoding::kIdentity && !features_internal::IdentityId(c, f)) {
      return FieldError(where, c.name, f, IdNotInRange(c));
    } else if (c.encoding == Encoding::kVocabulary && !st.counts[i].contains(f) &&
               static_cast<int64_t>(st.counts[i].size()) >= kMaxVocabulary) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": column \"", c.name, "\" has more than ", kMaxVocabulary,
                       " distinct values: give it \"encoding\": \"hash\" with \"hash_buckets\""));
    }
  }
  const absl::string_view label = absl::StripAsciiWhitespace(fields[st.layout.label]);
  if (IsMissing(label)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": the label \"", st.schema.label, "\" is missing"));
  }
  if (st.schema.task == Schema::Task::kRegression) {
    std::optional<double> target = features_internal::ParseTarget(label);
    if (!target) return FieldError(where, st.schema.label, label, kNotATarget);
    st.target.Add(*target);
  } else if (!st.labels.contains(label) &&
             static_cast<int64_t>(st.labels.size()) >= kMaxVocabulary) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": the label \"", st.schema.label,
                                                   "\" has more than ", kMaxVocabulary,
                                                   " classes: is the task regression?"));
  } else {
    ++st.labels[label];
  }
  for (size_t i = 0; i < n; ++i) {
    const ColumnSpec& c = st.schema.columns[i];
    const absl::string_view f = present[i];
    if (f.empty()) {
      ++st.missing[i];
    } else if (c.kind == ColumnSpec::Kind::kCategorical) {
      if (c.encoding == Encoding::kVocabulary) ++st.counts[i][f];
    } else {
      st.moments[i].Add(*values[i]);
      if (c.kind == ColumnSpec::Kind::kBucketized) Sample(i, *values[i]);
    }
  }
  ++st.rows;
  return absl::OkStatus();
}

void StatsBuilder::Sample(size_t column, double x) {  // a uniform sample (reservoir)
  State& st = *state_;
  std::vector<double>& sample = st.sample[column];
  const int64_t seen = st.moments[column].n;
  if (static_cast<int64_t>(sample.size()) < kQuantileSample) {
    sample.push_back(x);
    return;
  }
  st.rng = st.rng * 6364136223846793005ULL + 1442695040888963407ULL;
  const uint64_t j = (st.rng >> 11) % static_cast<uint64_t>(seen);
  if (j < static_cast<uint64_t>(kQuantileSample)) sample[j] = x;
}

absl::StatusOr<FeatureStats> StatsBuilder::Finish() {
  State& st = *state_;
  if (st.rows == 0) return absl::InvalidArgumentError("no training row to compute statistics of");
  FeatureStats out;
  out.rows = st.rows;
  for (size_t i = 0; i < st.schema.columns.size(); ++i) {
    const ColumnSpec& c = st.schema.columns[i];
    const Moments& m = st.moments[i];
    ColumnStats s;
    s.count = m.n;
    s.missing = st.missing[i];
    s.mean = static_cast<double>(m.mean);
    s.stddev = m.stddev();
    s.min = static_cast<double>(m.min);
    s.max = static_cast<double>(m.max);
    if (c.kind == ColumnSpec::Kind::kBucketized && !st.sample[i].empty()) {
      std::vector<double>& v = st.sample[i];
      std::sort(v.begin(), v.end());
      for (int b = 1; b < c.buckets; ++b) {
        const double cut = v[std::min(v.size() - 1, v.size() * b / c.buckets)];
        if (s.boundaries.empty() || cut > s.boundaries.back()) s.boundaries.push_back(cut);
      }
    }
    if (c.kind == ColumnSpec::Kind::kCategorical && c.encoding == Encoding::kVocabulary) {
      std::vector<std::pair<int64_t, std::string>> by_count;
      for (const auto& [value, n] : st.counts[i]) {
        if (n >= c.min_count) by_count.push_back({-n, value});
      }
      std::sort(by_count.begin(), by_count.end());  // most frequent first, then by value
      for (auto& [n, value] : by_count) s.vocabulary.push_back(std::move(value));
    }
    out.columns.push_back(std::move(s));
  }
  if (st.schema.task == Schema::Task::kRegression) {
    out.label_mean = static_cast<double>(st.target.mean);
    out.label_stddev = st.target.stddev();
  } else {
    out.classes = ClassesOf(st.labels);
    if (out.classes.size() < 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("the label \"", st.schema.label, "\" has ", out.classes.size(),
                       " class in the training rows: a classifier needs at least 2"));
    }
  }
  return out;
}

// --- a schema inferred ---

struct SchemaInferrer::State {
  std::vector<std::string> header;
  int label = 0;
  struct Column {
    int64_t missing = 0;
    bool numbers = true;   // every value present is a number
    bool integers = true;  // ... an integer
    absl::flat_hash_map<std::string, int64_t>
        distinct;       // up to StatsBuilder::kMaxVocabulary / 16 + 1
    bool many = false;  // more distinct values than that
  };
  std::vector<Column> columns;
  int64_t rows = 0;
  bool integer_codes = true;
};

SchemaInferrer::SchemaInferrer(std::unique_ptr<State> state) : state_(std::move(state)) {}
SchemaInferrer::SchemaInferrer(SchemaInferrer&&) noexcept = default;
SchemaInferrer& SchemaInferrer::operator=(SchemaInferrer&&) noexcept = default;
SchemaInferrer::~SchemaInferrer() = default;

absl::StatusOr<SchemaInferrer> SchemaInferrer::Create(const std::vector<std::string>& header,
                                                      absl::string_view label, bool integer_codes) {
  if (header.size() < 2) {
    return absl::InvalidArgumentError("a table needs a label column and at least one feature");
  }
  // A schema names each column once, by a UTF-8 name.
  for (size_t i = 0; i < header.size(); ++i) {
    if (!IsUtf8(header[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("the name of column ", i + 1,
                       " is not UTF-8 (a schema is JSON): convert the file, e.g. with iconv"));
    }
    if (absl::StripAsciiWhitespace(header[i]).empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("column ", i + 1, " has no name in the header: a schema names columns"));
    }
    if (absl::StatusOr<int> f = features_internal::FieldIndex(header, header[i]); !f.ok()) {
      return f.status();
    }
  }
  auto st = std::make_unique<State>();
  st->header = header;
  st->integer_codes = integer_codes;
  if (!label.empty()) {
    absl::StatusOr<int> f = features_internal::FieldIndex(header, std::string(label));
    if (!f.ok()) return f.status();
    st->label = *f;
  }
  st->columns.resize(header.size());
  return SchemaInferrer(std::move(st));
}

absl::Status SchemaInferrer::Add(const std::vector<absl::string_view>& fields,
                                 absl::string_view where) {
  State& st = *state_;
  if (absl::Status s = CheckWidth(fields, st.header.size(), where); !s.ok()) return s;
  constexpr int64_t kKeep = StatsBuilder::kMaxVocabulary / 16;
  for (size_t i = 0; i < fields.size(); ++i) {
    State::Column& c = st.columns[i];
    if (IsMissing(fields[i])) {
      ++c.missing;
      continue;
    }
    const absl::string_view f = absl::StripAsciiWhitespace(fields[i]);
    if (c.numbers) {
      std::optional<double> v = ParseNumber(f);
      c.numbers = v.has_value();
      c.integers = c.numbers && c.integers && *v == std::floor(*v);
    }
    if (c.many) continue;
    if (c.distinct.find(f) == c.distinct.end() &&
        static_cast<int64_t>(c.distinct.size()) >= kKeep) {
      c.many = true;
      continue;
    }
    ++c.distinct[f];
  }
  ++st.rows;
  return absl::OkStatus();
}

absl::StatusOr<InferredSchema> SchemaInferrer::Finish() const {
  const State& st = *state_;
  if (st.rows == 0) return absl::InvalidArgumentError("no row to infer a schema from");
  InferredSchema out;
  Schema& schema = out.schema;
  schema.label = st.header[st.label];
  for (size_t i = 0; i < st.header.size(); ++i) {
    if (static_cast<int>(i) == st.label) continue;
    const State::Column& c = st.columns[i];
    ColumnSpec spec;
    spec.name = st.header[i];
    const int64_t distinct = static_cast<int64_t>(c.distinct.size());
    std::string why;
    if (c.missing == st.rows) {
      out.reasons.push_back(absl::StrCat(st.header[i], ": every value is missing: left out"));
      continue;
    } else if (!c.numbers && !c.many && st.rows >= kMinRowsForIdentifiers &&
               distinct == st.rows - c.missing) {
      out.reasons.push_back(absl::StrCat(
          st.header[i], ": text with a different value in every row (an identifier): left out"));
      continue;
    } else if (!c.numbers) {
      spec.kind = ColumnSpec::Kind::kCategorical;
      if (c.many) {
        spec.encoding = Encoding::kHash;
        spec.hash_buckets = StatsBuilder::kMaxVocabulary;
        why = absl::StrCat("text values, more than ", StatsBuilder::kMaxVocabulary / 16,
                           " distinct: categorical by hash into ", StatsBuilder::kMaxVocabulary,
                           " buckets");
      } else {
        why = absl::StrCat("text values (", distinct, " distinct): categorical by vocabulary");
      }
    } else if (st.integer_codes && c.integers && distinct >= 3 && distinct <= kMaxCodes) {
      spec.kind = ColumnSpec::Kind::kCategorical;
      why = absl::StrCat("integers with ", distinct, " distinct values (at most ", kMaxCodes,
                         "): categorical codes by vocabulary");
    } else {
      spec.missing_indicator = c.missing > 0;
      why = absl::StrCat(c.integers ? "integers" : "numbers", " with ",
                         c.many ? absl::StrCat("more than ", StatsBuilder::kMaxVocabulary / 16)
                                : absl::StrCat(distinct),
                         " distinct values: numeric, standardized");
      if (c.missing > 0) {
        why += absl::StrCat("; ", c.missing, " missing: filled with the mean and flagged");
      }
    }
    schema.columns.push_back(std::move(spec));
    out.reasons.push_back(absl::StrCat(st.header[i], ": ", why));
  }
  if (schema.columns.empty()) {
    return absl::InvalidArgumentError(
        "no column is left to be a feature (every one is missing or an identifier)");
  }
  const State::Column& label = st.columns[st.label];
  if (label.numbers && !label.integers) {
    schema.task = Schema::Task::kRegression;
    out.reasons.push_back(
        absl::StrCat(schema.label, " (label): numbers that are not all integers: regression"));
  } else if (label.numbers && (label.many || label.distinct.size() > kMaxCodes)) {
    schema.task = Schema::Task::kRegression;
    out.reasons.push_back(absl::StrCat(schema.label, " (label): integers with more than ",
                                       kMaxCodes, " distinct values: regression"));
  } else {
    out.reasons.push_back(absl::StrCat(
        schema.label, " (label): ", label.many ? "many" : absl::StrCat(label.distinct.size()),
        " distinct ", label.numbers ? "integers" : "values", ": classification"));
  }
  return out;
}

}  // namespace pstrain
