#include "runtime/http_listener.h"

#include <sys/socket.h>

#include "absl/strings/str_cat.h"
#include "common/security.h"
#include "httplib.h"
#include "spdlog/spdlog.h"

namespace pstrain {
namespace {

// Whether the request carries `token` in its Authorization header or its query.
bool HasToken(const httplib::Request& req, const std::string& token) {
  const std::string header = req.get_header_value("Authorization");
  const std::string prefix = kTokenPrefix;
  if (header.rfind(prefix, 0) == 0 && TokenMatches(header.substr(prefix.size()), token)) {
    return true;
  }
  return req.has_param("token") && TokenMatches(req.get_param_value("token"), token);
}

// Headers of a request, all together, past which it gets 431; a single line over cpp-httplib's
// own limit (8 KiB) gets its 400 before the peer is known.
constexpr size_t kMaxHeaderBytes = 16 * 1024;

std::string Peer(const httplib::Request& req) {
  if (req.remote_addr.empty()) return "a peer whose request did not parse";
  return absl::StrCat(req.remote_addr, ":", req.remote_port);
}

// 405 for a method other than GET (and HEAD), 431 for too many header bytes; before routing,
// so neither reads a body.
httplib::Server::HandlerResponse Refuse(const httplib::Request& req, httplib::Response& res) {
  size_t header_bytes = 0;
  for (const auto& [name, value] : req.headers) header_bytes += name.size() + value.size() + 4;
  if (req.method != "GET" && req.method != "HEAD") {
    res.status = 405;
    res.set_header("Allow", "GET, HEAD");
    res.set_content(
        absl::StrCat("405 Method Not Allowed: ", req.method, " ", req.path, " (only GET)\n"),
        "text/plain; charset=utf-8");
  } else if (header_bytes > kMaxHeaderBytes) {
    res.status = 431;
    res.set_content(absl::StrCat("431 Request Header Fields Too Large: ", header_bytes,
                                 " bytes, over the limit of ", kMaxHeaderBytes, "\n"),
                    "text/plain; charset=utf-8");
  } else {
    return httplib::Server::HandlerResponse::Unhandled;
  }
  return httplib::Server::HandlerResponse::Handled;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpListener>> HttpListener::Bind(const std::string& host, int port,
                                                                 std::string token) {
  std::unique_ptr<HttpListener> l(new HttpListener);
  l->server_ = std::make_unique<httplib::Server>();
  l->token_ = std::move(token);
  // SO_REUSEADDR only: cpp-httplib's default also sets SO_REUSEPORT, which would let a second
  // listener share a port that is already taken.
  l->server_->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  l->server_->set_read_timeout(5, 0);
  l->server_->set_write_timeout(5, 0);
  l->server_->set_payload_max_length(64 * 1024);
  l->server_->set_pre_routing_handler(Refuse);
  l->server_->set_logger([](const httplib::Request& req, const httplib::Response& res) {
    if (res.status >= 400) {
      spdlog::warn("http {} {} from {}: {}", req.method, req.path, Peer(req), res.status);
    }
  });
  l->server_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (res.body.empty()) {
      res.set_content(
          absl::StrCat(res.status, res.status == 404 ? " Not Found: " : " ", req.path, "\n"),
          "text/plain; charset=utf-8");
    }
  });
  if (port == 0) {
    l->port_ = l->server_->bind_to_any_port(host);
  } else if (l->server_->bind_to_port(host, port)) {
    l->port_ = port;
  }
  if (l->port_ <= 0) {
    return absl::FailedPreconditionError(absl::StrCat("cannot listen for HTTP on ", host, ":", port,
                                                      " (port in use or address not local)"));
  }
  return l;
}

HttpListener::~HttpListener() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

void HttpListener::Handle(const std::string& path, bool open, HttpHandler handler) {
  server_->Get(path, [this, open, path, handler = std::move(handler)](const httplib::Request& req,
                                                                      httplib::Response& res) {
    if (!open && !token_.empty() && !HasToken(req, token_)) {
      spdlog::warn("http GET {} from {} refused: no valid job token", path, Peer(req));
      res.status = 401;
      res.set_header("WWW-Authenticate", "Bearer");
      res.set_content("401 Unauthorized: this page needs the job token (?token=...)\n",
                      "text/plain; charset=utf-8");
      return;
    }
    HttpRequest r;
    r.path = req.path;
    for (const auto& [k, v] : req.params) r.params.emplace(k, v);
    HttpResponse out = handler(r);
    res.status = out.status;
    res.set_content(std::move(out.body), out.content_type.c_str());
  });
}

void HttpListener::Serve() {
  thread_ = std::thread([this] { server_->listen_after_bind(); });
}

}  // namespace pstrain
