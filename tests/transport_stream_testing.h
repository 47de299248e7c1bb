// Helpers of transport_stream_test: deterministic tensors, bit-exact comparison, this process's
// memory, and a raw client of PushStream for streams the real client never sends.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "common/rpc.h"
#include "gtest/gtest.h"
#include "ps_testing.h"
#include "stream.grpc.pb.h"

namespace pstrain::stream_testing {

using ps_testing::Worker;

// A deterministic, finite, byte-varied value for element i (no two neighbours alike, every byte
// of the float in play), so a shifted, dropped or reordered chunk shows.
inline float Pattern(int64_t i) {
  uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ static_cast<uint32_t>(i >> 32);
  h ^= h >> 15;
  const uint32_t bits = (h & 0x807fffffu) | ((100u + (h >> 23) % 50u) << 23);  // exponent 100..149
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
// A small exact gradient: lr 1 SGD then gives Pattern(i) - Gradient(i), rounded once.
inline float Grad(int64_t i) { return static_cast<float>(i % 7) - 3.0f; }

// Peak resident memory of this process in bytes (VmHWM), and a reset of it.
inline int64_t PeakRss() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}
inline int64_t Rss() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}
inline bool ResetPeakRss() {
  return static_cast<bool>(std::ofstream("/proc/self/clear_refs") << "5");
}

// Elements where `got` differs from want(i) bit for bit; the first is reported.
template <typename Want>
inline int64_t Mismatches(const std::vector<float>& got, Want want) {
  int64_t bad = 0;
  for (int64_t i = 0; i < static_cast<int64_t>(got.size()); ++i) {
    const float w = want(i);
    if (std::memcmp(&got[i], &w, sizeof w) != 0) {
      if (bad++ == 0) ADD_FAILURE() << "element " << i << ": got " << got[i] << ", want " << w;
    }
  }
  return bad;
}

// A raw client of PushStream speaking protobuf's own encoding of the chunks, for bad streams.
inline absl::Status RawPush(grpc::Channel* channel, const std::vector<PushChunk>& chunks) {
  auto stub = TensorStreamService::NewStub(channel->shared_from_this());
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  PushResponse resp;
  std::unique_ptr<grpc::ClientWriter<PushChunk>> writer = stub->PushStream(&ctx, &resp);
  for (const PushChunk& c : chunks) {
    if (!writer->Write(c)) break;
  }
  writer->WritesDone();
  return FromGrpcStatus(writer->Finish());
}

inline PushChunk Head(const std::string& name, std::vector<int64_t> shape) {
  PushChunk c;
  *c.mutable_head()->mutable_sender() = Worker(0);
  Gradient* g = c.mutable_head()->add_gradients();
  g->set_name(name);
  g->mutable_gradient()->set_dtype(DT_FLOAT);
  for (int64_t d : shape) g->mutable_gradient()->add_shape(d);
  return c;
}
inline PushChunk Data(int index, int64_t offset, const std::vector<float>& v, int64_t from,
                      int64_t count) {
  PushChunk c;
  c.set_index(index);
  c.set_offset(offset);
  c.set_data(reinterpret_cast<const char*>(v.data() + from), count * 4);
  return c;
}

}  // namespace pstrain::stream_testing
