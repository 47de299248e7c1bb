// Internal to src/data: what every reader checks before it opens a file.
#pragma once

#include <filesystem>
#include <string>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace pstrain {

// NotFound for a missing file; InvalidArgument for a directory ("is a directory, not <kind>").
inline absl::Status CheckIsFile(const std::string& path, absl::string_view kind) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  }
  if (std::filesystem::is_directory(status)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory, not ", kind));
  }
  return absl::OkStatus();
}

}  // namespace pstrain
