#include "runtime/status_page.h"

namespace pstrain {

void ServeStatusPage(HttpListener* listener, const JobMonitor* monitor) {}

}  // namespace pstrain
