// A schema and its statistics as JSON: read with every field checked, written back the same.
#include <cmath>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "features/features.h"
#include "nlohmann/json.hpp"

namespace pstrain {
namespace {

using nlohmann::json;

template <typename E>
struct Names {
  E value;
  const char* name;
};
constexpr Names<ColumnSpec::Kind> kKinds[] = {{ColumnSpec::Kind::kNumeric, "numeric"},
                                              {ColumnSpec::Kind::kCategorical, "categorical"},
                                              {ColumnSpec::Kind::kBucketized, "bucketized"}};
constexpr Names<Normalizer> kNormalizers[] = {{Normalizer::kNone, "none"},
                                              {Normalizer::kStandardize, "standardize"},
                                              {Normalizer::kMinMax, "minmax"},
                                              {Normalizer::kLog1p, "log1p"}};
constexpr Names<Encoding> kEncodings[] = {{Encoding::kVocabulary, "vocabulary"},
                                          {Encoding::kHash, "hash"},
                                          {Encoding::kIdentity, "identity"}};
constexpr Names<Schema::Task> kTasks[] = {{Schema::Task::kClassification, "classification"},
                                          {Schema::Task::kRegression, "regression"}};

template <typename E, size_t N>
const char* NameOf(const Names<E> (&names)[N], E value) {
  for (const Names<E>& n : names) {
    if (n.value == value) return n.name;
  }
  return "?";
}

// Reads a JSON object's fields, each at most once, with errors naming where they are.
class Reader {
 public:
  Reader(const json& object, std::string where) : object_(object), where_(std::move(where)) {}

  absl::Status Check() const {
    if (!object_.is_object()) return Bad("must be an object (a map of keys)");
    return absl::OkStatus();
  }
  absl::Status Bad(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(where_, ": ", what));
  }
  const std::string& where() const { return where_; }

  // Each Get leaves the field's value as it is when the field is absent.
  absl::Status Get(const char* key, std::string* out) {
    const json* v = Find(key);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_string()) return Bad(absl::StrCat("\"", key, "\" must be a string"));
    *out = v->get<std::string>();
    return absl::OkStatus();
  }
  absl::Status Get(const char* key, bool* out) {
    const json* v = Find(key);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_boolean()) return Bad(absl::StrCat("\"", key, "\" must be true or false"));
    *out = v->get<bool>();
    return absl::OkStatus();
  }
  absl::Status Get(const char* key, int64_t* out, int64_t min, int64_t max) {
    const json* v = Find(key);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_number_integer() || v->get<int64_t>() < min || v->get<int64_t>() > max) {
      return Bad(absl::StrCat("\"", key, "\" must be an integer from ", min, " to ", max));
    }
    *out = v->get<int64_t>();
    return absl::OkStatus();
  }
  template <typename E, size_t N>
  absl::Status Get(const char* key, const Names<E> (&names)[N], E* out) {
    std::string name;
    if (absl::Status s = Get(key, &name); !s.ok() || Find(key) == nullptr) return s;
    for (const Names<E>& n : names) {
      if (name == n.name) {
        *out = n.value;
        return absl::OkStatus();
      }
    }
    std::vector<std::string> known;
    for (const Names<E>& n : names) known.push_back(n.name);
    return Bad(absl::StrCat("\"", key, "\" is \"", name, "\"; it must be one of ",
                            absl::StrJoin(known, ", ")));
  }
  const json* Find(const char* key) {
    seen_.insert(key);
    auto it = object_.find(key);
    return it == object_.end() ? nullptr : &*it;
  }
  // After every Get: a key that was not asked for is a mistake (a typo would go unnoticed).
  absl::Status NoOthers() const {
    for (auto it = object_.begin(); it != object_.end(); ++it) {
      if (seen_.count(it.key()) == 0) return Bad(absl::StrCat("unknown key \"", it.key(), "\""));
    }
    return absl::OkStatus();
  }

 private:
  const json& object_;
  std::string where_;
  std::set<std::string> seen_;
};

// The most ids a column or a cross has (CategoricalKey takes a 32-bit id).
constexpr int64_t kMaxIds = int64_t{1} << 31;

// Which kind of column each key other than "name" and "type" applies to, and for categorical
// columns which encoding ("" for any).
struct KeyOf {
  const char* key;
  ColumnSpec::Kind kind;
  const char* encoding;
};
constexpr KeyOf kColumnKeys[] = {
    {"normalizer", ColumnSpec::Kind::kNumeric, ""},
    {"missing_indicator", ColumnSpec::Kind::kNumeric, ""},
    {"buckets", ColumnSpec::Kind::kBucketized, ""},
    {"encoding", ColumnSpec::Kind::kCategorical, ""},
    {"min_count", ColumnSpec::Kind::kCategorical, "vocabulary"},
    {"hash_buckets", ColumnSpec::Kind::kCategorical, "hash"},
    {"num_ids", ColumnSpec::Kind::kCategorical, "identity"},
};

absl::StatusOr<ColumnSpec> ReadColumn(const json& j, const std::string& where) {
  Reader r(j, where);
  if (absl::Status s = r.Check(); !s.ok()) return s;
  ColumnSpec c;
  int64_t buckets = c.buckets, embedding_dim = 0;
  absl::Status s = r.Get("name", &c.name);
  if (s.ok()) s = r.Get("type", kKinds, &c.kind);
  if (s.ok()) s = r.Get("normalizer", kNormalizers, &c.normalizer);
  if (s.ok()) s = r.Get("missing_indicator", &c.missing_indicator);
  if (s.ok()) s = r.Get("buckets", &buckets, 2, 10000);
  if (s.ok()) s = r.Get("encoding", kEncodings, &c.encoding);
  if (s.ok()) s = r.Get("min_count", &c.min_count, 1, int64_t{1} << 40);
  if (s.ok()) s = r.Get("hash_buckets", &c.hash_buckets, 2, kMaxIds);
  if (s.ok()) s = r.Get("num_ids", &c.num_ids, 1, kMaxIds);
  if (s.ok()) s = r.Get("embedding_dim", &embedding_dim, 1, 4096);
  if (s.ok()) s = r.Get("indicator", &c.indicator);
  if (s.ok()) s = r.NoOthers();
  if (!s.ok()) return s;
  // A key of another kind of column would be ignored: a mistake (a column without "type" is
  // numeric).
  for (const KeyOf& k : kColumnKeys) {
    if (j.find(k.key) == j.end()) continue;
    const bool kind_ok = c.kind == k.kind;
    const bool encoding_ok =
        *k.encoding == 0 || NameOf(kEncodings, c.encoding) == std::string(k.encoding);
    if (!kind_ok || !encoding_ok) {
      return r.Bad(absl::StrCat("\"", k.key, "\" applies to ", NameOf(kKinds, k.kind),
                                *k.encoding == 0 ? "" : absl::StrCat(" (", k.encoding, ")"),
                                " columns, and column \"", c.name, "\" is ", NameOf(kKinds, c.kind),
                                c.kind == ColumnSpec::Kind::kCategorical
                                    ? absl::StrCat(" (", NameOf(kEncodings, c.encoding), ")")
                                    : ""));
    }
  }
  for (const char* key : {"embedding_dim", "indicator"}) {
    if (j.find(key) != j.end() && c.kind == ColumnSpec::Kind::kNumeric) {
      return r.Bad(absl::StrCat("\"", key,
                                "\" applies to categorical and bucketized columns, and column \"",
                                c.name, "\" is numeric"));
    }
  }
  c.buckets = static_cast<int>(buckets);
  c.embedding_dim = static_cast<int>(embedding_dim);
  if (c.name.empty()) return r.Bad("a column needs a \"name\"");
  if (c.kind == ColumnSpec::Kind::kCategorical) {
    if (c.encoding == Encoding::kHash && c.hash_buckets == 0) {
      return r.Bad(
          absl::StrCat("column \"", c.name, "\": encoding \"hash\" needs \"hash_buckets\""));
    }
    if (c.encoding == Encoding::kIdentity && c.num_ids == 0) {
      return r.Bad(
          absl::StrCat("column \"", c.name, "\": encoding \"identity\" needs \"num_ids\""));
    }
  }
  return c;
}

}  // namespace

absl::StatusOr<Schema> Schema::FromJson(absl::string_view text, absl::string_view source) {
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not valid JSON"));
  }
  return features_internal::SchemaOfJson(j, source);
}

absl::StatusOr<Schema> features_internal::SchemaOfJson(const nlohmann::json& j,
                                                       absl::string_view source) {
  Reader r(j, std::string(source));
  if (absl::Status s = r.Check(); !s.ok()) return s;
  Schema schema;
  absl::Status s = r.Get("label", &schema.label);
  if (s.ok()) s = r.Get("task", kTasks, &schema.task);
  const json* columns = r.Find("columns");
  const json* crosses = r.Find("crosses");
  if (s.ok()) s = r.NoOthers();
  if (!s.ok()) return s;
  if (schema.label.empty()) return r.Bad("\"label\" must name the label column");
  if (columns == nullptr || !columns->is_array() || columns->empty()) {
    return r.Bad("\"columns\" must be a non-empty list of columns");
  }
  std::set<std::string> names = {schema.label};
  for (size_t i = 0; i < columns->size(); ++i) {
    absl::StatusOr<ColumnSpec> c =
        ReadColumn((*columns)[i], absl::StrCat(source, ": columns[", i, "]"));
    if (!c.ok()) return c.status();
    if (!names.insert(c->name).second) {
      return r.Bad(absl::StrCat("column \"", c->name, "\" is named twice (or is the label)"));
    }
    schema.columns.push_back(*std::move(c));
  }
  if (crosses != nullptr && !crosses->is_array()) return r.Bad("\"crosses\" must be a list");
  for (size_t i = 0; crosses != nullptr && i < crosses->size(); ++i) {
    Reader x((*crosses)[i], absl::StrCat(source, ": crosses[", i, "]"));
    if (absl::Status t = x.Check(); !t.ok()) return t;
    CrossSpec cross;
    const json* of = x.Find("columns");
    absl::Status t = x.Get("hash_buckets", &cross.hash_buckets, 2, kMaxIds);
    if (t.ok()) t = x.NoOthers();
    if (!t.ok()) return t;
    if (cross.hash_buckets == 0) return x.Bad("a cross needs \"hash_buckets\"");
    if (of == nullptr || !of->is_array() || of->size() < 2) {
      return x.Bad("\"columns\" must list two or more columns");
    }
    for (const json& name : *of) {
      if (!name.is_string()) return x.Bad("\"columns\" must list column names");
      const std::string n = name.get<std::string>();
      bool found = false;
      for (const ColumnSpec& c : schema.columns) {
        if (c.name != n) continue;
        found = true;
        if (c.kind == ColumnSpec::Kind::kNumeric) {
          return x.Bad(absl::StrCat("column \"", n,
                                    "\" is numeric: a cross takes categorical or bucketized "
                                    "columns"));
        }
      }
      if (!found) return x.Bad(absl::StrCat("no column \"", n, "\" in \"columns\""));
      cross.columns.push_back(n);
    }
    schema.crosses.push_back(std::move(cross));
  }
  return schema;
}

std::string Schema::ToJson() const {
  // In the order a reader expects (ordered_json keeps it), defaults left out.
  using ordered = nlohmann::ordered_json;
  ordered columns_json = ordered::array();
  for (const ColumnSpec& c : columns) {
    ordered o = {{"name", c.name}, {"type", NameOf(kKinds, c.kind)}};
    switch (c.kind) {
      case ColumnSpec::Kind::kNumeric:
        o["normalizer"] = NameOf(kNormalizers, c.normalizer);
        if (c.missing_indicator) o["missing_indicator"] = true;
        break;
      case ColumnSpec::Kind::kBucketized:
        o["buckets"] = c.buckets;
        break;
      case ColumnSpec::Kind::kCategorical:
        o["encoding"] = NameOf(kEncodings, c.encoding);
        if (c.encoding == Encoding::kVocabulary && c.min_count != 1) o["min_count"] = c.min_count;
        if (c.encoding == Encoding::kHash) o["hash_buckets"] = c.hash_buckets;
        if (c.encoding == Encoding::kIdentity) o["num_ids"] = c.num_ids;
        break;
    }
    if (c.kind != ColumnSpec::Kind::kNumeric && c.embedding_dim > 0) {
      o["embedding_dim"] = c.embedding_dim;
    }
    if (c.kind != ColumnSpec::Kind::kNumeric && c.indicator) o["indicator"] = true;
    columns_json.push_back(std::move(o));
  }
  ordered j = {{"label", label}, {"task", NameOf(kTasks, task)}, {"columns", columns_json}};
  if (!crosses.empty()) {
    ordered crosses_json = ordered::array();
    for (const CrossSpec& x : crosses) {
      crosses_json.push_back({{"columns", x.columns}, {"hash_buckets", x.hash_buckets}});
    }
    j["crosses"] = crosses_json;
  }
  // Names come from JSON (UTF-8) or a header SchemaInferrer checked; replace, never throw.
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

// A value of the data as JSON text, whatever its bytes (a file in Latin-1 has values that are not
// UTF-8): '%' and every byte from 0x80 become %XX, the rest stays as it is.
std::string Escape(const std::string& value) {
  std::string out;
  for (unsigned char c : value) {
    if (c == '%' || c >= 0x80) {
      absl::StrAppend(&out, "%", absl::Hex(c, absl::kZeroPad2));
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}
std::vector<std::string> Escape(const std::vector<std::string>& values) {
  std::vector<std::string> out;
  for (const std::string& v : values) out.push_back(Escape(v));
  return out;
}

absl::StatusOr<std::string> Unescape(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out.push_back(text[i]);
      continue;
    }
    int byte = 0;
    if (i + 2 >= text.size() || !absl::ascii_isxdigit(text[i + 1]) ||
        !absl::ascii_isxdigit(text[i + 2]) || !absl::SimpleHexAtoi(text.substr(i + 1, 2), &byte)) {
      return absl::InvalidArgumentError(absl::StrCat("bad escape in \"", text, "\""));
    }
    out.push_back(static_cast<char>(byte));
    i += 2;
  }
  return out;
}
absl::StatusOr<std::vector<std::string>> Unescape(const json& values) {
  std::vector<std::string> out;
  for (const std::string& v : values.get<std::vector<std::string>>()) {
    absl::StatusOr<std::string> u = Unescape(v);
    if (!u.ok()) return u.status();
    out.push_back(*std::move(u));
  }
  return out;
}

}  // namespace

std::string FeatureStats::ToJson() const {
  json columns_json = json::array();
  for (const ColumnStats& c : columns) {
    columns_json.push_back({{"count", c.count},
                            {"missing", c.missing},
                            {"mean", c.mean},
                            {"stddev", c.stddev},
                            {"min", c.min},
                            {"max", c.max},
                            {"boundaries", c.boundaries},
                            {"vocabulary", Escape(c.vocabulary)}});
  }
  return json{{"rows", rows},
              {"classes", Escape(classes)},
              {"label_mean", label_mean},
              {"label_stddev", label_stddev},
              {"columns", columns_json}}
      .dump();
}

absl::StatusOr<FeatureStats> FeatureStats::FromJson(absl::string_view text,
                                                    absl::string_view source) {
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": feature statistics: ", what));
  };
  if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
  FeatureStats stats;
  try {
    stats.rows = j.at("rows").get<int64_t>();
    absl::StatusOr<std::vector<std::string>> classes = Unescape(j.at("classes"));
    if (!classes.ok()) return bad(classes.status().message());
    stats.classes = *std::move(classes);
    if (std::set<std::string>(stats.classes.begin(), stats.classes.end()).size() !=
            stats.classes.size() ||
        stats.classes.size() == 1 || stats.rows < 0) {
      return bad("the classes must be distinct, and none or at least 2");
    }
    stats.label_mean = j.value("label_mean", 0.0);
    stats.label_stddev = j.value("label_stddev", 0.0);
    if (!std::isfinite(stats.label_mean) || !std::isfinite(stats.label_stddev) ||
        stats.label_stddev < 0) {
      return bad("the label's mean and standard deviation must be finite, the deviation >= 0");
    }
    for (const json& c : j.at("columns")) {
      ColumnStats s;
      s.count = c.at("count").get<int64_t>();
      s.missing = c.at("missing").get<int64_t>();
      s.mean = c.at("mean").get<double>();
      s.stddev = c.at("stddev").get<double>();
      s.min = c.at("min").get<double>();
      s.max = c.at("max").get<double>();
      s.boundaries = c.at("boundaries").get<std::vector<double>>();
      absl::StatusOr<std::vector<std::string>> vocabulary = Unescape(c.at("vocabulary"));
      if (!vocabulary.ok()) return bad(vocabulary.status().message());
      s.vocabulary = *std::move(vocabulary);
      const std::string column = absl::StrCat("column ", stats.columns.size(), ": ");
      if (s.count < 0 || s.missing < 0 || !std::isfinite(s.mean) || !std::isfinite(s.min) ||
          !std::isfinite(s.max) || !std::isfinite(s.stddev) || s.stddev < 0 || s.min > s.max) {
        return bad(absl::StrCat(column, "counts, moments or range out of their domain"));
      }
      for (size_t b = 0; b < s.boundaries.size(); ++b) {
        if (!std::isfinite(s.boundaries[b]) || (b > 0 && s.boundaries[b] <= s.boundaries[b - 1])) {
          return bad(absl::StrCat(column, "bucket boundaries not finite and ascending"));
        }
      }
      if (std::set<std::string>(s.vocabulary.begin(), s.vocabulary.end()).size() !=
          s.vocabulary.size()) {
        return bad(absl::StrCat(column, "a vocabulary value twice"));
      }
      stats.columns.push_back(std::move(s));
    }
  } catch (const json::exception& e) {
    return bad(e.what());
  }
  return stats;
}

}  // namespace pstrain
