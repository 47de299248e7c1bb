#include "runtime/http_connections.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace pstrain {
namespace {

// How long a connection closed after its last response is still read from (and what it sends
// dropped), so that a request the listener did not read whole does not turn the close into a
// reset that destroys the response before the peer reads it.
constexpr absl::Duration kDrainTime = absl::Seconds(1);

// A warning per kind of refusal at most once a second, with the count of those not logged: a
// flood of connections must not become a flood of log lines.
class RefusalLog {
 public:
  void Warn(const std::string& kind, const std::string& line) {
    Entry& e = entries_[kind];
    const absl::Time now = absl::Now();
    if (now - e.last < absl::Seconds(1)) {
      ++e.suppressed;
      return;
    }
    if (e.suppressed > 0) {
      spdlog::warn("{} (and {} more such in the last second)", line, e.suppressed);
    } else {
      spdlog::warn("{}", line);
    }
    e.last = now;
    e.suppressed = 0;
  }

 private:
  struct Entry {
    absl::Time last = absl::InfinitePast();
    int64_t suppressed = 0;
  };
  absl::flat_hash_map<std::string, Entry> entries_;
};

RefusalLog& Refusals() {
  static RefusalLog* log = new RefusalLog;  // used by the poll threads only, one at a time
  return *log;
}

std::string Reply(int status, const char* reason, const std::string& text) {
  const std::string body = absl::StrCat(status, " ", reason, ": ", text, "\n");
  return absl::StrCat(
      "HTTP/1.1 ", status, " ", reason,
      "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ", body.size(),
      "\r\nConnection: close\r\n", status == 503 ? "Retry-After: 1\r\n" : "", "\r\n", body);
}

// The address and port of `sa` as text.
void Describe(const sockaddr_storage& sa, std::string* ip, int* port) {
  char buf[INET6_ADDRSTRLEN] = "";
  if (sa.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&sa);
    inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf));
    *port = ntohs(in->sin_port);
  } else if (sa.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&sa);
    inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof(buf));
    *port = ntohs(in6->sin6_port);
  }
  *ip = buf;
}

// Where the request head in `in` ends (after its empty line), or npos. A head of bare "\n" line
// ends is handed on too, for cpp-httplib to refuse.
size_t HeadEnd(const std::string& in) {
  const size_t crlf = in.find("\r\n\r\n");
  const size_t lf = in.find("\n\n");
  if (crlf == std::string::npos && lf == std::string::npos) return std::string::npos;
  return std::min(crlf == std::string::npos ? std::string::npos : crlf + 4,
                  lf == std::string::npos ? std::string::npos : lf + 2);
}

// Sends `reply` if the socket takes it at once, and closes `fd`. What the peer sent and was not
// read is read first, since closing over unread bytes resets the connection, which may destroy
// the reply before the peer reads it.
void SendAndClose(int fd, const std::string& reply) {
  char buf[4096];
  for (int i = 0; i < 16 && recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0; ++i) {
  }
  [[maybe_unused]] ssize_t n = send(fd, reply.data(), reply.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  close(fd);
}

}  // namespace

absl::StatusOr<int> ListenTcp(const std::string& host, int port, int* bound_port) {
  const auto failed = [&] {
    return absl::FailedPreconditionError(absl::StrCat("cannot listen for HTTP on ", host, ":", port,
                                                      " (port in use or address not local)"));
  };
  std::string name = host;
  if (name.size() > 1 && name.front() == '[' && name.back() == ']') {
    name = name.substr(1, name.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (getaddrinfo(name.empty() ? nullptr : name.c_str(), std::to_string(port).c_str(), &hints,
                  &found) != 0) {
    return failed();
  }
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    // SO_REUSEADDR and not SO_REUSEPORT, which would let a second listener share a taken port.
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) return failed();
  sockaddr_storage sa{};
  socklen_t len = sizeof(sa);
  std::string ip;
  getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  Describe(sa, &ip, bound_port);
  return fd;
}

HttpConnections::HttpConnections(int listen_fd, HttpLimits limits, HttpAnswer answer)
    : listen_fd_(listen_fd),
      wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      limits_(std::move(limits)),
      answer_(std::move(answer)) {}

HttpConnections::~HttpConnections() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  jobs_cv_.notify_all();
  Wake();
  if (poll_thread_.joinable()) poll_thread_.join();
  for (std::thread& t : answer_threads_) t.join();
  for (auto& [id, c] : conns_) close(c.fd);
  close(listen_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

void HttpConnections::Start() {
  for (int i = 0; i < std::max(1, limits_.answer_threads); ++i) {
    answer_threads_.emplace_back([this] { AnswerLoop(); });
  }
  poll_thread_ = std::thread([this] { PollLoop(); });
}

void HttpConnections::Wake() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
}

void HttpConnections::PollLoop() {
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;  // of fds[2...]
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
    }
    absl::Time now = absl::Now();
    TakeAnswers(now);
    Expire(now);
    fds.clear();
    ids.clear();
    const bool accepting = now >= accept_paused_until_;
    fds.push_back({accepting ? listen_fd_ : -1, POLLIN, 0});
    fds.push_back({wake_fd_, POLLIN, 0});
    absl::Time next = now + absl::Seconds(1);
    if (!accepting) next = std::min(next, accept_paused_until_);
    for (const auto& [id, c] : conns_) {
      short events = 0;
      if (c.state == State::kReading || c.state == State::kDraining) events = POLLIN;
      if (c.state == State::kWriting) events = POLLOUT;
      if (c.state != State::kAnswering) next = std::min(next, c.deadline);
      // Not polled while answered: a hang-up then is learnt when the response is written, and
      // a pipelined request waits in the socket.
      fds.push_back({c.state == State::kAnswering ? -1 : c.fd, events, 0});
      ids.push_back(id);
    }
    const int64_t wait_ms = std::clamp<int64_t>(absl::ToInt64Milliseconds(next - now) + 1, 0, 1000);
    if (poll(fds.data(), fds.size(), static_cast<int>(wait_ms)) < 0 && errno != EINTR) {
      spdlog::error("http listener: poll failed: {}", strerror(errno));
      return;
    }
    now = absl::Now();
    if (fds[1].revents != 0) {
      uint64_t count;
      [[maybe_unused]] ssize_t n = read(wake_fd_, &count, sizeof(count));
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      const short ev = fds[i + 2].revents;
      if (ev == 0 || conns_.count(ids[i]) == 0) continue;
      if (conns_[ids[i]].state == State::kWriting) {
        Write(ids[i], now);
      } else {
        Read(ids[i], now);  // also learns of a hang-up or an error
      }
    }
    if (fds[0].revents != 0) AcceptAll(now);
  }
}

void HttpConnections::AcceptAll(absl::Time now) {
  for (;;) {
    sockaddr_storage sa{};
    socklen_t len = sizeof(sa);
    const int fd =
        accept4(listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Left in the backlog: poll would report it again at once.
        Refusals().Warn("accept", absl::StrCat("http listener: cannot accept: ", strerror(errno)));
        accept_paused_until_ = now + absl::Milliseconds(100);
      }
      return;
    }
    Conn c;
    c.fd = fd;
    c.peer.fd = fd;
    Describe(sa, &c.peer.ip, &c.peer.port);
    sockaddr_storage local{};
    len = sizeof(local);
    getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len);
    Describe(local, &c.peer.local_ip, &c.peer.local_port);
    if (!MakeRoom(c.peer.ip, now)) {
      const std::string why =
          absl::StrCat("every one of its connections is being answered (the listener keeps ",
                       limits_.max_per_peer, " per peer and ", limits_.max_total, " in all)");
      Refusals().Warn("busy", absl::StrCat("http connection from ", c.peer.ip, ":", c.peer.port,
                                           " refused with 503: ", why));
      SendAndClose(fd, Reply(503, "Service Unavailable", "too many connections: " + why));
      continue;
    }
    c.deadline = now + limits_.head_timeout;
    c.last_active = now;
    ++per_peer_[c.peer.ip];
    conns_.emplace(next_id_++, std::move(c));
  }
}

bool HttpConnections::MakeRoom(const std::string& ip, absl::Time now) {
  for (const bool of_peer : {true, false}) {
    const auto peer = per_peer_.find(ip);
    const bool full = of_peer ? peer != per_peer_.end() && peer->second >= limits_.max_per_peer
                              : static_cast<int>(conns_.size()) >= limits_.max_total;
    if (!full) continue;
    // The idlest connection not being answered (of this peer, or of any) gives up its slot.
    auto idlest = conns_.end();
    for (auto it = conns_.begin(); it != conns_.end(); ++it) {
      const Conn& c = it->second;
      if (c.state == State::kAnswering || (of_peer && c.peer.ip != ip)) continue;
      if (idlest == conns_.end() || c.last_active < idlest->second.last_active) idlest = it;
    }
    if (idlest == conns_.end()) return false;
    const Conn& c = idlest->second;
    const std::string cap = of_peer ? absl::StrCat(limits_.max_per_peer, " per peer")
                                    : absl::StrCat(limits_.max_total, " in all");
    Refusals().Warn(
        of_peer ? "per peer" : "in all",
        absl::StrCat("http connection from ", c.peer.ip, ":", c.peer.port, " idle for ",
                     absl::FormatDuration(absl::Trunc(now - c.last_active, absl::Milliseconds(1))),
                     " closed to make room for a new one: the listener keeps ", cap));
    // A connection waiting for its first request hears why; a kept-alive one between
    // requests is just closed (clients open a new one), as is one whose response was under way.
    if (c.state == State::kReading && (c.answered == 0 || !c.in.empty())) {
      Refuse(idlest->first, Reply(503, "Service Unavailable",
                                  absl::StrCat("too many connections", of_peer ? " from " + ip : "",
                                               " (the listener keeps ", cap, ")")));
    } else {
      Close(idlest->first);
    }
  }
  return true;
}

void HttpConnections::Read(uint64_t id, absl::Time now) {
  Conn& c = conns_[id];
  char buf[16384];
  while (c.in.size() <= limits_.max_head_bytes) {
    const ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
    if (n > 0) {
      c.last_active = now;
      if (c.state == State::kReading) c.in.append(buf, n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    Close(id);  // the peer closed (or reset) its end
    return;
  }
  if (c.state == State::kReading) Dispatch(id, now);
}

void HttpConnections::Dispatch(uint64_t id, absl::Time now) {
  Conn& c = conns_[id];
  size_t end = HeadEnd(c.in);
  bool last = c.answered + 1 >= limits_.max_requests_per_connection;
  if (end == std::string::npos || end > limits_.max_head_bytes) {
    if (c.in.size() <= limits_.max_head_bytes) return;  // more to come
    end = limits_.max_head_bytes;  // answered as it stands: cpp-httplib refuses it
    last = true;
  }
  Job job{id, c.in.substr(0, end), c.peer, last};
  c.in.erase(0, end);
  c.state = State::kAnswering;
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(job));
  }
  jobs_cv_.notify_one();
}

void HttpConnections::AnswerLoop() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      jobs_cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (stopping_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    Answered a{job.id, "", false};
    a.keep = answer_(job.head, job.peer, job.last, &a.response) && !job.last;
    {
      std::lock_guard<std::mutex> lock(mu_);
      answered_.push_back(std::move(a));
    }
    Wake();
  }
}

void HttpConnections::TakeAnswers(absl::Time now) {
  std::vector<Answered> answered;
  {
    std::lock_guard<std::mutex> lock(mu_);
    answered.swap(answered_);
  }
  for (Answered& a : answered) {
    auto it = conns_.find(a.id);
    if (it == conns_.end()) continue;
    Conn& c = it->second;
    c.out = std::move(a.response);
    c.sent = 0;
    c.close_after = !a.keep;
    c.state = State::kWriting;
    c.deadline = now + limits_.write_timeout;
    Write(a.id, now);
  }
}

void HttpConnections::Write(uint64_t id, absl::Time now) {
  Conn& c = conns_[id];
  while (c.sent < c.out.size()) {
    const ssize_t n = send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
    if (n > 0) {
      c.sent += n;
      c.last_active = now;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;  // POLLOUT resumes it
    Close(id);
    return;
  }
  c.out.clear();
  ++c.answered;
  if (c.close_after) {
    shutdown(c.fd, SHUT_WR);
    c.state = State::kDraining;
    c.deadline = now + kDrainTime;
    return;
  }
  c.state = State::kReading;
  c.deadline = now + limits_.head_timeout;
  Dispatch(id, now);  // a pipelined request may be there already
}

void HttpConnections::Expire(absl::Time now) {
  std::vector<uint64_t> expired;
  for (const auto& [id, c] : conns_) {
    if (c.state != State::kAnswering && c.deadline <= now) expired.push_back(id);
  }
  for (uint64_t id : expired) {
    const Conn& c = conns_[id];
    if (c.state != State::kReading || c.in.empty()) {
      Close(id);  // idle, drained, or not reading its response
      continue;
    }
    const std::string why =
        absl::StrCat("no whole request head within ", absl::FormatDuration(limits_.head_timeout));
    Refusals().Warn("timeout", absl::StrCat("http connection from ", c.peer.ip, ":", c.peer.port,
                                            " closed with 408: ", why));
    Refuse(id, Reply(408, "Request Timeout", why));
  }
}

void HttpConnections::Refuse(uint64_t id, const std::string& reply) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  const int fd = it->second.fd;
  it->second.fd = -1;  // closed by SendAndClose
  Close(id);
  SendAndClose(fd, reply);
}

void HttpConnections::Close(uint64_t id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  if (it->second.fd >= 0) close(it->second.fd);
  auto peer = per_peer_.find(it->second.peer.ip);
  if (peer != per_peer_.end() && --peer->second == 0) per_peer_.erase(peer);
  conns_.erase(it);
}

}  // namespace pstrain
