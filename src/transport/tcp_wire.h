// The TCP transport's frames (tcp.h). Both directions start with TcpFrame:
//   request  (client to PS): TcpFrame | WireRequest + the job token (header_bytes) | data
//            (data_bytes): as a UCX request's (ucx_wire.h) — the serialized PushRequest or
//            PullRequest, then a push's gradient bytes back to back in its order; a hello's data
//            is kTcpHello. A connection's first request is a hello; the PS checks the token of
//            every request (CheckRequest) before it reads its data.
//   response (PS to client): WireResponse | status message + head + tensor bytes, as UCX's.
// Integers and floats are little-endian (the only byte order pstrain builds for).
#pragma once

#include <bit>
#include <cstdint>

#include "absl/time/time.h"
#include "transport/ucx_wire.h"

namespace pstrain {

static_assert(std::endian::native == std::endian::little, "the TCP frames are little-endian");

inline constexpr uint32_t kTcpMagic = 0x50535443;  // "PSTC"
inline constexpr char kTcpHello[] = "pstrain-tcp-1";

struct TcpFrame {
  uint32_t magic = kTcpMagic;
  uint32_t header_bytes = 0;  // WireRequest + token
  uint64_t data_bytes = 0;
};

// A request's header: WireRequest and a token (security.h's are 64 hex digits).
inline constexpr uint32_t kMaxTcpHeaderBytes = 4096;
// A connection must say hello within this; once a frame has started, the rest of it must arrive
// within kTcpFrameTimeout (a peer that sends part of a request and stops is dropped).
inline constexpr absl::Duration kTcpHelloTimeout = absl::Seconds(10);
inline constexpr absl::Duration kTcpFrameTimeout = absl::Seconds(60);
// Connections a PS serves at once; one past this is closed as it is accepted.
inline constexpr int kMaxTcpConnections = 512;

}  // namespace pstrain
