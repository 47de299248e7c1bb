// How a task's log lines look: spdlog's text, or one JSON object per line for log shippers.
// Internal to src/runtime and the pstrain command.
#pragma once

#include <string>

namespace pstrain {

// Sets the default logger's format: "text" or "json"; `task` ("ps:0", "launch") is named in
// every JSON line.
void SetLogFormat(const std::string& format, const std::string& task);

}  // namespace pstrain
