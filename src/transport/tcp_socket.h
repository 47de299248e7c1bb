// A connected TCP socket for the TCP transport (tcp.h), read and written in whole buffers under
// a deadline and a canceller: non-blocking underneath, with poll between partial transfers, so a
// stalled peer costs a deadline and a shutdown from another thread wakes a blocked call.
// Internal to src/transport.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/rpc.h"

namespace pstrain {

// How long one transfer may take: until `deadline`, and until `canceller` (not owned; may be
// null) is cancelled, which is looked at every 100 ms while the transfer waits. With `idle`, the
// deadline moves to `idle` past the last byte moved, so a large transfer that keeps moving is
// never cut off, and one that stalls is.
struct TcpWait {
  absl::Time deadline = absl::InfiniteFuture();
  absl::Duration idle = absl::InfiniteDuration();
  CallCanceller* canceller = nullptr;
};

class TcpSocket {
 public:
  TcpSocket() = default;
  // Takes `fd`, a connected stream socket, and makes it non-blocking with TCP_NODELAY and
  // keepalive probes (a peer whose host vanished is noticed within about a minute).
  explicit TcpSocket(int fd);
  ~TcpSocket() { Close(); }
  TcpSocket(TcpSocket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  TcpSocket& operator=(TcpSocket&& o) noexcept;
  TcpSocket(const TcpSocket&) = delete;
  TcpSocket& operator=(const TcpSocket&) = delete;

  // Connects to host:port (a name or an address, IPv4 or IPv6) by `deadline`. Unavailable naming
  // the address and the system's reason.
  static absl::StatusOr<TcpSocket> Connect(const std::string& host, int port, absl::Time deadline);

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  // Reads exactly the bytes of `iov` (consumed as it goes). Unavailable when the peer closes or
  // resets the connection, DeadlineExceeded past the deadline, Cancelled once cancelled; the
  // message says how many bytes were still missing.
  absl::Status ReadFull(std::vector<iovec> iov, const TcpWait& wait);
  absl::Status ReadFull(void* data, size_t size, const TcpWait& wait) {
    return ReadFull({{data, size}}, wait);
  }
  // Writes every byte of `iov` (one sendmsg per batch of buffers, straight from them), with the
  // same errors as ReadFull.
  absl::Status WriteAll(std::vector<iovec> iov, const TcpWait& wait);
  // Ends both directions; a call blocked on this socket in another thread returns Unavailable.
  // The descriptor stays open until Close or destruction.
  void Shutdown();
  void Close();
  // "host:port" of the peer, for logs; "?" when unknown.
  std::string PeerName() const;

 private:
  // ReadFull (`send` false) or WriteAll.
  absl::Status Transfer(bool send, std::vector<iovec> iov, const TcpWait& wait);
  // Waits (poll) for `events`; OK when ready, else the transfer's error.
  absl::Status Await(short events, const TcpWait& wait, size_t missing, const char* what);

  int fd_ = -1;
};

}  // namespace pstrain
