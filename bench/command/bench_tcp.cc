// The raw TCP baseline of `pstrain bench`: a ping-pong of N bytes each way over a plain loopback
// socket between two processes (TCP_NODELAY, default buffers, no framing beyond an 8-byte
// length), the floor any transport over loopback TCP pays.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "bench/command/bench_internal.h"

namespace pstrain::bench {
namespace {

bool SendAll(int fd, const char* p, int64_t n) {
  while (n > 0) {
    const ssize_t w = send(fd, p, static_cast<size_t>(n), MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= w;
  }
  return true;
}

bool RecvAll(int fd, char* p, int64_t n) {
  while (n > 0) {
    const ssize_t r = recv(fd, p, static_cast<size_t>(n), 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= r;
  }
  return true;
}

void NoDelay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// A receive timeout, so a lost peer ends the helper's wait instead of hanging it.
void RecvTimeout(int fd, int seconds) {
  timeval tv{seconds, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

struct TcpClientState {
  std::vector<int64_t> sizes;
  int fd = -1;
  std::vector<char> buf;  // touched once, so page faults are not timed
};

}  // namespace

absl::StatusOr<int> Listen(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError("socket failed");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(fd, 4) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    return absl::InternalError(absl::StrCat("cannot listen on 127.0.0.1: ", std::strerror(errno)));
  }
  *port = ntohs(a.sin_port);
  return fd;
}

CommandHandler EchoServer(int listen_fd) {
  return [listen_fd](const Command& c) {
    Reply r;
    if (c.op != kEcho) return Reply{0, "echo server: unknown command", {}};
    const int fd = accept(listen_fd, nullptr, nullptr);
    if (fd < 0) return Reply{0, "echo server: accept failed", {}};
    NoDelay(fd);
    std::vector<char> buf;
    int64_t n = 0;
    while (RecvAll(fd, reinterpret_cast<char*>(&n), sizeof(n)) && n >= 0) {
      if (static_cast<int64_t>(buf.size()) < n) buf.resize(n);
      if (!RecvAll(fd, buf.data(), n) || !SendAll(fd, buf.data(), n)) break;
    }
    close(fd);
    return r;
  };
}

CommandHandler TcpClient(std::vector<int64_t> sizes) {
  auto st = std::make_shared<TcpClientState>();
  st->sizes = std::move(sizes);
  return [st](const Command& c) {
    Reply r;
    if (c.op == kConnect) {
      st->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(static_cast<uint16_t>(c.steps));
      if (connect(st->fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
        r.error = absl::StrCat("TCP baseline: connect failed: ", std::strerror(errno));
      }
      NoDelay(st->fd);
      RecvTimeout(st->fd, 120);
      return r;
    }
    if ((c.op != kStep && c.op != kLatency) || c.size_index < 0 ||
        c.size_index >= static_cast<int>(st->sizes.size())) {
      r.error = "TCP baseline: bad command";
      return r;
    }
    const int64_t n = st->sizes[c.size_index];
    if (static_cast<int64_t>(st->buf.size()) < n) st->buf.resize(n, 1);
    return TimeSteps(c, [&] {
      if (!SendAll(st->fd, reinterpret_cast<const char*>(&n), sizeof(n)) ||
          !SendAll(st->fd, st->buf.data(), n) || !RecvAll(st->fd, st->buf.data(), n)) {
        return absl::UnavailableError("TCP baseline: the echo server is gone");
      }
      return absl::OkStatus();
    });
  };
}

}  // namespace pstrain::bench
