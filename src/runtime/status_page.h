// The chief's live status page: `/` (the page, its script and style embedded in the binary) and
// `/api/status` (the JobStatus as JSON, which the page polls). Internal to src/runtime.
#pragma once

#include <string>

#include "master/master.h"
#include "runtime/http_listener.h"

namespace pstrain {

// The JSON of /api/status (fields as in docs/status_page.md).
std::string StatusJson(const JobStatus& status);

// The page: HTML with its style and script inline (nothing fetched but /api/status).
const char* StatusPageHtml();

// Adds / and /api/status to `listener`, both behind the job token. `monitor` must outlive the
// listener's serving.
void ServeStatusPage(HttpListener* listener, const JobMonitor* monitor);

}  // namespace pstrain
