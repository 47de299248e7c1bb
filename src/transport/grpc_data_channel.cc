#include "transport/grpc_data_channel.h"

#include <atomic>
#include <climits>
#include <functional>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/limits.h"
#include "common/rpc.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "transport/grpc_stream.h"

namespace pstrain {
namespace {

using google::protobuf::MessageLite;
using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;
using google::protobuf::io::CodedOutputStream;
using google::protobuf::io::StringOutputStream;

constexpr auto kLengthDelimited = WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
constexpr auto kVarint = WireFormatLite::WIRETYPE_VARINT;

size_t LengthDelimitedSize(int field, uint64_t length) {
  return WireFormatLite::TagSize(field, WireFormatLite::TYPE_BYTES) +
         CodedOutputStream::VarintSize64(length) + length;
}
void WriteLengthPrefix(int field, uint64_t length, CodedOutputStream* out) {
  out->WriteTag(WireFormatLite::MakeTag(field, kLengthDelimited));
  out->WriteVarint64(length);
}
// As protobuf writes a set sub-message field.
void WriteMessageField(int field, const MessageLite& m, CodedOutputStream* out) {
  WriteLengthPrefix(field, m.ByteSizeLong(), out);
  m.SerializeWithCachedSizes(out);
}

absl::Status CheckPush(const PushRequest& head, absl::Span<const ConstBytes> grads) {
  if (grads.size() != static_cast<size_t>(head.gradients_size())) {
    return absl::InvalidArgumentError(absl::StrCat("push of ", head.gradients_size(),
                                                   " gradients with ", grads.size(), " buffers"));
  }
  for (size_t i = 0; i < grads.size(); ++i) {
    const Gradient& g = head.gradients(i);
    if (!g.gradient().data().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("gradient \"", g.name(), "\" carries its data in the message"));
    }
    if (grads[i].size < 0 || (grads[i].size > 0 && grads[i].data == nullptr)) {
      return absl::InvalidArgumentError(
          absl::StrCat("gradient \"", g.name(), "\" has no valid buffer"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status EncodePushRequest(const PushRequest& head, absl::Span<const ConstBytes> grads,
                               void (*unref)(void*), void* user, grpc::ByteBuffer* out) {
  if (absl::Status s = CheckPush(head, grads); !s.ok()) return s;
  // Everything but the gradients' data, in wire order; cuts[k] is where data k goes.
  std::string bytes;
  std::vector<std::pair<size_t, size_t>> cuts;  // (offset in bytes, index in grads)
  {
    StringOutputStream stream(&bytes);
    CodedOutputStream o(&stream);
    if (head.has_sender()) WriteMessageField(PushRequest::kSenderFieldNumber, head.sender(), &o);
    for (size_t i = 0; i < grads.size(); ++i) {
      const Gradient& g = head.gradients(i);
      const int64_t n = grads[i].size;
      // Protobuf writes a sub-message that is set; the full gradient's tensor is set if it
      // has data.
      const bool has_tensor = g.has_gradient() || n > 0;
      const size_t tensor_size =
          g.gradient().ByteSizeLong() +
          (n > 0 ? LengthDelimitedSize(TensorProto::kDataFieldNumber, n) : 0);
      size_t size = 0;
      if (!g.name().empty())
        size += LengthDelimitedSize(Gradient::kNameFieldNumber, g.name().size());
      if (g.read_version() != 0) {
        size += WireFormatLite::TagSize(Gradient::kReadVersionFieldNumber,
                                        WireFormatLite::TYPE_UINT64) +
                WireFormatLite::UInt64Size(g.read_version());
      }
      if (has_tensor) size += LengthDelimitedSize(Gradient::kGradientFieldNumber, tensor_size);
      WriteLengthPrefix(PushRequest::kGradientsFieldNumber, size, &o);
      if (!g.name().empty()) {
        WriteLengthPrefix(Gradient::kNameFieldNumber, g.name().size(), &o);
        o.WriteRaw(g.name().data(), static_cast<int>(g.name().size()));
      }
      if (g.read_version() != 0) {
        o.WriteTag(WireFormatLite::MakeTag(Gradient::kReadVersionFieldNumber, kVarint));
        o.WriteVarint64(g.read_version());
      }
      if (!has_tensor) continue;
      WriteLengthPrefix(Gradient::kGradientFieldNumber, tensor_size, &o);
      g.gradient().SerializeWithCachedSizes(&o);  // its size was cached just above
      if (n > 0) {
        WriteLengthPrefix(TensorProto::kDataFieldNumber, n, &o);
        cuts.emplace_back(o.ByteCount(), i);
      }
    }
    if (head.has_tag()) WriteMessageField(PushRequest::kTagFieldNumber, head.tag(), &o);
  }
  // One owned slice of the small bytes, cut around slices over the caller's data.
  const grpc::Slice own(bytes);
  std::vector<grpc::Slice> slices;
  slices.reserve(2 * cuts.size() + 1);
  size_t at = 0;
  for (const auto& [offset, i] : cuts) {
    if (offset > at) slices.push_back(own.sub(at, offset));
    at = offset;
    slices.emplace_back(const_cast<void*>(grads[i].data), static_cast<size_t>(grads[i].size), unref,
                        user);
  }
  if (bytes.size() > at) slices.push_back(own.sub(at, bytes.size()));
  *out = grpc::ByteBuffer(slices.data(), slices.size());
  return absl::OkStatus();
}

namespace {

// What a value's TensorProto held, as read.
struct ValueRead {
  int64_t data_bytes = -1;  // -1: no data field
};

absl::Status Malformed() {
  return absl::DataLossError("the response is truncated or does not parse as a PullResponse");
}

// Reads a length-delimited message: `field(tag)` reads each field it knows and says whether it
// knew it (true) or not (false: skipped), or what is wrong.
template <typename Field>
absl::Status ReadMessage(CodedInputStream* in, Field field) {
  uint32_t length = 0;
  if (!in->ReadVarint32(&length)) return Malformed();
  const CodedInputStream::Limit limit = in->PushLimit(static_cast<int>(length));
  while (const uint32_t tag = in->ReadTag()) {
    absl::StatusOr<bool> known = field(tag);
    if (!known.ok()) return known.status();
    if (!*known && !WireFormatLite::SkipField(in, tag)) return Malformed();
  }
  if (!in->ConsumedEntireMessage()) return Malformed();
  in->PopLimit(limit);
  return absl::OkStatus();
}

// Reads a TensorProto: dtype and shape into `t`, data into `dest` once its length was checked
// against dest.size.
absl::Status ReadTensor(CodedInputStream* in, const MutableBytes& dest, TensorProto* t,
                        ValueRead* read) {
  return ReadMessage(in, [&](uint32_t tag) -> absl::StatusOr<bool> {
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    const auto wire = WireFormatLite::GetTagWireType(tag);
    uint64_t x = 0;
    if (field == TensorProto::kDtypeFieldNumber && wire == kVarint) {
      if (!in->ReadVarint64(&x)) return Malformed();
      t->set_dtype(static_cast<DataType>(static_cast<int32_t>(x)));
    } else if (field == TensorProto::kShapeFieldNumber && wire == kVarint) {
      if (!in->ReadVarint64(&x)) return Malformed();
      t->add_shape(static_cast<int64_t>(x));
    } else if (field == TensorProto::kShapeFieldNumber && wire == kLengthDelimited) {
      uint32_t packed = 0;
      if (!in->ReadVarint32(&packed)) return Malformed();
      const CodedInputStream::Limit dims = in->PushLimit(static_cast<int>(packed));
      while (in->BytesUntilLimit() > 0) {
        if (!in->ReadVarint64(&x)) return Malformed();
        t->add_shape(static_cast<int64_t>(x));
      }
      in->PopLimit(dims);
    } else if (field == TensorProto::kDataFieldNumber && wire == kLengthDelimited) {
      uint32_t n = 0;
      if (!in->ReadVarint32(&n)) return Malformed();
      if (static_cast<int64_t>(n) != dest.size) {
        return absl::InvalidArgumentError(
            absl::StrCat("has ", n, " bytes of data, the destination ", dest.size));
      }
      if (n > 0 && !in->ReadRaw(dest.data, static_cast<int>(n))) return Malformed();
      read->data_bytes = n;
    } else {
      return false;
    }
    return true;
  });
}

absl::Status ReadValue(CodedInputStream* in, const MutableBytes& dest, VariableValue* v,
                       ValueRead* read) {
  return ReadMessage(in, [&](uint32_t tag) -> absl::StatusOr<bool> {
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    const auto wire = WireFormatLite::GetTagWireType(tag);
    if (field == VariableValue::kNameFieldNumber && wire == kLengthDelimited) {
      if (!WireFormatLite::ReadString(in, v->mutable_name())) return Malformed();
    } else if (field == VariableValue::kVersionFieldNumber && wire == kVarint) {
      uint64_t x = 0;
      if (!in->ReadVarint64(&x)) return Malformed();
      v->set_version(x);
    } else if (field == VariableValue::kValueFieldNumber && wire == kLengthDelimited) {
      if (absl::Status s = ReadTensor(in, dest, v->mutable_value(), read); !s.ok()) return s;
    } else {
      return false;
    }
    return true;
  });
}

// What is wrong with value `v` read into `dest`, if anything.
absl::Status CheckValue(const VariableValue& v, const ValueRead& read, const MutableBytes& dest) {
  const TensorProto& t = v.value();
  if (t.dtype() != DT_FLOAT) {
    return absl::InvalidArgumentError(
        absl::StrCat("has dtype ", static_cast<int>(t.dtype()), ", not DT_FLOAT"));
  }
  const std::optional<int64_t> n =
      t.shape_size() <= kMaxTensorRank
          ? CheckedNumElements(std::vector<int64_t>(t.shape().begin(), t.shape().end()))
          : std::nullopt;
  const std::optional<int64_t> bytes = n ? CheckedMul(*n, sizeof(float)) : std::nullopt;
  if (!bytes || *bytes != dest.size) {
    return absl::InvalidArgumentError(absl::StrCat("has a shape of rank ", t.shape_size(),
                                                   " needing ", bytes ? absl::StrCat(*bytes) : "?",
                                                   " bytes, the destination ", dest.size));
  }
  if (std::max<int64_t>(read.data_bytes, 0) != dest.size) {
    return absl::InvalidArgumentError(absl::StrCat("has no data for its ", dest.size, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status DecodePullResponse(grpc::ByteBuffer* raw, absl::Span<const MutableBytes> dest,
                                PullResponse* resp) {
  resp->Clear();
  grpc::ProtoBufferReader reader(raw);
  if (!reader.status().ok()) return Malformed();
  CodedInputStream in(&reader);
  in.SetTotalBytesLimit(INT_MAX);
  std::vector<ValueRead> reads;
  reads.reserve(dest.size());
  auto bad_value = [&](size_t i, const absl::Status& s) {
    return absl::Status(
        s.code(), absl::StrCat("value ", i, " (\"", resp->values(i).name(), "\") ", s.message()));
  };
  while (const uint32_t tag = in.ReadTag()) {
    if (WireFormatLite::GetTagFieldNumber(tag) != PullResponse::kValuesFieldNumber ||
        WireFormatLite::GetTagWireType(tag) != kLengthDelimited) {
      if (!WireFormatLite::SkipField(&in, tag)) return Malformed();
      continue;
    }
    const size_t i = reads.size();
    if (i >= dest.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the response holds more than the ", dest.size(), " values asked for"));
    }
    reads.emplace_back();
    absl::Status s = ReadValue(&in, dest[i], resp->add_values(), &reads.back());
    if (!s.ok()) return absl::IsDataLoss(s) ? s : bad_value(i, s);
  }
  if (!in.ConsumedEntireMessage()) return Malformed();
  if (reads.size() != dest.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the response holds ", reads.size(),
                                                   " values for ", dest.size(), " asked for"));
  }
  for (size_t i = 0; i < dest.size(); ++i) {
    if (absl::Status s = CheckValue(resp->values(i), reads[i], dest[i]); !s.ok()) {
      return bad_value(i, s);
    }
  }
  return absl::OkStatus();
}

namespace {

// One call in flight: its context, buffers and outcome. `done` runs when the call completes:
// gRPC reads no byte of a finished call's request after that. Deleted once gRPC also dropped
// every slice over the caller's bytes (`refs`: one for the call, one per such slice). A call
// that failed before its request was sent (a PS killed mid-write) keeps those slices until its
// gRPC call is destroyed, which the context's destruction (in the completion) allows, so `done`
// must not wait for them.
struct Call {
  std::unique_ptr<grpc::ClientContext> ctx = std::make_unique<grpc::ClientContext>();
  grpc::ByteBuffer request, response;
  CallCanceller* canceller = nullptr;
  DoneFn done;
  std::atomic<int> refs{1};
};

void Unref(void* p) {
  Call* c = static_cast<Call*>(p);
  if (c->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete c;
}

int64_t TotalBytes(const auto& buffers) {
  int64_t total = 0;
  for (const auto& b : buffers) total = CheckedAdd(total, b.size).value_or(INT64_MAX);
  return total;
}

class GrpcDataChannel final : public DataChannel {
 public:
  explicit GrpcDataChannel(const std::string& address)
      : peer_(std::make_shared<const std::string>(address)),
        channel_(MakeChannel(address)),
        stub_(channel_) {}

  void Push(const CallOptions& options, const PushRequest& head, std::vector<ConstBytes> grads,
            PushResponse* resp, DoneFn done) override {
    if (TotalBytes(grads) > kMaxPayloadBytes) {
      StreamPush(channel_.get(), *peer_, options, head, std::move(grads), resp, std::move(done));
      return;
    }
    auto* c = new Call;
    int slices = 0;
    for (const ConstBytes& g : grads) slices += g.size > 0;
    c->refs.store(1 + slices);
    absl::Status s = EncodePushRequest(head, grads, &Unref, c, &c->request);
    if (!s.ok()) {  // no slice refers to `c`
      delete c;
      done(absl::Status(s.code(), absl::StrCat("Push at ", *peer_, ": ", s.message())));
      return;
    }
    c->done = std::move(done);
    Start(c, options, "Push", [c, resp] {
      grpc::ProtoBufferReader reader(&c->response);
      return resp->ParseFromZeroCopyStream(&reader)
                 ? absl::OkStatus()
                 : absl::DataLossError("the response does not parse as a PushResponse");
    });
  }

  void Pull(const CallOptions& options, const PullRequest& req, std::vector<MutableBytes> dest,
            PullResponse* resp, DoneFn done) override {
    if (TotalBytes(dest) > kMaxPayloadBytes) {
      StreamPull(channel_.get(), *peer_, options, req, std::move(dest), resp, std::move(done));
      return;
    }
    auto* c = new Call;
    c->done = std::move(done);
    const grpc::Slice bytes(req.SerializeAsString());
    c->request = grpc::ByteBuffer(&bytes, 1);
    Start(c, options, "Pull", [c, resp, dest = std::move(dest)] {
      return DecodePullResponse(&c->response, dest, resp);
    });
  }

  const char* name() const override { return "grpc"; }

 private:
  // Starts `c` on method `what`; `finish` reads the response of a call that succeeded.
  void Start(Call* c, const CallOptions& options, const char* what,
             std::function<absl::Status()> finish) {
    // gRPC keeps a pointer to the method's name: these outlive every call.
    static const std::string* const kPush = new std::string("/pstrain.ParameterServerService/Push");
    static const std::string* const kPull = new std::string("/pstrain.ParameterServerService/Pull");
    if (options.deadline != absl::InfiniteFuture()) {
      c->ctx->set_deadline(absl::ToChronoTime(options.deadline));
    }
    c->ctx->set_wait_for_ready(options.wait_for_ready);
    if (options.canceller != nullptr) {
      c->canceller = options.canceller;
      c->canceller->Add(c->ctx.get());
    }
    const std::string& method = std::string_view(what) == "Push" ? *kPush : *kPull;
    stub_.UnaryCall(c->ctx.get(), method, grpc::StubOptions(), &c->request, &c->response,
                    [peer = peer_, c, what, finish = std::move(finish)](grpc::Status gs) {
                      if (c->canceller != nullptr) c->canceller->Remove(c->ctx.get());
                      absl::Status s = FromGrpcStatus(gs, what, *peer);
                      if (s.ok()) s = finish();
                      if (!s.ok() && gs.ok()) {
                        s = absl::Status(s.code(),
                                         absl::StrCat(what, " at ", *peer, ": ", s.message()));
                      }
                      c->request.Clear();  // drops this call's references to the slices
                      // Lets gRPC destroy the call, and with it the slices a failed send holds.
                      c->ctx.reset();
                      DoneFn done = std::move(c->done);
                      Unref(c);
                      done(std::move(s));
                    });
  }

  // Shared with the calls' callbacks, which may outlive this channel.
  const std::shared_ptr<const std::string> peer_;
  const std::shared_ptr<grpc::Channel> channel_;
  grpc::GenericStub stub_;
};

}  // namespace

std::unique_ptr<DataChannel> MakeGrpcDataChannel(const std::string& address) {
  return std::make_unique<GrpcDataChannel>(address);
}

}  // namespace pstrain
