// The UCX transport's messages (ucx.h). All are UCP active messages: a small fixed header in
// the active message's header, everything else in its data, which the receiver takes straight
// into its own buffers (rendezvous for large data: the bytes move once, by shared memory).
//   hello    (kAmRequest, method kHello, client to PS, once per endpoint): WireRequest + the job
//            token | the client's UCP worker address. The PS, token checked, connects back to
//            that address; `conn` (the client's random number) names the connection in every
//            later request, and its answers travel over the PS's own endpoint;
//   request  (kAmRequest, client to PS): WireRequest + the job token | head + tensor bytes, where
//            head is the serialized PushRequest (gradients without data) or PullRequest and the
//            tensor bytes are the gradients' bytes back to back in the head's order;
//   response (kAmResponse, PS to client): WireResponse | status message + head + tensor bytes,
//            where head is the serialized PushResponse or PullResponse (values without data) and
//            the tensor bytes are the pulled values' float32 bytes; a hello's has no head.
// Integers are in the sender's byte order: UCX peers here are the same build on one host.
#pragma once

#include <cstdint>

namespace pstrain {

inline constexpr uint16_t kAmRequest = 17;
inline constexpr uint16_t kAmResponse = 18;
inline constexpr uint32_t kWireMagic = 0x50535558;  // "PSUX"

enum class WireMethod : uint32_t { kPush = 1, kPull = 2, kHello = 3 };

struct WireRequest {
  uint32_t magic = kWireMagic;
  uint32_t method = 0;  // WireMethod
  uint64_t id = 0;      // chosen by the client, echoed in the response
  uint64_t conn = 0;    // the connection, as the client's hello named it
  uint32_t token_bytes = 0;
  uint32_t head_bytes = 0;
  // followed (in the header) by token_bytes of the job token
};

struct WireResponse {
  uint32_t magic = kWireMagic;
  int32_t code = 0;  // absl::StatusCode
  uint64_t id = 0;
  uint32_t message_bytes = 0;
  uint32_t head_bytes = 0;
  uint64_t tensor_bytes = 0;
};

// A request's data (head and tensor bytes) may not pass this: the PS checks it before it
// allocates anything. Twice the largest tensor, so a push of shards up to that fits.
inline constexpr uint64_t kMaxWireRequestBytes = uint64_t{1} << 30;
// A head (PushRequest or PullRequest without tensor bytes), and a status message.
inline constexpr uint32_t kMaxWireHeadBytes = 64u << 20;
// A hello's worker address (a shared-memory-only address is a few hundred bytes).
inline constexpr uint32_t kMaxWireAddressBytes = 64u << 10;

}  // namespace pstrain
