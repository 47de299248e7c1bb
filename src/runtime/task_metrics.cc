#include "runtime/task_metrics.h"

namespace pstrain {

void ServeMetrics(HttpListener* listener, const MetricsSource& source) {
  listener->Handle("/metrics", /*open=*/true, [](const HttpRequest&) {
    HttpResponse r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    return r;
  });
}

}  // namespace pstrain
