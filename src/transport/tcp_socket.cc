// TcpSocket (tcp_socket.h).
#include "transport/tcp_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace {

constexpr absl::Duration kCancelPoll = absl::Milliseconds(100);
// sendmsg/recvmsg take at most IOV_MAX buffers; a push of more tensors goes in several calls.
constexpr size_t kMaxIov = 1024;

void SetInt(int fd, int level, int name, int value) {
  setsockopt(fd, level, name, &value, sizeof(value));
}

// Drops the first `n` bytes of `iov`.
void Consume(std::vector<iovec>* iov, size_t* first, size_t n) {
  while (n > 0 && *first < iov->size()) {
    iovec& v = (*iov)[*first];
    const size_t take = std::min(n, v.iov_len);
    v.iov_base = static_cast<char*>(v.iov_base) + take;
    v.iov_len -= take;
    n -= take;
    if (v.iov_len == 0) ++*first;
  }
  while (*first < iov->size() && (*iov)[*first].iov_len == 0) ++*first;
}

size_t Remaining(const std::vector<iovec>& iov, size_t first) {
  size_t n = 0;
  for (size_t i = first; i < iov.size(); ++i) n += iov[i].iov_len;
  return n;
}

}  // namespace

TcpSocket::TcpSocket(int fd) : fd_(fd) {
  fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL, 0) | O_NONBLOCK);
  SetInt(fd_, IPPROTO_TCP, TCP_NODELAY, 1);
  SetInt(fd_, SOL_SOCKET, SO_KEEPALIVE, 1);
  SetInt(fd_, IPPROTO_TCP, TCP_KEEPIDLE, 30);
  SetInt(fd_, IPPROTO_TCP, TCP_KEEPINTVL, 10);
  SetInt(fd_, IPPROTO_TCP, TCP_KEEPCNT, 3);
}

TcpSocket& TcpSocket::operator=(TcpSocket&& o) noexcept {
  if (this != &o) {
    Close();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

absl::StatusOr<TcpSocket> TcpSocket::Connect(const std::string& host, int port,
                                             absl::Time deadline) {
  const std::string name = absl::StrCat(host, ":", port);
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int e = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); e != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve ", name, " for the TCP data plane: ", gai_strerror(e)));
  }
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    TcpSocket s(fd);
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      why = std::strerror(errno);
      continue;
    }
    if (absl::Status w = s.Await(POLLOUT, {.deadline = deadline}, 0, "connecting"); !w.ok()) {
      why = std::string(w.message());
      continue;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      why = std::strerror(err);
      continue;
    }
    freeaddrinfo(found);
    return s;
  }
  freeaddrinfo(found);
  return absl::UnavailableError(absl::StrCat("cannot connect to ", name, ": ", why));
}

absl::Status TcpSocket::Await(short events, const TcpWait& wait, size_t missing, const char* what) {
  while (true) {
    if (wait.canceller != nullptr && wait.canceller->cancelled()) {
      return absl::CancelledError(
          absl::StrCat("cancelled while ", what, " (", missing, " bytes to go)"));
    }
    const absl::Duration left = wait.deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(
          absl::StrCat("deadline passed while ", what, " (", missing, " bytes to go)"));
    }
    absl::Duration slice = wait.canceller != nullptr ? std::min(left, kCancelPoll) : left;
    const int ms =
        slice == absl::InfiniteDuration()
            ? -1
            : static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(slice) + 1, 60'000));
    pollfd p = {fd_, events, 0};
    const int n = poll(&p, 1, ms);
    if (n < 0 && errno != EINTR) {
      return absl::UnavailableError(absl::StrCat(what, ": poll: ", std::strerror(errno)));
    }
    if (n > 0) return absl::OkStatus();  // ready, or an error the next transfer reports
  }
}

absl::Status TcpSocket::ReadFull(std::vector<iovec> iov, const TcpWait& wait) {
  return Transfer(/*send=*/false, std::move(iov), wait);
}

absl::Status TcpSocket::WriteAll(std::vector<iovec> iov, const TcpWait& wait) {
  return Transfer(/*send=*/true, std::move(iov), wait);
}

absl::Status TcpSocket::Transfer(bool send, std::vector<iovec> iov, const TcpWait& given) {
  const char* what = send ? "sending" : "receiving";
  TcpWait wait = given;
  size_t first = 0;
  Consume(&iov, &first, 0);
  while (first < iov.size()) {
    msghdr m = {};
    m.msg_iov = iov.data() + first;
    m.msg_iovlen = std::min(kMaxIov, iov.size() - first);
    const ssize_t n = send ? sendmsg(fd_, &m, MSG_NOSIGNAL) : recvmsg(fd_, &m, 0);
    if (n > 0) {
      Consume(&iov, &first, static_cast<size_t>(n));
      if (wait.idle != absl::InfiniteDuration()) wait.deadline = absl::Now() + wait.idle;
      continue;
    }
    if (n == 0 && !send) {
      return absl::UnavailableError(
          absl::StrCat("the connection was closed with ", Remaining(iov, first), " bytes to go"));
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
    }
    if (absl::Status s = Await(send ? POLLOUT : POLLIN, wait, Remaining(iov, first), what);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

void TcpSocket::Shutdown() {
  if (fd_ >= 0) shutdown(fd_, SHUT_RDWR);
}

void TcpSocket::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

std::string TcpSocket::PeerName() const {
  sockaddr_storage a = {};
  socklen_t len = sizeof(a);
  if (fd_ < 0 || getpeername(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "?";
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (a.ss_family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&a);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    port = ntohs(in->sin_port);
  } else if (a.ss_family == AF_INET6) {
    auto* in = reinterpret_cast<sockaddr_in6*>(&a);
    inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof(host));
    port = ntohs(in->sin6_port);
  }
  return absl::StrCat(host, ":", port);
}

}  // namespace pstrain
