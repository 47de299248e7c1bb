#include "master/checkpoint_manifest.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace pstrain {
namespace fs = std::filesystem;
namespace {

constexpr char kFormat[] = "pstrain-checkpoint";
constexpr char kManifest[] = "manifest.json";

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
  return WriteFileAtomically(dir + "/" + kManifest, j.dump(2) + "\n");
}

absl::StatusOr<Manifest> ReadManifest(const std::string& dir) {
  const std::string path = dir + "/" + kManifest;
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, " does not exist"));
  std::stringstream text;
  text << in.rdbuf();
  Manifest m;
  try {
    const nlohmann::json j = nlohmann::json::parse(text.str());
    const nlohmann::json& version = j.at("format_version");
    if (j.at("format") != kFormat || !version.is_number_unsigned() ||
        version.get<uint32_t>() < kOldestCheckpointFormatVersion ||
        version.get<uint32_t>() > kCheckpointFormatVersion) {
      return absl::DataLossError(absl::StrCat(path, ": not a pstrain checkpoint of format ",
                                              kOldestCheckpointFormatVersion, " to ",
                                              kCheckpointFormatVersion));
    }
    m.global_step = j.at("global_step");
    m.num_ps = j.at("num_ps");
    for (const auto& f : j.at("files")) {
      WrittenFile w;
      w.bytes = f.at("bytes");
      if (!absl::SimpleHexAtoi(f.at("xxh3").get<std::string>(), &w.checksum)) {
        return absl::DataLossError(absl::StrCat(path, ": a bad xxh3 of ", f.dump()));
      }
      m.files.emplace_back(f.at("name").get<std::string>(), w);
    }
    for (const auto& v : j.at("variables")) {
      m.signature.variables.emplace_back(v.at("name").get<std::string>(),
                                         v.at("shape").get<std::vector<int64_t>>());
    }
    for (const auto& t : j.at("tables")) {
      m.signature.tables.emplace_back(t.at("name").get<std::string>(), t.at("dim").get<int>());
    }
    if (j.contains("ledger")) {
      if (!j["ledger"].is_object()) {
        return absl::DataLossError(absl::StrCat(path, ": \"ledger\" is not an object"));
      }
      m.ledger = j["ledger"];
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat(path, ": ", e.what()));
  }
  if (m.num_ps < 1 || static_cast<int>(m.files.size()) != m.num_ps) {
    return absl::DataLossError(
        absl::StrCat(path, ": ", m.files.size(), " files for ", m.num_ps, " PS"));
  }
  return m;
}

std::vector<std::pair<int64_t, std::string>> ListCheckpoints(const std::string& root) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    int64_t step = 0;
    if (e.is_directory() && name.rfind("ckpt-", 0) == 0 &&
        absl::SimpleAtoi(name.substr(5), &step)) {
      out.emplace_back(step, e.path().string());
    }
  }
  std::sort(out.rbegin(), out.rend());
  return out;
}

void RemoveOldCheckpoints(const std::string& root, int keep) {
  int kept = 0;
  for (const auto& [step, dir] : ListCheckpoints(root)) {
    std::error_code ec;
    if (fs::exists(dir + "/" + kManifest, ec) && kept < keep) {
      ++kept;
      continue;
    }
    fs::remove_all(dir, ec);
    if (ec) spdlog::warn("could not remove the old checkpoint {}: {}", dir, ec.message());
  }
}

}  // namespace pstrain
