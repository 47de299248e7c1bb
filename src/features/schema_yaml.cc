// A schema written in YAML: the document becomes the JSON value it spells, then is read as a
// JSON schema is (one reader, one set of errors). yaml-cpp (Debian's libyaml-cpp-dev) parses.
#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "features/features.h"
#include "features/field.h"
#include "nlohmann/json.hpp"
#include "yaml-cpp/depthguard.h"
#include "yaml-cpp/yaml.h"

namespace pstrain {
namespace {

using nlohmann::json;

// Deeper and larger than any schema: the bounds keep a hostile document from exhausting the
// stack here, or memory through aliases of aliases (each alias is its node copied again).
constexpr int kMaxDepth = 32;
constexpr int64_t kMaxValues = 100000;

// A plain (unquoted) scalar under YAML 1.2's core schema.
json PlainScalar(const std::string& text) {
  if (text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL") {
    return nullptr;
  }
  if (text == "true" || text == "True" || text == "TRUE") return true;
  if (text == "false" || text == "False" || text == "FALSE") return false;
  int64_t i = 0;
  if (absl::SimpleAtoi(text, &i) && absl::ascii_isdigit(text.back())) return i;
  // A finite number that ends in a digit; anything else stays the string it is.
  std::optional<double> d = features_internal::ParseNumber(text);
  if (d && absl::ascii_isdigit(text.back())) return *d;
  return text;
}

absl::Status YamlToJson(const YAML::Node& node, int depth, const std::string& source,
                        int64_t* values, json* out) {
  auto where = [&] {
    return absl::StrCat(source, " line ", node.Mark().line + 1, ", column ",
                        node.Mark().column + 1);
  };
  if (depth > kMaxDepth) {
    return absl::InvalidArgumentError(
        absl::StrCat(where(), ": nested deeper than ", kMaxDepth, " levels"));
  }
  if (++*values > kMaxValues) {
    return absl::InvalidArgumentError(
        absl::StrCat(where(), ": more than ", kMaxValues, " values (aliases included)"));
  }
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      *out = nullptr;
      return absl::OkStatus();
    case YAML::NodeType::Scalar:
      // "!" is the tag of a quoted scalar: a string whatever it spells.
      *out = node.Tag() == "!" ? json(node.Scalar()) : PlainScalar(node.Scalar());
      return absl::OkStatus();
    case YAML::NodeType::Sequence:
      *out = json::array();
      for (const YAML::Node& item : node) {
        json v;
        if (absl::Status s = YamlToJson(item, depth + 1, source, values, &v); !s.ok()) return s;
        out->push_back(std::move(v));
      }
      return absl::OkStatus();
    case YAML::NodeType::Map:
      *out = json::object();
      for (const auto& kv : node) {
        if (!kv.first.IsScalar()) {
          return absl::InvalidArgumentError(absl::StrCat(where(), ": a key must be a name"));
        }
        const std::string key = kv.first.Scalar();
        if (out->contains(key)) {
          return absl::InvalidArgumentError(
              absl::StrCat(where(), ": key \"", key, "\" is given twice"));
        }
        json v;
        if (absl::Status s = YamlToJson(kv.second, depth + 1, source, values, &v); !s.ok())
          return s;
        (*out)[key] = std::move(v);
      }
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(where(), ": not a YAML value"));
}

}  // namespace

absl::StatusOr<Schema> Schema::FromYaml(absl::string_view text, absl::string_view source) {
  const std::string src(source);
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::DeepRecursion& e) {  // its message says "bad file"
    return absl::InvalidArgumentError(absl::StrCat(src, " line ", e.mark.line + 1, ", column ",
                                                   e.mark.column + 1, ": nested deeper than ",
                                                   kMaxDepth, " levels"));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(src, ": not valid YAML at line ",
                                                   e.mark.line + 1, ", column ", e.mark.column + 1,
                                                   ": ", e.msg));
  }
  json j;
  try {
    int64_t values = 0;
    if (absl::Status s = YamlToJson(root, 0, src, &values, &j); !s.ok()) return s;
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(src, ": ", e.what()));
  }
  return features_internal::SchemaOfJson(j, source);
}

}  // namespace pstrain
