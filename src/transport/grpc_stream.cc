// The client end of TensorStreamService: StreamPush and StreamPull on gRPC's callback API with
// raw messages (transport/stream_chunks.h). A push's chunks are slices over the caller's own
// bytes (no copy: they stay valid until `done`, which runs after gRPC let go of every slice); a
// pull's chunks are copied from gRPC's slices straight into dest[i].

#include "transport/grpc_stream.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/rpc.h"
#include "grpcpp/generic/generic_stub.h"
#include "transport/stream_chunks.h"

namespace pstrain {
namespace {

using stream_chunks::ChunkOrder;
using stream_chunks::ParsedChunk;

// One streamed call: its context (deadline, wait_for_ready, canceller) and its outcome, handed to
// `done` once gRPC is finished with the call. Deletes itself.
class StreamCall : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  StreamCall(grpc::Channel* channel, std::string peer, const CallOptions& options, const char* what,
             DoneFn done)
      : stub_(channel->shared_from_this()),
        peer_(std::move(peer)),
        what_(what),
        canceller_(options.canceller),
        done_(std::move(done)) {
    if (options.deadline != absl::InfiniteFuture()) {
      ctx_.set_deadline(absl::ToChronoTime(options.deadline));
    }
    ctx_.set_wait_for_ready(options.wait_for_ready);
  }

  void OnDone(const grpc::Status& s) override {
    if (canceller_) canceller_->Remove(&ctx_);
    absl::Status result;
    if (!error_.ok()) {
      result =
          absl::Status(error_.code(), absl::StrCat(what_, " at ", peer_, ": ", error_.message()));
    } else if (!s.ok()) {
      result = FromGrpcStatus(s, what_, peer_);
    } else {
      result = Finished();
      if (!result.ok()) {
        result =
            absl::Status(result.code(), absl::StrCat(what_, " at ", peer_, ": ", result.message()));
      }
    }
    DoneFn done = std::move(done_);
    delete this;
    done(result);
  }

 protected:
  // Starts the call on `method`: reads into `in` from the start and writes `out` first (and
  // last, with `last`). The subclass's last act: callbacks may run at once on other threads.
  void Begin(const char* method, grpc::ByteBuffer* in, const grpc::ByteBuffer* out, bool last) {
    stub_.PrepareBidiStreamingCall(&ctx_, method, grpc::StubOptions(), this);
    if (canceller_) canceller_->Add(&ctx_);
    StartRead(in);
    if (last) {
      StartWriteLast(out, grpc::WriteOptions());
    } else {
      StartWrite(out);
    }
    StartCall();
  }
  // Ends the call with `s` (an error this end found), whatever the PS answers.
  void Fail(absl::Status s) {
    error_ = std::move(s);
    ctx_.TryCancel();
  }
  // The outcome of a call gRPC ended with OK.
  virtual absl::Status Finished() = 0;

 private:
  grpc::GenericStub stub_;
  grpc::ClientContext ctx_;
  const std::string peer_;
  const char* const what_;
  CallCanceller* const canceller_;
  DoneFn done_;
  absl::Status error_;  // found by this end
};

class PushCall final : public StreamCall {
 public:
  PushCall(grpc::Channel* channel, std::string peer, const CallOptions& options,
           const PushRequest& head, std::vector<ConstBytes> grads, std::vector<int64_t> sizes,
           PushResponse* resp, DoneFn done)
      : StreamCall(channel, std::move(peer), options, "Push", std::move(done)),
        grads_(std::move(grads)),
        order_(std::move(sizes), std::vector<std::string>(grads_.size())),
        resp_(resp) {
    out_ = stream_chunks::HeadChunk(head);
    Begin(stream_chunks::kPushMethod, &in_, &out_, /*last=*/false);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) return;  // the call ended: OnDone says why
    int index;
    int64_t offset, size;
    if (!order_.Next(&index, &offset, &size)) return StartWritesDone();
    const char* base = static_cast<const char*>(grads_[index].data);
    out_ = stream_chunks::DataChunk(index, offset,
                                    grpc::Slice(base + offset, size, grpc::Slice::STATIC_SLICE));
    StartWrite(&out_);
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    grpc::Slice all;
    answered_ = in_.DumpToSingleSlice(&all).ok() &&
                resp_->ParseFromArray(all.begin(), static_cast<int>(all.size()));
    if (!answered_) Fail(absl::InternalError("the PS's answer is not a PushResponse"));
  }

 private:
  absl::Status Finished() override {
    if (!answered_) return absl::InternalError("the push stream ended with no answer");
    return absl::OkStatus();
  }

  const std::vector<ConstBytes> grads_;
  ChunkOrder order_;
  PushResponse* const resp_;
  grpc::ByteBuffer out_;
  grpc::ByteBuffer in_;
  bool answered_ = false;
};

class PullCall final : public StreamCall {
 public:
  PullCall(grpc::Channel* channel, std::string peer, const CallOptions& options,
           const PullRequest& req, std::vector<MutableBytes> dest, PullResponse* resp, DoneFn done)
      : StreamCall(channel, std::move(peer), options, "Pull", std::move(done)),
        req_(req),
        dest_(std::move(dest)),
        resp_(resp) {
    grpc::Slice request(req.SerializeAsString());
    out_ = grpc::ByteBuffer(&request, 1);
    Begin(stream_chunks::kPullMethod, &in_, &out_, /*last=*/true);
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // the PS finished the stream: OnDone says how
    if (absl::Status s = Take(); !s.ok()) return Fail(s);
    StartRead(&in_);
  }

 private:
  absl::Status Take() {
    ParsedChunk chunk;
    if (absl::Status s = chunk.Parse(in_); !s.ok()) return s;
    in_.Clear();
    if (chunk.has_head()) {
      if (order_) return absl::InternalError("the PS sent a second head");
      if (!resp_->ParseFromString(chunk.head())) {
        return absl::InternalError("the PS's head is not a PullResponse");
      }
      return Prepare();
    }
    if (!order_) return absl::InternalError("the PS sent data before the head");
    if (absl::Status s = order_->Accept(chunk.index(), chunk.offset(), chunk.data_size());
        !s.ok()) {
      return absl::InternalError(absl::StrCat("the PS's stream is malformed: ", s.message()));
    }
    chunk.CopyData(static_cast<char*>(dest_[chunk.index()].data) + chunk.offset());
    return absl::OkStatus();
  }

  // Each value's bytes, from its dtype and shape, must be what its destination holds.
  absl::Status Prepare() {
    if (resp_->values_size() != req_.names_size()) {
      return absl::InternalError(absl::StrCat("the PS answered ", resp_->values_size(),
                                              " values for ", req_.names_size(), " names"));
    }
    std::vector<int64_t> sizes;
    std::vector<std::string> names;
    for (int i = 0; i < resp_->values_size(); ++i) {
      const VariableValue& v = resp_->values(i);
      names.push_back(absl::StrCat("variable '", v.name(), "'"));
      absl::StatusOr<int64_t> bytes = stream_chunks::StreamedBytes(v.value(), names.back());
      if (!bytes.ok()) return absl::InternalError(bytes.status().message());
      if (*bytes != dest_[i].size) {
        return absl::InvalidArgumentError(
            absl::StrCat(names.back(), " has ", *bytes, " bytes, its destination ", dest_[i].size));
      }
      sizes.push_back(*bytes);
    }
    order_.emplace(std::move(sizes), std::move(names));
    return absl::OkStatus();
  }

  absl::Status Finished() override {
    if (!order_) return absl::InternalError("the pull stream ended with no head");
    if (!order_->done()) {
      return absl::DataLossError(
          absl::StrCat("the pull stream ended before its last byte: ", order_->Missing()));
    }
    return absl::OkStatus();
  }

  const PullRequest& req_;
  const std::vector<MutableBytes> dest_;
  PullResponse* const resp_;
  std::optional<ChunkOrder> order_;  // set by the head
  grpc::ByteBuffer out_;
  grpc::ByteBuffer in_;
};

}  // namespace

void StreamPush(grpc::Channel* channel, const std::string& peer, const CallOptions& options,
                const PushRequest& head, std::vector<ConstBytes> grads, PushResponse* resp,
                DoneFn done) {
  auto bad = [&](auto... parts) {
    done(absl::InvalidArgumentError(absl::StrCat("Push at ", peer, ": ", parts...)));
  };
  if (grads.size() != static_cast<size_t>(head.gradients_size())) {
    return bad(head.gradients_size(), " gradients with the bytes of ", grads.size());
  }
  std::vector<int64_t> sizes;
  for (int i = 0; i < head.gradients_size(); ++i) {
    const std::string what = absl::StrCat("gradient ", i, " '", head.gradients(i).name(), "'");
    absl::StatusOr<int64_t> bytes =
        stream_chunks::StreamedBytes(head.gradients(i).gradient(), what);
    if (!bytes.ok()) return bad(bytes.status().message());
    if (*bytes != grads[i].size || (*bytes > 0 && grads[i].data == nullptr)) {
      return bad(what, " has ", grads[i].size, " bytes, its dtype and shape need ", *bytes);
    }
    sizes.push_back(*bytes);
  }
  new PushCall(channel, peer, options, head, std::move(grads), std::move(sizes), resp,
               std::move(done));
}

void StreamPull(grpc::Channel* channel, const std::string& peer, const CallOptions& options,
                const PullRequest& req, std::vector<MutableBytes> dest, PullResponse* resp,
                DoneFn done) {
  if (dest.size() != static_cast<size_t>(req.names_size())) {
    return done(absl::InvalidArgumentError(absl::StrCat(
        "Pull at ", peer, ": ", req.names_size(), " variables into ", dest.size(), " buffers")));
  }
  resp->Clear();
  new PullCall(channel, peer, options, req, std::move(dest), resp, std::move(done));
}

}  // namespace pstrain
