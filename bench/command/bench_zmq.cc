// The ZeroMQ baseline of `pstrain bench`: the ping-pong of the raw TCP baseline (N bytes each
// way between two processes) over a ZeroMQ REQ/REP pair on tcp://127.0.0.1, the carrier that
// ps-lite's van uses. As ps-lite does, a message is sent from its buffer without a copy
// (zmq_msg_init_data) and received into a message the library allocates, used in place.
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "bench/command/bench_internal.h"
#ifdef PSTRAIN_HAVE_ZMQ
#include <zmq.h>
#endif

namespace pstrain::bench {

#ifdef PSTRAIN_HAVE_ZMQ
namespace {

std::string ZmqError(const char* what) {
  return absl::StrCat("ZeroMQ baseline: ", what, ": ", zmq_strerror(zmq_errno()));
}

// A context and one socket, closed with the helper.
struct ZmqSocket {
  void* context = nullptr;
  void* socket = nullptr;
  ~ZmqSocket() {
    if (socket != nullptr) zmq_close(socket);
    if (context != nullptr) zmq_ctx_term(context);
  }
  // A socket of `type`; a receive timeout (-1: none) ends a client's wait for a lost peer.
  std::string Open(int type, int timeout_ms) {
    context = zmq_ctx_new();
    if (context == nullptr) return ZmqError("zmq_ctx_new");
    socket = zmq_socket(context, type);
    if (socket == nullptr) return ZmqError("zmq_socket");
    const int linger = 0;
    zmq_setsockopt(socket, ZMQ_RCVTIMEO, &timeout_ms, sizeof(timeout_ms));
    zmq_setsockopt(socket, ZMQ_LINGER, &linger, sizeof(linger));
    return "";
  }
};

std::string Endpoint(int port) { return absl::StrCat("tcp://127.0.0.1:", port); }

}  // namespace

CommandHandler ZmqEchoServer() {
  auto st = std::make_shared<ZmqSocket>();
  return [st](const Command& c) {
    if (c.op != kEcho) return Reply{0, "ZeroMQ echo server: unknown command", {}};
    if (std::string e = st->Open(ZMQ_REP, -1); !e.empty()) return Reply{0, e, {}};
    if (zmq_bind(st->socket, Endpoint(c.steps).c_str()) != 0) {
      return Reply{0, ZmqError("zmq_bind"), {}};
    }
    // Every message back as it came, without a copy, until the client is gone.
    for (;;) {
      zmq_msg_t m;
      zmq_msg_init(&m);
      if (zmq_msg_recv(&m, st->socket, 0) < 0 || zmq_msg_send(&m, st->socket, 0) < 0) {
        zmq_msg_close(&m);
        break;
      }
    }
    return Reply{};
  };
}

CommandHandler ZmqClient(std::vector<int64_t> sizes) {
  struct State {
    ZmqSocket zmq;
    std::vector<int64_t> sizes;
    std::vector<char> buf;  // touched once, so page faults are not timed
  };
  auto st = std::make_shared<State>();
  st->sizes = std::move(sizes);
  return [st](const Command& c) {
    Reply r;
    if (c.op == kConnect) {
      r.error = st->zmq.Open(ZMQ_REQ, 120000);
      if (r.error.empty() && zmq_connect(st->zmq.socket, Endpoint(c.steps).c_str()) != 0) {
        r.error = ZmqError("zmq_connect");
      }
      return r;
    }
    if ((c.op != kStep && c.op != kLatency) || c.size_index < 0 ||
        c.size_index >= static_cast<int>(st->sizes.size()) || st->zmq.socket == nullptr) {
      r.error = "ZeroMQ baseline: bad command";
      return r;
    }
    const int64_t n = st->sizes[c.size_index];
    if (static_cast<int64_t>(st->buf.size()) < n) st->buf.resize(n, 1);
    return TimeSteps(c, [&] {
      zmq_msg_t out, in;
      zmq_msg_init_data(&out, st->buf.data(), n, nullptr, nullptr);
      zmq_msg_init(&in);
      const bool ok = zmq_msg_send(&out, st->zmq.socket, 0) >= 0 &&
                      zmq_msg_recv(&in, st->zmq.socket, 0) == static_cast<int>(n);
      zmq_msg_close(&in);
      if (ok) return absl::OkStatus();
      zmq_msg_close(&out);
      return absl::UnavailableError(ZmqError("the echo server is gone"));
    });
  };
}

#else  // built without libzmq

namespace {
constexpr char kNoZmq[] =
    "ZeroMQ baseline: this pstrain was built without libzmq (install libzmq3-dev and rebuild)";
}  // namespace

CommandHandler ZmqEchoServer() {
  return [](const Command&) { return Reply{0, kNoZmq, {}}; };
}
CommandHandler ZmqClient(std::vector<int64_t>) {
  return [](const Command&) { return Reply{0, kNoZmq, {}}; };
}

#endif

}  // namespace pstrain::bench
