// TcpServer (tcp.h): one thread accepts; each connection has a thread of its own that reads a
// request, hands it to the DataHandler, waits for its outcome and writes the answer. A client
// opens as many connections as it has calls in flight, so a call the PS holds (a sync push, a
// pull waiting for its version) holds only its own connection.
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "spdlog/spdlog.h"
#include "transport/buffer_pool.h"
#include "transport/tcp.h"
#include "transport/tcp_socket.h"
#include "transport/tcp_wire.h"
#include "transport/ucx_call.h"

namespace pstrain {
namespace {

// One request as read from its connection: its head, and a push's gradients in `data`.
struct Request {
  WireRequest wire;
  std::string head;  // a hello's data, or the serialized PullRequest or PushRequest
  PullRequest pull;
  PushRequest push;
  BufferPool::Buffer data;
  std::vector<ConstBytes> grads;  // into `data`
  bool refused = false;           // answered already: read whole, and not to be handed on
};

class TcpServerImpl final : public TcpServer {
 public:
  TcpServerImpl(DataHandler* handler, int listen_fd, int port)
      : handler_(handler), listen_fd_(listen_fd), port_(port) {
    acceptor_ = std::thread([this] { Accept(); });
  }
  ~TcpServerImpl() override { Stop(); }
  int port() const override { return port_; }
  void Stop() override;

 private:
  void Accept();
  void Serve(TcpSocket* socket);
  // Reads one request: the connection's hello (`hello`: all of it within kTcpHelloTimeout), or
  // a pull or push (waited for without end, then all of it within kTcpFrameTimeout). An error
  // means the connection is done (the caller logs why); a refusal the client should hear is
  // answered here first, and nothing past a refused part is read.
  absl::Status Read(TcpSocket* socket, bool hello, Request* req);
  // Checks a push's head against its `bytes` of gradients before they are read: each bounded
  // by what its variable holds, and the sizes adding up.
  absl::Status CheckGradients(uint64_t bytes, Request* req);
  absl::Status Push(TcpSocket* socket, Request& req);
  absl::Status Pull(TcpSocket* socket, const Request& req);
  // Writes a response: status, head (a serialized PushResponse or PullResponse) and `tensors`.
  absl::Status Answer(TcpSocket* socket, uint64_t id, const absl::Status& status,
                      const std::string& head, const std::vector<iovec>& tensors);

  DataHandler* const handler_;
  const int listen_fd_;
  const int port_;
  std::thread acceptor_;
  std::atomic<bool> stopped_{false};
  std::atomic<int> running_{0};
  std::atomic<int64_t> accepted_{0}, served_{0};  // connections said hello; requests answered
  absl::Mutex mu_;
  absl::flat_hash_set<TcpSocket*> conns_ ABSL_GUARDED_BY(mu_);
  int64_t refused_ ABSL_GUARDED_BY(mu_) = 0;
};

void TcpServerImpl::Stop() {
  if (stopped_.exchange(true)) return;
  shutdown(listen_fd_, SHUT_RDWR);  // wakes accept
  if (acceptor_.joinable()) acceptor_.join();
  close(listen_fd_);
  {
    absl::MutexLock lock(&mu_);
    for (TcpSocket* s : conns_) s->Shutdown();
    mu_.Await(absl::Condition(
        +[](absl::flat_hash_set<TcpSocket*>* c) { return c->empty(); }, &conns_));
  }
  // A connection's thread touches this object last to count itself out.
  while (running_ > 0) absl::SleepFor(absl::Milliseconds(1));
  spdlog::info("TCP data plane on port {}: served {} pulls and pushes over {} connections", port_,
               served_.load(), accepted_.load());
}

void TcpServerImpl::Accept() {
  while (!stopped_) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (stopped_) return;
      if (errno == EINTR || errno == ECONNABORTED) continue;
      spdlog::warn("TCP data plane: accept: {}", std::strerror(errno));
      absl::SleepFor(absl::Milliseconds(100));  // out of descriptors: let connections end
      continue;
    }
    auto socket = std::make_unique<TcpSocket>(fd);
    absl::MutexLock lock(&mu_);
    if (static_cast<int>(conns_.size()) >= kMaxTcpConnections) {
      if (refused_++ % 1000 == 0) {
        spdlog::warn(
            "TCP data plane: refused a connection from {}: {} are open already (the most "
            "a PS serves; {} refused so far)",
            socket->PeerName(), conns_.size(), refused_);
      }
      continue;  // closed as it goes out of scope
    }
    TcpSocket* raw = socket.get();
    conns_.insert(raw);
    ++running_;
    try {
      std::thread([this, owned = std::move(socket)] {
        Serve(owned.get());
        {
          absl::MutexLock lock(&mu_);
          conns_.erase(owned.get());
        }
        --running_;
      }).detach();
    } catch (const std::system_error& e) {  // no thread to be had: this connection is closed
      spdlog::warn("TCP data plane: cannot serve a connection: {}", e.what());
      conns_.erase(raw);
      --running_;
    }
  }
}

void TcpServerImpl::Serve(TcpSocket* socket) {
  const std::string peer = socket->PeerName();
  Request req;
  absl::Status s = Read(socket, /*hello=*/true, &req);
  if (s.ok() && req.head != kTcpHello) {
    s = absl::InvalidArgumentError("a hello of another protocol or version");
    (void)Answer(socket, req.wire.id, s, "", {});
  } else if (s.ok()) {
    s = Answer(socket, req.wire.id, absl::OkStatus(), "", {});
    ++accepted_;
  }
  while (s.ok() && !stopped_) {
    s = Read(socket, /*hello=*/false, &req);
    if (!s.ok()) break;
    if (req.head.capacity() > (1 << 20)) req.head = std::string();  // not kept between requests
    if (req.refused) continue;
    s = static_cast<WireMethod>(req.wire.method) == WireMethod::kPush ? Push(socket, req)
                                                                      : Pull(socket, req);
  }
  if (!stopped_ && !absl::IsUnavailable(s)) {  // Unavailable: the client went away
    spdlog::warn("TCP data plane: closed the connection from {}: {}", peer, s.ToString());
  }
}

absl::Status TcpServerImpl::Read(TcpSocket* socket, bool hello, Request* req) {
  TcpFrame frame;
  const absl::Time hello_by = absl::Now() + kTcpHelloTimeout;
  absl::Status s =
      socket->ReadFull(&frame, 1, {.deadline = hello ? hello_by : absl::InfiniteFuture()});
  if (!s.ok()) return s;
  // The hello whole by its time; a later frame's rest while its bytes keep moving.
  const TcpWait rest =
      hello ? TcpWait{.deadline = hello_by}
            : TcpWait{.deadline = absl::Now() + kTcpFrameTimeout, .idle = kTcpFrameTimeout};
  s = socket->ReadFull(reinterpret_cast<char*>(&frame) + 1, sizeof(frame) - 1, rest);
  if (!s.ok()) return s;
  if (frame.magic != kTcpMagic || frame.header_bytes > kMaxTcpHeaderBytes ||
      frame.header_bytes < sizeof(WireRequest)) {
    return absl::InvalidArgumentError(absl::StrCat("not a pstrain TCP frame (magic ", frame.magic,
                                                   ", a header of ", frame.header_bytes,
                                                   " bytes)"));
  }
  std::string header(frame.header_bytes, '\0');
  if (s = socket->ReadFull(header.data(), header.size(), rest); !s.ok()) return s;
  // The token and every size, before anything of the data is read or allocated.
  s = CheckRequest(header.data(), header.size(), frame.data_bytes, &req->wire);
  const auto method = static_cast<WireMethod>(req->wire.method);
  if (s.ok() && hello && method != WireMethod::kHello) {
    s = absl::FailedPreconditionError("a request before the connection's hello");
  } else if (s.ok() && !hello && method == WireMethod::kHello) {
    s = absl::InvalidArgumentError("a second hello on one connection");
  }
  if (!s.ok()) {
    (void)Answer(socket, req->wire.id, s, "", {});
    return s;
  }
  req->head.resize(req->wire.head_bytes);
  if (s = socket->ReadFull(req->head.data(), req->head.size(), rest); !s.ok()) return s;
  req->refused = false;
  if (method == WireMethod::kHello) return absl::OkStatus();
  const uint64_t bytes = frame.data_bytes - req->wire.head_bytes;  // 0 for a pull (CheckRequest)
  if (method == WireMethod::kPull) {
    s = req->pull.ParseFromString(req->head)
            ? absl::OkStatus()
            : absl::InvalidArgumentError("a data-plane Pull whose PullRequest does not parse");
  } else {
    s = CheckGradients(bytes, req);
  }
  if (s.ok() && bytes > 0) {
    try {
      req->data = BufferPool::Shared().Get(static_cast<int64_t>(bytes));
    } catch (const std::bad_alloc&) {
      s = absl::ResourceExhaustedError(
          absl::StrCat("the PS cannot allocate ", bytes, " bytes for a push"));
    }
  }
  if (!s.ok()) {
    // A refusal of an authenticated request whose size is within the limits: answered at once,
    // then its bytes are read past (not kept), so the connection serves on.
    if (absl::Status w = Answer(socket, req->wire.id, s, "", {}); !w.ok()) return w;
    char scratch[64 << 10];
    for (uint64_t left = bytes; left > 0;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(left, sizeof(scratch)));
      if (absl::Status r = socket->ReadFull(scratch, n, rest); !r.ok()) return r;
      left -= n;
    }
    req->refused = true;
    return absl::OkStatus();
  }
  if (method == WireMethod::kPull) return absl::OkStatus();
  if (bytes > 0) {
    if (s = socket->ReadFull(req->data.data(), bytes, rest); !s.ok()) return s;
  }
  return SplitTensorBytes(req->push, static_cast<const char*>(req->data.data()), bytes,
                          &req->grads);
}

absl::Status TcpServerImpl::CheckGradients(uint64_t bytes, Request* req) {
  if (!req->push.ParseFromString(req->head)) {
    return absl::InvalidArgumentError("a data-plane Push whose PushRequest does not parse");
  }
  // As the gRPC streams do: each gradient's claim bounded by what its variable holds, so that a
  // head cannot make the PS allocate more than its own variables.
  absl::flat_hash_set<std::string> seen;
  uint64_t claimed = 0;
  for (const Gradient& g : req->push.gradients()) {
    if (!seen.insert(g.name()).second) {
      return absl::InvalidArgumentError(absl::StrCat("gradient \"", g.name(), "\" is repeated"));
    }
    absl::StatusOr<int64_t> n = TensorBytes(g.gradient(), g.name());
    if (!n.ok()) return n.status();
    absl::StatusOr<int64_t> held = handler_->VariableBytes(g.name());
    if (!held.ok()) return held.status();
    if (*n > *held) {
      return absl::InvalidArgumentError(absl::StrCat("gradient \"", g.name(), "\" claims ", *n,
                                                     " bytes; its variable holds ", *held));
    }
    claimed += static_cast<uint64_t>(*n);
  }
  if (claimed != bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request carries ", bytes, " tensor bytes; its ",
                     req->push.gradients_size(), " gradients need ", claimed));
  }
  return absl::OkStatus();
}

absl::Status TcpServerImpl::Push(TcpSocket* socket, Request& req) {
  PushResponse resp;
  absl::Status s;
  absl::Notification done;
  handler_->Push(req.push, req.grads, &resp, [&](absl::Status r) {
    s = std::move(r);
    done.Notify();
  });
  done.WaitForNotification();
  req.data = BufferPool::Buffer();  // back to the pool before the answer's wait
  if (s.ok()) ++served_;
  return Answer(socket, req.wire.id, s, s.ok() ? resp.SerializeAsString() : "", {});
}

absl::Status TcpServerImpl::Pull(TcpSocket* socket, const Request& req) {
  const PullRequest& head = req.pull;
  absl::Status s;
  PullResponse resp;
  // Value i: the variable's own floats, lent by the PS and held by keeps[i] until written.
  std::vector<iovec> values(head.names_size());
  std::vector<std::shared_ptr<const void>> keeps(head.names_size());
  {
    absl::Notification done;
    handler_->Pull(
        head, &resp,
        [&](int i, const float* v, int64_t n, const std::shared_ptr<const void>& keep) {
          if (i < 0 || i >= static_cast<int>(values.size()) || n < 0) {
            return absl::InternalError(absl::StrCat("pull sink index ", i, " out of range"));
          }
          values[i] = {const_cast<float*>(v), static_cast<size_t>(n) * sizeof(float)};
          keeps[i] = keep;
          return absl::OkStatus();
        },
        [&](absl::Status r) {
          s = std::move(r);
          done.Notify();
        });
    done.WaitForNotification();
  }
  if (!s.ok()) values.clear();
  if (s.ok()) ++served_;
  return Answer(socket, req.wire.id, s, s.ok() ? resp.SerializeAsString() : "", values);
}

absl::Status TcpServerImpl::Answer(TcpSocket* socket, uint64_t id, const absl::Status& status,
                                   const std::string& head, const std::vector<iovec>& tensors) {
  std::string message(status.message().substr(0, kMaxWireHeadBytes));
  WireResponse out;
  out.code = static_cast<int32_t>(status.code());
  out.id = id;
  out.message_bytes = static_cast<uint32_t>(message.size());
  out.head_bytes = static_cast<uint32_t>(head.size());
  for (const iovec& t : tensors) out.tensor_bytes += t.iov_len;
  std::vector<iovec> iov = {{&out, sizeof(out)},
                            {message.data(), message.size()},
                            {const_cast<char*>(head.data()), head.size()}};
  iov.insert(iov.end(), tensors.begin(), tensors.end());
  return socket->WriteAll(std::move(iov),
                          {.deadline = absl::Now() + kTcpFrameTimeout, .idle = kTcpFrameTimeout});
}

}  // namespace

namespace {

// A socket of `family` bound to `address` (port 0: a free one), or -1 with errno set. With
// `dual_stack`, an IPv6 socket takes IPv4 too.
int BoundSocket(int family, const sockaddr* address, socklen_t size, bool dual_stack = false) {
  const int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1, zero = 0;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (dual_stack) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
  if (bind(fd, address, size) == 0) return fd;
  const int error = errno;
  close(fd);
  errno = error;
  return -1;
}

// A socket bound on every interface (IPv6 and IPv4 when the system has IPv6), at a free port.
int ListenEverywhere() {
  sockaddr_in6 a6 = {};
  a6.sin6_family = AF_INET6;
  a6.sin6_addr = in6addr_any;
  const int fd = BoundSocket(AF_INET6, reinterpret_cast<sockaddr*>(&a6), sizeof(a6), true);
  if (fd >= 0) return fd;
  sockaddr_in a4 = {};
  a4.sin_family = AF_INET;
  a4.sin_addr.s_addr = htonl(INADDR_ANY);
  return BoundSocket(AF_INET, reinterpret_cast<sockaddr*>(&a4), sizeof(a4));
}

// A socket bound on the first of `host`'s addresses that binds, at a free port; -1 with *why
// set if none does.
int ListenOn(std::string host, std::string* why) {
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (int e = getaddrinfo(host.c_str(), "0", &hints, &found); e != 0) {
    *why = absl::StrCat("cannot resolve ", host, ": ", gai_strerror(e));
    return -1;
  }
  int fd = -1;
  *why = absl::StrCat("no address of ", host);
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = BoundSocket(a->ai_family, a->ai_addr, a->ai_addrlen);
    if (fd < 0) *why = absl::StrCat("cannot bind to ", host, ": ", std::strerror(errno));
  }
  freeaddrinfo(found);
  return fd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpServer>> TcpServer::Start(DataHandler* handler,
                                                            const std::string& host) {
  std::string why;
  const int lfd = host.empty() ? ListenEverywhere() : ListenOn(host, &why);
  if (lfd < 0) {
    if (why.empty()) why = std::strerror(errno);
    return absl::UnavailableError(absl::StrCat("the TCP data plane cannot listen: ", why));
  }
  sockaddr_storage got = {};
  socklen_t len = sizeof(got);
  if (listen(lfd, 256) != 0 || getsockname(lfd, reinterpret_cast<sockaddr*>(&got), &len) != 0) {
    why = std::strerror(errno);
    close(lfd);
    return absl::UnavailableError(absl::StrCat("the TCP data plane cannot listen: ", why));
  }
  const int port =
      ntohs(got.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&got)->sin6_port
                                      : reinterpret_cast<sockaddr_in*>(&got)->sin_port);
  return std::make_unique<TcpServerImpl>(handler, lfd, port);
}

}  // namespace pstrain
