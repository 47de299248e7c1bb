// The server end of TensorStreamService (grpc_stream.h MakeTensorStreamService) over a
// DataHandler, on gRPC's callback API with raw messages (transport/stream_chunks.h).
//
// Memory: a push holds each gradient once, in a buffer sized from its variable (never from the
// request's claim) and filled chunk by chunk straight from gRPC's slices (it is applied only once
// all of it arrived, so a gradient with a non-finite value changes nothing); a pull sends chunks
// as slices over the variable's own values, which the PS lends without its lock (a push
// meanwhile updates a copy of the variable), letting go as soon as the last chunk is written.

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/limits.h"
#include "common/raw_call.h"
#include "common/rpc.h"
#include "stream.grpc.pb.h"
#include "transport/grpc_stream.h"
#include "transport/grpc_wire.h"
#include "transport/stream_chunks.h"

namespace pstrain {
namespace {

using stream_chunks::ChunkOrder;
using stream_chunks::ParsedChunk;

// Bytes held for one tensor of a stream.
struct Block {
  std::unique_ptr<char[]> bytes;
  int64_t size = 0;
};
absl::StatusOr<std::shared_ptr<Block>> Allocate(int64_t size, const std::string& what) {
  auto block = std::make_shared<Block>();
  block->size = size;
  // Not zeroed: every byte is written before it is read, and untouched pages cost nothing.
  block->bytes.reset(new (std::nothrow) char[std::max<int64_t>(size, 1)]);
  if (!block->bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("not enough memory on the PS for the ", size, " bytes of ", what));
  }
  return block;
}

class PushReactor final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  PushReactor(grpc::CallbackServerContext* ctx, grpc::ByteBuffer* response, DataHandler* handler)
      : ctx_(ctx), response_(response), handler_(handler) {
    if (absl::Status s = CheckCallToken(*ctx, stream_chunks::kPushMethod); !s.ok()) {
      End(s);
      return;
    }
    StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) return Complete();  // the client closed its end, or the call broke
    request_bytes_ += in_.Length();
    if (absl::Status s = Take(); !s.ok()) return End(s);
    StartRead(&in_);
  }
  void OnDone() override { delete this; }

 private:
  absl::Status Take() {
    ParsedChunk chunk;
    if (absl::Status s = chunk.Parse(in_); !s.ok()) return s;
    in_.Clear();
    if (chunk.has_head()) {
      if (order_) return Bad("a second head after the first chunk");
      if (!head_.ParseFromString(chunk.head())) return Bad("a head that is not a PushRequest");
      return Prepare();
    }
    if (!order_) return Bad("data before the head");
    if (absl::Status s = order_->Accept(chunk.index(), chunk.offset(), chunk.data_size());
        !s.ok()) {
      return Bad(s.message());
    }
    chunk.CopyData(blocks_[chunk.index()]->bytes.get() + chunk.offset());
    return absl::OkStatus();
  }

  // Checks the head against the variables the PS holds, then takes one buffer per gradient.
  absl::Status Prepare() {
    const int n = head_.gradients_size();
    if (n > kMaxVariablesPerRequest) {
      return Bad(absl::StrCat(n, " gradients, over the limit of ", kMaxVariablesPerRequest));
    }
    std::vector<int64_t> sizes(n);
    std::vector<std::string> names(n);
    absl::flat_hash_set<std::string> seen;
    for (int i = 0; i < n; ++i) {
      const Gradient& g = head_.gradients(i);
      names[i] = absl::StrCat("gradient ", i, " '", g.name(), "'");
      if (!seen.insert(g.name()).second) return Bad(absl::StrCat(names[i], " is repeated"));
      absl::StatusOr<int64_t> claimed = stream_chunks::StreamedBytes(g.gradient(), names[i]);
      if (!claimed.ok()) return Bad(claimed.status().message());
      absl::StatusOr<int64_t> held = handler_->VariableBytes(g.name());
      if (!held.ok()) return held.status();
      if (*claimed > *held) {
        return Bad(
            absl::StrCat(names[i], " claims ", *claimed, " bytes; its variable holds ", *held));
      }
      sizes[i] = *claimed;
    }
    // Only now, with every size bounded by what the PS holds, is anything large allocated.
    for (int i = 0; i < n; ++i) {
      absl::StatusOr<std::shared_ptr<Block>> block = Allocate(sizes[i], names[i]);
      if (!block.ok()) return block.status();
      grads_.push_back({(*block)->bytes.get(), sizes[i]});
      blocks_.push_back(*std::move(block));
    }
    order_.emplace(std::move(sizes), std::move(names));
    return absl::OkStatus();
  }

  void Complete() {
    if (ctx_->IsCancelled()) return End(absl::CancelledError("the push stream was cancelled"));
    if (!order_) return End(Bad("a stream with no head"));
    if (!order_->done()) {
      return End(Bad(absl::StrCat("the stream ended before its last byte: ", order_->Missing())));
    }
    handler_->Push(head_, grads_, &resp_, [this](absl::Status s) {
      blocks_.clear();  // the gradients were applied (or refused); free them before answering
      grads_.clear();
      if (s.ok()) s = SerializeResponse(resp_, stream_chunks::kPushMethod, response_);
      End(s);
    });
  }

  absl::Status Bad(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("streamed push: ", what));
  }
  void End(const absl::Status& s) {
    ObserveServedRpc(stream_chunks::kPushMethod, s.code(), request_bytes_,
                     s.ok() ? response_->Length() : 0, absl::Now() - start_);
    Finish(ToGrpcStatus(s));
  }

  grpc::CallbackServerContext* const ctx_;
  grpc::ByteBuffer* const response_;
  DataHandler* const handler_;
  const absl::Time start_ = absl::Now();
  size_t request_bytes_ = 0;
  grpc::ByteBuffer in_;
  PushRequest head_;
  std::optional<ChunkOrder> order_;  // set once the head was accepted
  std::vector<std::shared_ptr<Block>> blocks_;
  std::vector<ConstBytes> grads_;
  PushResponse resp_;
};

class PullReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  PullReactor(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
              DataHandler* handler) {
    absl::Status s = CheckCallToken(*ctx, stream_chunks::kPullMethod);
    if (s.ok()) s = ParseRequest(*request, stream_chunks::kPullMethod, &req_);
    if (!s.ok()) {
      End(s);
      return;
    }
    // The PS calls the sink and `done` before this reactor can end (it ends only through End).
    handler->Pull(
        req_, &resp_,
        [this](int i, const float* v, int64_t n, const std::shared_ptr<const void>& keep) {
          return Sink(i, v, n, keep);
        },
        [this](absl::Status s) { Served(s); });
  }

  void OnWriteDone(bool ok) override {
    if (!ok) return End(absl::CancelledError("the client stopped reading the pull stream"));
    WriteNext();
  }
  void OnDone() override { delete this; }

 private:
  // Under the variable's lock: the variable's own values, lent until their last chunk is sent.
  absl::Status Sink(int index, const float* values, int64_t count,
                    const std::shared_ptr<const void>& keep) {
    if (index != static_cast<int>(values_.size())) {
      return absl::InternalError("the PS gave a pull's values out of order");
    }
    values_.push_back({{values, count * static_cast<int64_t>(sizeof(float))}, keep});
    return absl::OkStatus();
  }

  void Served(absl::Status s) {
    if (s.ok() && values_.size() != static_cast<size_t>(resp_.values_size())) {
      s = absl::InternalError("the PS answered a pull without every value");
    }
    if (!s.ok()) return End(s);
    std::vector<int64_t> sizes;
    std::vector<std::string> names;
    for (const LentBytes& v : values_) sizes.push_back(v.bytes.size);
    for (const VariableValue& v : resp_.values()) names.push_back(v.name());
    order_.emplace(std::move(sizes), std::move(names));
    out_ = stream_chunks::HeadChunk(resp_);
    response_bytes_ += out_.Length();
    StartWrite(&out_);
  }

  void WriteNext() {
    // Values already sent are let go here; a slice still held by gRPC keeps its own reference.
    while (released_ < values_.size() && released_ < next_index_) values_[released_++].keep.reset();
    int index;
    int64_t offset, size;
    if (!order_->Next(&index, &offset, &size)) {
      values_.clear();
      return End(absl::OkStatus());
    }
    next_index_ = index;
    const LentBytes& v = values_[index];
    auto* ref = new std::shared_ptr<const void>(v.keep);
    // Only read: gRPC sends it.
    char* bytes = static_cast<char*>(const_cast<void*>(v.bytes.data));
    grpc::Slice data(
        bytes + offset, size, [](void* p) { delete static_cast<std::shared_ptr<const void>*>(p); },
        ref);
    out_ = stream_chunks::DataChunk(index, offset, std::move(data));
    response_bytes_ += size;
    StartWrite(&out_);
  }

  void End(const absl::Status& s) {
    ObserveServedRpc(stream_chunks::kPullMethod, s.code(), req_.ByteSizeLong(), response_bytes_,
                     absl::Now() - start_);
    Finish(ToGrpcStatus(s));
  }

  const absl::Time start_ = absl::Now();
  PullRequest req_;
  PullResponse resp_;
  std::vector<LentBytes> values_;  // the variables' own values, until sent
  std::optional<ChunkOrder> order_;
  size_t next_index_ = 0;  // the value being sent
  size_t released_ = 0;    // values before this one were freed
  size_t response_bytes_ = 0;
  grpc::ByteBuffer out_;
};

using Base = TensorStreamService::WithRawCallbackMethod_PushStream<
    TensorStreamService::WithRawCallbackMethod_PullStream<TensorStreamService::Service>>;

class TensorStreamServiceImpl final : public Base {
 public:
  explicit TensorStreamServiceImpl(DataHandler* handler) : handler_(handler) {}

  grpc::ServerReadReactor<grpc::ByteBuffer>* PushStream(grpc::CallbackServerContext* ctx,
                                                        grpc::ByteBuffer* response) override {
    return new PushReactor(ctx, response, handler_);
  }
  grpc::ServerWriteReactor<grpc::ByteBuffer>* PullStream(grpc::CallbackServerContext* ctx,
                                                         const grpc::ByteBuffer* request) override {
    return new PullReactor(ctx, request, handler_);
  }

 private:
  DataHandler* const handler_;
};

}  // namespace

std::unique_ptr<grpc::Service> MakeTensorStreamService(DataHandler* handler) {
  return std::make_unique<TensorStreamServiceImpl>(handler);
}

}  // namespace pstrain
