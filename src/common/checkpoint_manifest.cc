#include "common/checkpoint_manifest.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/limits.h"
#include "common/tensor.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace pstrain {
namespace fs = std::filesystem;
namespace {

constexpr char kFormat[] = "pstrain-checkpoint";

}  // namespace

absl::Status WriteManifest(const std::string& dir, const Manifest& m) {
  nlohmann::json j;
  j["format"] = kFormat;
  j["format_version"] = kCheckpointFormatVersion;
  j["global_step"] = m.global_step;
  j["num_ps"] = m.num_ps;
  j["files"] = nlohmann::json::array();
  for (const auto& [name, f] : m.files) {
    j["files"].push_back({{"name", name},
                          {"bytes", f.bytes},
                          {"xxh3", absl::StrCat(absl::Hex(f.checksum, absl::kZeroPad16))}});
  }
  j["variables"] = nlohmann::json::array();
  for (const auto& [name, shape] : m.signature.variables) {
    j["variables"].push_back({{"name", name}, {"shape", shape}});
  }
  j["tables"] = nlohmann::json::array();
  for (const auto& [name, dim] : m.signature.tables) {
    j["tables"].push_back({{"name", name}, {"dim", dim}});
  }
  if (!m.ledger.is_null()) j["ledger"] = m.ledger;
  if (!m.signature.features.is_null()) j["features"] = m.signature.features;
  return WriteFileAtomically(dir + "/" + kManifestName, j.dump(2) + "\n");
}

namespace {

// The manifest's fields, each checked before anything is sized by it: a bad one is DataLoss
// naming the file, the field and its value.
class Fields {
 public:
  explicit Fields(std::string path) : path_(std::move(path)) {}

  absl::Status Bad(const std::string& field, const nlohmann::json& value,
                   const std::string& why) const {
    std::string shown = value.dump();
    if (shown.size() > kShownBytes) shown = shown.substr(0, kShownBytes) + "...";
    return absl::DataLossError(
        absl::StrCat(path_, ": field \"", field, "\" is ", shown, ": ", why));
  }
  // j[key], which must exist.
  absl::StatusOr<const nlohmann::json*> At(const nlohmann::json& j, const std::string& where,
                                           const char* key) const {
    if (!j.is_object() || !j.contains(key)) {
      return absl::DataLossError(absl::StrCat(path_, ": field \"", where, "\" is missing"));
    }
    return &j[key];
  }
  // An integer in [lo, hi].
  absl::StatusOr<int64_t> Int(const nlohmann::json& j, const std::string& where, const char* key,
                              int64_t lo, int64_t hi) const {
    absl::StatusOr<const nlohmann::json*> v = At(j, where, key);
    if (!v.ok()) return v.status();
    if (!(*v)->is_number_integer()) return Bad(where, **v, "not an integer");
    if ((*v)->is_number_unsigned() && (*v)->get<uint64_t>() > static_cast<uint64_t>(hi)) {
      return Bad(where, **v, absl::StrCat("over ", hi));
    }
    const int64_t n = (*v)->get<int64_t>();
    if (n < lo || n > hi) return Bad(where, **v, absl::StrCat("not in [", lo, ", ", hi, "]"));
    return n;
  }
  // A name of 1 to kMaxNameBytes bytes.
  absl::StatusOr<std::string> Name(const nlohmann::json& j, const std::string& where) const {
    absl::StatusOr<const nlohmann::json*> v = At(j, where, "name");
    if (!v.ok()) return v.status();
    if (!(*v)->is_string()) return Bad(where, **v, "not a string");
    std::string name = (*v)->get<std::string>();
    if (name.empty() || name.size() > static_cast<size_t>(kMaxNameBytes)) {
      return Bad(where, **v, absl::StrCat("a name is 1 to ", kMaxNameBytes, " bytes"));
    }
    return name;
  }
  // An array of at most `max` items.
  absl::StatusOr<const nlohmann::json*> Array(const nlohmann::json& j, const char* key,
                                              int64_t max) const {
    absl::StatusOr<const nlohmann::json*> v = At(j, key, key);
    if (!v.ok()) return v.status();
    if (!(*v)->is_array()) return Bad(key, **v, "not an array");
    if (static_cast<int64_t>((*v)->size()) > max) {
      return Bad(key, absl::StrCat("[", (*v)->size(), " items]"), absl::StrCat("over ", max));
    }
    return *v;
  }

 private:
  static constexpr size_t kShownBytes = 200;
  const std::string path_;
};

// A variable's shape: at most kMaxTensorRank dimensions, none negative, at most
// kMaxVariableBytes of floats.
absl::StatusOr<std::vector<int64_t>> Shape(const Fields& f, const nlohmann::json& v,
                                           const std::string& where) {
  absl::StatusOr<const nlohmann::json*> shape = f.At(v, where, "shape");
  if (!shape.ok()) return shape.status();
  const nlohmann::json& j = **shape;
  if (!j.is_array() || j.size() > static_cast<size_t>(kMaxTensorRank)) {
    return f.Bad(where, j,
                 absl::StrCat("a shape is an array of at most ", kMaxTensorRank, " dimensions"));
  }
  std::vector<int64_t> dims;
  for (const nlohmann::json& d : j) {
    if (!d.is_number_integer() || (d.is_number_unsigned() && d.get<uint64_t>() > INT64_MAX) ||
        d.get<int64_t>() < 0) {
      return f.Bad(where, j, "a dimension is not a non-negative integer");
    }
    dims.push_back(d.get<int64_t>());
  }
  const std::optional<int64_t> elements = CheckedNumElements(dims);
  const std::optional<int64_t> bytes = elements ? CheckedMul(*elements, 4) : std::nullopt;
  if (!bytes || *bytes > kMaxVariableBytes) {
    return f.Bad(
        where, j,
        absl::StrCat("over the limit of ", HumanBytes(kMaxVariableBytes), " per variable"));
  }
  return dims;
}

// The manifest's fields into `m`; DataLoss naming the file and the field for a bad one.
absl::Status ParseManifest(const Fields& f, const nlohmann::json& j, Manifest* m) {
  absl::StatusOr<int64_t> step = f.Int(j, "global_step", "global_step", 0, INT64_MAX);
  if (!step.ok()) return step.status();
  m->global_step = *step;
  absl::StatusOr<int64_t> num_ps = f.Int(j, "num_ps", "num_ps", 1, kMaxTasks);
  if (!num_ps.ok()) return num_ps.status();
  m->num_ps = static_cast<int>(*num_ps);
  absl::StatusOr<const nlohmann::json*> files = f.Array(j, "files", m->num_ps);
  if (!files.ok()) return files.status();
  if (static_cast<int>((*files)->size()) != m->num_ps) {
    return f.Bad("files", absl::StrCat("[", (*files)->size(), " items]"),
                 absl::StrCat("one per PS, and num_ps is ", m->num_ps));
  }
  for (size_t i = 0; i < (*files)->size(); ++i) {
    const nlohmann::json& file = (**files)[i];
    const std::string where = absl::StrCat("files[", i, "]");
    absl::StatusOr<std::string> name = f.Name(file, where + ".name");
    if (!name.ok()) return name.status();
    // Only the part this PS wrote, beside the manifest: no path leads out of the directory.
    const std::string want = absl::StrCat("ps-", i, ".ckpt");
    if (*name != want) {
      return f.Bad(
          where + ".name", *name,
          absl::StrCat("part ", i, " is the file ", want, " in the checkpoint's directory"));
    }
    WrittenFile w;
    absl::StatusOr<int64_t> bytes = f.Int(file, where + ".bytes", "bytes", 0, INT64_MAX);
    if (!bytes.ok()) return bytes.status();
    w.bytes = *bytes;
    absl::StatusOr<const nlohmann::json*> xxh3 = f.At(file, where + ".xxh3", "xxh3");
    if (!xxh3.ok()) return xxh3.status();
    if (!(*xxh3)->is_string() || !absl::SimpleHexAtoi((*xxh3)->get<std::string>(), &w.checksum)) {
      return f.Bad(where + ".xxh3", **xxh3, "not a 64-bit hex checksum");
    }
    m->files.emplace_back(*name, w);
  }
  absl::StatusOr<const nlohmann::json*> variables =
      f.Array(j, "variables", kMaxCheckpointVariables);
  if (!variables.ok()) return variables.status();
  absl::flat_hash_set<std::string> seen;
  for (size_t i = 0; i < (*variables)->size(); ++i) {
    const nlohmann::json& v = (**variables)[i];
    const std::string where = absl::StrCat("variables[", i, "]");
    absl::StatusOr<std::string> name = f.Name(v, where + ".name");
    if (!name.ok()) return name.status();
    if (!seen.insert(*name).second) return f.Bad(where + ".name", *name, "listed twice");
    absl::StatusOr<std::vector<int64_t>> shape = Shape(f, v, where + ".shape");
    if (!shape.ok()) return shape.status();
    m->signature.variables.emplace_back(*name, *std::move(shape));
  }
  absl::StatusOr<const nlohmann::json*> tables = f.Array(j, "tables", kMaxTables);
  if (!tables.ok()) return tables.status();
  seen.clear();
  for (size_t i = 0; i < (*tables)->size(); ++i) {
    const nlohmann::json& t = (**tables)[i];
    const std::string where = absl::StrCat("tables[", i, "]");
    absl::StatusOr<std::string> name = f.Name(t, where + ".name");
    if (!name.ok()) return name.status();
    if (!seen.insert(*name).second) return f.Bad(where + ".name", *name, "listed twice");
    absl::StatusOr<int64_t> dim = f.Int(t, where + ".dim", "dim", 1, kMaxTableDim);
    if (!dim.ok()) return dim.status();
    m->signature.tables.emplace_back(*name, static_cast<int>(*dim));
  }
  if (j.contains("ledger")) {
    if (!j["ledger"].is_object()) return f.Bad("ledger", j["ledger"], "not an object");
    m->ledger = j["ledger"];
  }
  if (j.contains("features")) {
    const nlohmann::json& features = j["features"];
    if (!features.is_object() || !features.contains("schema") || !features.contains("stats") ||
        !features["schema"].is_object() || !features["stats"].is_object()) {
      return f.Bad("features", features, "not an object of a schema and its statistics");
    }
    m->signature.features = features;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Manifest> ReadManifest(const std::string& dir) {
  const std::string path = dir + "/" + kManifestName;
  absl::StatusOr<std::string> text = ReadCheckpointFile(path, kMaxManifestBytes);
  if (absl::IsNotFound(text.status())) {
    return absl::NotFoundError(absl::StrCat(path, " does not exist"));
  }
  if (!text.ok()) return text.status();
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::DataLossError(absl::StrCat(path, ": not valid JSON"));
  if (!j.is_object() || !j.contains("format") || j["format"] != kFormat ||
      !j.contains("format_version") || !j["format_version"].is_number_unsigned() ||
      j["format_version"].get<uint64_t>() < kOldestCheckpointFormatVersion ||
      j["format_version"].get<uint64_t>() > kCheckpointFormatVersion) {
    return absl::DataLossError(absl::StrCat(path, ": not a pstrain checkpoint of format ",
                                            kOldestCheckpointFormatVersion, " to ",
                                            kCheckpointFormatVersion));
  }
  Manifest m;
  if (absl::Status s = ParseManifest(Fields(path), j, &m); !s.ok()) return s;
  return m;
}

namespace {

// The step of a real directory (a symbolic link could lead out of the root) named
// ckpt-<digits><suffix>, or nullopt.
std::optional<int64_t> CheckpointStep(const fs::directory_entry& e, absl::string_view suffix) {
  std::error_code ec;
  if (!e.is_directory(ec) || e.is_symlink(ec)) return std::nullopt;
  const std::string filename = e.path().filename().string();  // outlives `name`, a view of it
  absl::string_view name = filename;
  if (!absl::ConsumePrefix(&name, "ckpt-") || !absl::ConsumeSuffix(&name, suffix)) {
    return std::nullopt;
  }
  int64_t step = 0;
  if (name.empty() || name.find_first_not_of("0123456789") != absl::string_view::npos ||
      !absl::SimpleAtoi(name, &step)) {
    return std::nullopt;
  }
  return step;
}

}  // namespace

std::vector<std::pair<int64_t, std::string>> ListCheckpoints(const std::string& root) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    if (std::optional<int64_t> step = CheckpointStep(e, ""); step.has_value()) {
      out.emplace_back(*step, e.path().string());
    }
  }
  std::sort(out.rbegin(), out.rend());
  return out;
}

void RemoveUnfinishedRewrites(const std::string& root) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    if (!CheckpointStep(e, kRewriteSuffix).has_value()) continue;
    std::error_code removed;
    fs::remove_all(e.path(), removed);
    if (removed) spdlog::warn("could not remove {}: {}", e.path().string(), removed.message());
  }
}

void RemoveOldCheckpoints(const std::string& root, int keep) {
  int kept = 0;
  for (const auto& [step, dir] : ListCheckpoints(root)) {
    std::error_code ec;
    if (fs::exists(dir + "/" + kManifestName, ec) && kept < keep) {
      ++kept;
      continue;
    }
    fs::remove_all(dir, ec);
    if (ec) spdlog::warn("could not remove the old checkpoint {}: {}", dir, ec.message());
  }
}

}  // namespace pstrain
