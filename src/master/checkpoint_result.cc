// The saved result of a finished job, beside its checkpoints (master/checkpoints.h).
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "master/checkpoints.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace pstrain {
namespace {

constexpr char kResultFile[] = "result.json";

std::string ResultPath(const std::string& dir) { return dir + "/" + kResultFile; }

}  // namespace

absl::Status SaveJobResult(const std::string& dir, const std::string& json) {
  return WriteFileAtomically(ResultPath(dir), json + "\n");
}

std::string SavedJobResult(const std::string& dir) {
  const std::string path = ResultPath(dir);
  std::ifstream in(path);
  if (!in) return "";
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    spdlog::warn("{} is not a job's result (not a JSON object): ignored", path);
    return "";
  }
  return j.dump();
}

void RemoveJobResult(const std::string& dir) {
  std::error_code ec;
  std::filesystem::remove(ResultPath(dir), ec);
  if (ec) spdlog::warn("cannot remove {}: {}", ResultPath(dir), ec.message());
}

}  // namespace pstrain
