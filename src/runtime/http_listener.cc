#include "runtime/http_listener.h"

#include <algorithm>
#include <cstring>
#include <string_view>

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

// A request's bytes for cpp-httplib to parse, and its response's bytes: the connection layer
// has read the head already and writes the response itself, so no socket is touched here. A
// body is not there (read as the end of the stream): the listener takes none.
class MemoryStream : public httplib::Stream {
 public:
  MemoryStream(std::string_view in, const HttpPeer& peer, std::string* out)
      : in_(in), peer_(peer), out_(out) {}
  bool is_readable() const override { return pos_ < in_.size(); }
  bool is_writable() const override { return true; }
  ssize_t read(char* ptr, size_t size) override {
    size = std::min(size, in_.size() - pos_);
    std::memcpy(ptr, in_.data() + pos_, size);
    pos_ += size;
    return static_cast<ssize_t>(size);
  }
  ssize_t write(const char* ptr, size_t size) override {
    out_->append(ptr, size);
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = peer_.ip;
    port = peer_.port;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = peer_.local_ip;
    port = peer_.local_port;
  }
  socket_t socket() const override { return peer_.fd; }

 private:
  const std::string_view in_;
  const HttpPeer& peer_;
  std::string* const out_;
  size_t pos_ = 0;
};

}  // namespace

class HttpListener::Router : public httplib::Server {
 public:
  // One request of `head`, answered into `*response`; whether the connection may stay open.
  bool Answer(std::string_view head, const HttpPeer& peer, bool last, std::string* response) {
    MemoryStream stream(head, peer, response);
    bool closed = false;
    return process_request(stream, last, closed, nullptr) && !closed;
  }
};

HttpListener::HttpListener() = default;

absl::StatusOr<std::unique_ptr<HttpListener>> HttpListener::Bind(const std::string& host, int port,
                                                                 std::string token,
                                                                 HttpLimits limits) {
  std::unique_ptr<HttpListener> l(new HttpListener);
  l->router_ = std::make_unique<Router>();
  l->token_ = std::move(token);
  // What the Keep-Alive header of a response announces.
  l->router_->set_keep_alive_timeout(absl::ToInt64Seconds(limits.head_timeout));
  l->router_->set_keep_alive_max_count(limits.max_requests_per_connection);
  l->router_->set_pre_routing_handler(Refuse);
  l->router_->set_logger([](const httplib::Request& req, const httplib::Response& res) {
    if (res.status >= 400) {
      spdlog::warn("http {} {} from {}: {}", req.method, req.path, Peer(req), res.status);
    }
  });
  l->router_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (res.body.empty()) {
      res.set_content(
          absl::StrCat(res.status, res.status == 404 ? " Not Found: " : " ", req.path, "\n"),
          "text/plain; charset=utf-8");
    }
  });
  absl::StatusOr<int> fd = ListenTcp(host, port, &l->port_);
  if (!fd.ok()) return fd.status();
  Router* router = l->router_.get();
  l->connections_ = std::make_unique<HttpConnections>(
      *fd, limits,
      [router](std::string_view head, const HttpPeer& peer, bool last, std::string* response) {
        return router->Answer(head, peer, last, response);
      });
  return l;
}

HttpListener::~HttpListener() {
  connections_.reset();  // joins the threads that use router_
}

void HttpListener::Handle(const std::string& path, bool open, HttpHandler handler) {
  router_->Get(path, [this, open, path, handler = std::move(handler)](const httplib::Request& req,
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

void HttpListener::Serve() { connections_->Start(); }

}  // namespace pstrain
