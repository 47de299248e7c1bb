// The small HTTP listener of a task (--metrics_port): /metrics for Prometheus, /healthz, and on
// the chief the status page. Internal to src/runtime. Connections are runtime/http_connections.h's
// (capped per peer and in all, never a thread per connection); cpp-httplib parses and routes
// each request.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/http_connections.h"

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
  // peer. Unknown paths get 404, methods other than GET 405, oversized requests 4xx; `limits`
  // bound connections and the time a client may take.
  static absl::StatusOr<std::unique_ptr<HttpListener>> Bind(const std::string& host, int port,
                                                            std::string token,
                                                            HttpLimits limits = {});
  ~HttpListener();  // stops serving and joins the threads

  // Adds a GET route, before Serve. `open`: served without the token (/metrics, /healthz).
  // `handler` runs on the listener's threads, several requests at once, and must be thread-safe.
  void Handle(const std::string& path, bool open, HttpHandler handler);
  // Starts answering on threads of its own.
  void Serve();
  int port() const { return port_; }

 private:
  class Router;  // cpp-httplib's server, as a parser and router of requests in memory
  HttpListener();
  std::unique_ptr<Router> router_;
  std::string token_;
  int port_ = 0;
  std::unique_ptr<HttpConnections> connections_;  // last: its threads call router_
};

}  // namespace pstrain
