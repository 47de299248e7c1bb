// The small HTTP listener of a task (--metrics_port): /metrics for Prometheus, /healthz, and on
// the chief the status page. Internal to src/runtime; carried by cpp-httplib.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace httplib {
class Server;
}

namespace pstrain {

struct HttpRequest {
  std::string path;
  std::map<std::string, std::string> params;  // the query string's, first value of each
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

class HttpListener {
 public:
  // Binds host:port (0 picks a free port); FailedPrecondition naming the address when it cannot
  // (a port in use is an error, not a second listener). Requests are refused until Serve().
  // `token`, if not empty, is required on every path not added as open: as "Authorization:
  // Bearer <token>" or "?token=<token>"; without it the answer is 401 and a log line names the
  // peer. Unknown paths get 404, methods other than GET 405, oversized requests 4xx.
  static absl::StatusOr<std::unique_ptr<HttpListener>> Bind(const std::string& host, int port,
                                                            std::string token);
  ~HttpListener();  // stops serving and joins the thread

  // Adds a GET route, before Serve. `open`: served without the token (/metrics, /healthz).
  // `handler` runs on the listener's threads, one request at a time per connection, and must be
  // thread-safe.
  void Handle(const std::string& path, bool open, HttpHandler handler);
  // Starts answering on a thread of its own.
  void Serve();
  int port() const { return port_; }

 private:
  HttpListener() = default;
  std::unique_ptr<httplib::Server> server_;
  std::string token_;
  int port_ = 0;
  std::thread thread_;
};

}  // namespace pstrain
