#include "runtime/log_format.h"

#include <time.h>

#include <chrono>
#include <cstdio>
#include <memory>

#include "nlohmann/json.hpp"
#include "spdlog/formatter.h"
#include "spdlog/pattern_formatter.h"
#include "spdlog/spdlog.h"

namespace pstrain {
namespace {

std::string& CurrentFormat() {
  static std::string* format = new std::string("text");
  return *format;
}

// "2026-12-01T16:06:22.123Z".
std::string Rfc3339Millis(std::chrono::system_clock::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch());
  const time_t secs = static_cast<time_t>(ms.count() / 1000);
  const int millis = static_cast<int>(ms.count() % 1000);
  struct tm utc;
  gmtime_r(&secs, &utc);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, millis);
  return buf;
}

// One line: the object, compact, with invalid UTF-8 replaced rather than thrown on.
std::string JsonLine(std::chrono::system_clock::time_point time, std::string_view level,
                     const std::string& task, std::string_view logger, std::string_view message) {
  nlohmann::ordered_json line;
  line["time"] = Rfc3339Millis(time);
  line["level"] = level;
  line["task"] = task;
  line["logger"] = logger;
  line["message"] = message;
  return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

// Formats each message as one JSON line. A sink calls it under its own lock; it keeps no state
// but the task's name, so every clone is independent. It sets no color range, so a color sink
// writes the line as it is.
class JsonFormatter : public spdlog::formatter {
 public:
  explicit JsonFormatter(std::string task) : task_(std::move(task)) {}

  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const spdlog::string_view_t level = spdlog::level::to_string_view(msg.level);
    const std::string line =
        JsonLine(msg.time, std::string_view(level.data(), level.size()), task_,
                 std::string_view(msg.logger_name.data(), msg.logger_name.size()),
                 std::string_view(msg.payload.data(), msg.payload.size()));
    dest.append(line.data(), line.data() + line.size());
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>(task_);
  }

 private:
  const std::string task_;
};

}  // namespace

void SetLogFormat(const std::string& format, const std::string& task) {
  if (format == "json") {
    spdlog::set_formatter(std::make_unique<JsonFormatter>(task));
    CurrentFormat() = format;
  } else if (format == "text") {
    spdlog::set_formatter(std::make_unique<spdlog::pattern_formatter>());
    CurrentFormat() = format;
  } else {
    spdlog::warn("unknown log format \"{}\" (text or json): keeping {}", format, CurrentFormat());
  }
}

const std::string& LogFormat() { return CurrentFormat(); }

void PrintTaskError(const std::string& task, const std::string& message) {
  if (CurrentFormat() == "json") {
    const std::string logger =
        spdlog::default_logger() != nullptr ? spdlog::default_logger()->name() : "";
    std::fputs(JsonLine(std::chrono::system_clock::now(), "error", task, logger, message).c_str(),
               stderr);
  } else {
    std::fprintf(stderr, "pstrain %s: error: %s\n", task.c_str(), message.c_str());
  }
  std::fflush(stderr);
}

void PrintProgress(const std::string& task, const std::string& line) {
  if (CurrentFormat() == "json") {
    std::fputs(JsonLine(std::chrono::system_clock::now(), "info", task, "progress", line).c_str(),
               stderr);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
}

}  // namespace pstrain
