// How a task's log lines look: spdlog's text, or one JSON object per line for log shippers.
// Internal to src/runtime and the pstrain command.
#pragma once

#include <string>

namespace pstrain {

// Sets the default logger's format: "text" (spdlog's own pattern) or "json": every line one
// object {"time", "level", "task", "logger", "message"}, the time in RFC 3339 UTC with
// milliseconds, `task` ("ps:0", "launch") the one given here. Any other format is refused with a
// warning and the current format kept. Call it before other threads log; the lines themselves
// may be logged from any thread (each sink formats and writes one line under its lock).
void SetLogFormat(const std::string& format, const std::string& task);

// The format SetLogFormat set last: "text" or "json".
const std::string& LogFormat();

// A task's last word on stderr when it fails: "pstrain <task>: error: <message>" in the text
// format, a JSON line of level "error" in the json format.
void PrintTaskError(const std::string& task, const std::string& message);

// The chief's progress line: as it is in the text format (the launcher shows it in place), a
// JSON line of level "info" and logger "progress" in the json format.
void PrintProgress(const std::string& task, const std::string& line);

}  // namespace pstrain
