// Internal to src/transport: the chunks of TensorStreamService (proto/stream.proto) written and
// read by hand, so tensor bytes go between the caller's memory and gRPC's slices with no protobuf
// string between, and the order every stream's data chunks follow.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "google/protobuf/message.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "tensor.pb.h"

namespace pstrain::stream_chunks {

// Bytes of one chunk: large enough that per-message costs vanish next to the copy, small enough
// that a stream holds little besides the tensor itself, and with its header within gRPC's
// default 4 MiB message limit, so a channel without pstrain's limits carries it too.
inline constexpr int64_t kStreamChunkBytes = (int64_t{4} << 20) - 4096;

inline constexpr char kPushMethod[] = "/pstrain.TensorStreamService/PushStream";
inline constexpr char kPullMethod[] = "/pstrain.TensorStreamService/PullStream";

// A chunk carrying only `head` (field 1): the PushRequest or PullResponse itself.
grpc::ByteBuffer HeadChunk(const google::protobuf::Message& head);
// A chunk carrying bytes of tensor `index` from `offset`; `data` holds them (not copied).
grpc::ByteBuffer DataChunk(int index, int64_t offset, grpc::Slice data);

// One received chunk, parsed without copying its data: the data stays in the message's slices
// until CopyData.
class ParsedChunk {
 public:
  // InvalidArgument saying how `buf` is not a chunk (a truncated field, a wrong wire type, a
  // field given twice, a chunk with both a head and data).
  absl::Status Parse(const grpc::ByteBuffer& buf);
  bool has_head() const { return has_head_; }
  const std::string& head() const { return head_; }  // serialized
  uint64_t index() const { return index_; }
  uint64_t offset() const { return offset_; }
  int64_t data_size() const { return data_size_; }
  // Copies the data_size() bytes into `dest`.
  void CopyData(void* dest) const;

 private:
  std::vector<grpc::Slice> slices_;
  bool has_head_ = false;
  std::string head_;
  uint64_t index_ = 0;
  uint64_t offset_ = 0;
  int64_t data_size_ = 0;
  size_t data_slice_ = 0;  // where the data starts
  size_t data_pos_ = 0;
};

// Bytes a tensor of `t`'s dtype and shape holds (t's data itself must be empty: it travels in
// chunks); InvalidArgument naming `what` for data in the head, an unknown dtype, or a shape
// that is negative, overflows or passes kMaxTensorBytes.
absl::StatusOr<int64_t> StreamedBytes(const TensorProto& t, const std::string& what);

// The order of a stream's data chunks: tensors in order, each from offset 0 to its size, in
// chunks of at most kStreamChunkBytes; empty tensors have none. Used by both ends: the sender
// asks Next, the receiver checks each chunk with Accept.
class ChunkOrder {
 public:
  // `names` label the tensors in errors ("gradient 0 'w'").
  ChunkOrder(std::vector<int64_t> sizes, std::vector<std::string> names);
  // The next chunk to send; false once all were.
  bool Next(int* index, int64_t* offset, int64_t* size);
  // OK if `size` bytes at (`index`, `offset`) are the next expected; InvalidArgument naming the
  // tensor otherwise (out of order, past its end, empty). Advances past them.
  absl::Status Accept(uint64_t index, uint64_t offset, int64_t size);
  // Every byte arrived; otherwise Missing says which did not.
  bool done() const;
  std::string Missing() const;

 private:
  void SkipFull();
  std::vector<int64_t> sizes_;
  std::vector<std::string> names_;
  size_t at_ = 0;    // the tensor being filled (or sent)
  int64_t got_ = 0;  // its bytes so far
};

}  // namespace pstrain::stream_chunks
