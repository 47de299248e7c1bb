// A streamed push as the PS's end of TensorStreamService takes it (grpc_stream_server.cc
// PushReactor; the client's end of a pull stream takes chunks the same way): each chunk parsed
// by hand (stream_chunks.h ParsedChunk) and checked against protobuf's parse of it as a
// PushChunk, the head's gradients sized (StreamedBytes) against variables of 1 MiB, each data
// chunk accepted in order (ChunkOrder) and copied into its gradient's buffer. Once every byte
// arrived, each buffer must hold what protobuf read from the chunks.
//   input: one byte choosing how each chunk is cut into slices (fuzz_util.h ToByteBuffer), then
//          the chunks, separated by fuzz::kSeparator
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/limits.h"
#include "fuzz_util.h"
#include "protobuf_quiet.h"
#include "stream.pb.h"
#include "transport/stream_chunks.h"

namespace pstrain {
namespace {

using stream_chunks::ChunkOrder;
using stream_chunks::ParsedChunk;

constexpr int64_t kVariableBytes = 1 << 20;  // what the PS holds for any variable

class Push {
 public:
  // False once the stream is refused (as the PS ends the call).
  bool Take(std::string_view bytes, uint8_t pattern) {
    ParsedChunk chunk;
    if (!chunk.Parse(fuzz::ToByteBuffer(bytes, pattern)).ok()) return false;
    CheckAgainstProtobuf(chunk, bytes);
    if (chunk.has_head()) {
      if (order_) return false;
      if (!head_.ParseFromString(chunk.head())) return false;
      return Prepare();
    }
    if (!order_) return false;
    if (!order_->Accept(chunk.index(), chunk.offset(), chunk.data_size()).ok()) return false;
    FUZZ_CHECK(chunk.index() < blocks_.size(), "accepted a chunk past the last gradient");
    FUZZ_CHECK(chunk.offset() + chunk.data_size() <= blocks_[chunk.index()].size(),
               "accepted a chunk past its gradient's end");
    chunk.CopyData(blocks_[chunk.index()].data() + chunk.offset());
    PushChunk reference;
    reference.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
    std::memcpy(expected_[chunk.index()].data() + chunk.offset(), reference.data().data(),
                reference.data().size());
    return true;
  }

  void Finish() {
    if (!order_ || !order_->done()) return;
    FUZZ_CHECK(blocks_ == expected_, "a gradient's bytes differ from the chunks'");
  }

 private:
  // What the hand-made parser read is what protobuf reads (where protobuf reads it at all:
  // ParsedChunk is stricter, refusing repeated fields, wrong wire types and groups).
  static void CheckAgainstProtobuf(const ParsedChunk& chunk, std::string_view bytes) {
    PushChunk reference;
    if (!reference.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
      // Only the head's own bytes, which the PS parses afterwards, may be what protobuf refuses.
      FUZZ_CHECK(chunk.has_head(), "a data chunk that protobuf does not parse");
      return;
    }
    FUZZ_CHECK(chunk.has_head() == reference.has_head(), "head or not");
    if (chunk.has_head()) {
      PushRequest head;
      FUZZ_CHECK(head.ParseFromString(chunk.head()) &&
                     head.SerializeAsString() == reference.head().SerializeAsString(),
                 "the head's bytes");
      return;
    }
    FUZZ_CHECK(static_cast<uint32_t>(chunk.index()) == static_cast<uint32_t>(reference.index()),
               "index");
    FUZZ_CHECK(chunk.offset() == static_cast<uint64_t>(reference.offset()), "offset");
    FUZZ_CHECK(chunk.data_size() == static_cast<int64_t>(reference.data().size()), "data size");
    std::string copy(reference.data().size(), '\0');
    chunk.CopyData(copy.data());
    FUZZ_CHECK(copy == reference.data(), "data bytes");
  }

  bool Prepare() {
    const int n = head_.gradients_size();
    if (n > kMaxVariablesPerRequest) return false;
    std::vector<int64_t> sizes(n);
    std::vector<std::string> names(n);
    absl::flat_hash_set<std::string> seen;
    for (int i = 0; i < n; ++i) {
      const Gradient& g = head_.gradients(i);
      names[i] = absl::StrCat("gradient ", i, " '", g.name(), "'");
      if (!seen.insert(g.name()).second) return false;
      absl::StatusOr<int64_t> claimed = stream_chunks::StreamedBytes(g.gradient(), names[i]);
      if (!claimed.ok()) return false;
      FUZZ_CHECK(*claimed >= 0 && *claimed <= kMaxTensorBytes, "StreamedBytes out of range");
      if (*claimed > kVariableBytes) return false;
      sizes[i] = *claimed;
    }
    for (int64_t size : sizes) {
      blocks_.emplace_back(size, '\0');
      expected_.emplace_back(size, '\0');
    }
    order_.emplace(std::move(sizes), std::move(names));
    return true;
  }

  PushRequest head_;
  std::optional<ChunkOrder> order_;
  std::vector<std::string> blocks_, expected_;
};

}  // namespace
}  // namespace pstrain

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  pstrain::Push push;
  for (std::string_view chunk :
       pstrain::fuzz::SplitMessages({reinterpret_cast<const char*>(data) + 1, size - 1})) {
    if (!push.Take(chunk, data[0])) return 0;
  }
  push.Finish();
  return 0;
}
