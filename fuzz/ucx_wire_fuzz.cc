// libFuzzer target: a UCX request as the PS reads it before anything reaches its handler
// (transport/ucx_call.h): the active message's header through CheckRequest, then its data
// through ParseRequest. The input is a 2-byte header length, the header, then the data. The job
// has no token here, so every header that is well formed goes on to the data's parsing.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "transport/ucx_call.h"
#include "transport/ucx_wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* input, size_t size) {
  if (size < 2) return 0;
  const size_t header_length = std::min<size_t>(input[0] | (input[1] << 8), size - 2);
  // Copies, so that an access past either part is one past its own allocation.
  const std::string header(reinterpret_cast<const char*>(input) + 2, header_length);
  const std::string data(reinterpret_cast<const char*>(input) + 2 + header_length,
                         size - 2 - header_length);
  pstrain::WireRequest wire;
  if (!pstrain::CheckRequest(header.data(), header.size(), data.size(), &wire).ok()) return 0;
  if (static_cast<pstrain::WireMethod>(wire.method) == pstrain::WireMethod::kHello) return 0;
  pstrain::PullRequest pull;
  pstrain::PushRequest push;
  std::vector<pstrain::ConstBytes> grads;
  if (!pstrain::ParseRequest(wire, data.data(), data.size(), &pull, &push, &grads).ok()) return 0;
  // What the PS hands on: every gradient's bytes lie within the data, and they add up to it.
  uint64_t total = wire.head_bytes;
  for (const pstrain::ConstBytes& g : grads) {
    const char* at = static_cast<const char*>(g.data);
    if (g.size < 0 || at < data.data() || at + g.size > data.data() + data.size()) __builtin_trap();
    total += g.size;
  }
  if (static_cast<pstrain::WireMethod>(wire.method) == pstrain::WireMethod::kPush &&
      total != data.size()) {
    __builtin_trap();
  }
  return 0;
}
