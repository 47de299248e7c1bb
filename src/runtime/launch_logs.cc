#include "runtime/launch_logs.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

namespace pstrain {
namespace {

constexpr off_t kTailBytes = 64 << 10;

}  // namespace

absl::StatusOr<TaskLogs> TaskLogs::Open(const std::string& dir) {
  if (dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        absl::StrCat(tmp != nullptr && *tmp ? tmp : "/tmp", "/pstrain-launch-XXXXXX");
    if (mkdtemp(pattern.data()) == nullptr) {
      return absl::UnavailableError(
          absl::StrCat("cannot create a log directory ", pattern, ": ", strerror(errno)));
    }
    return TaskLogs(pattern);
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--log_dir ", dir,
                     ": cannot create the directory: ", ec ? ec.message() : "not a directory"));
  }
  return TaskLogs(dir);
}

std::string TaskLogs::PathOf(const std::string& name) const {
  return absl::StrCat(dir_, "/", absl::StrReplaceAll(name, {{":", "-"}}), ".log");
}

absl::StatusOr<int> TaskLogs::Create(const std::string& name, bool truncate) const {
  const std::string path = PathOf(name);
  const int fd = open(path.c_str(),
                      O_WRONLY | O_CREAT | (truncate ? O_TRUNC : 0) | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot write the log of ", name, " at ", path, ": ", strerror(errno)));
  }
  return fd;
}

std::vector<std::string> LastLines(const std::string& path, int n) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  const off_t size = lseek(fd, 0, SEEK_END);
  const off_t from = std::max<off_t>(0, size - kTailBytes);
  std::string text(size > from ? size - from : 0, '\0');
  const ssize_t got = size > from ? pread(fd, text.data(), text.size(), from) : 0;
  close(fd);
  text.resize(std::max<ssize_t>(got, 0));
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  if (from > 0 && !lines.empty()) lines.erase(lines.begin());  // cut in the middle
  if (static_cast<int>(lines.size()) > n) lines.erase(lines.begin(), lines.end() - n);
  for (std::string& line : lines) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (const size_t cr = line.rfind('\r'); cr != std::string::npos) line.erase(0, cr + 1);
  }
  return lines;
}

}  // namespace pstrain
