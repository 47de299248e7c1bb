#include "transport/grpc_wire.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/limits.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpc/slice.h"
#include "grpcpp/support/slice.h"

namespace pstrain {
namespace {

using google::protobuf::io::CodedInputStream;
using google::protobuf::io::CodedOutputStream;
using google::protobuf::io::StringOutputStream;
using WFL = google::protobuf::internal::WireFormatLite;

// Field numbers of proto/ps.proto and proto/tensor.proto that the reader and writer walk.
constexpr int kPushGradients = 2;   // PushRequest.gradients
constexpr int kGradientTensor = 3;  // Gradient.gradient
constexpr int kTensorData = 3;      // TensorProto.data
constexpr int kPullValues = 1;      // PullResponse.values
constexpr int kValueTensor = 3;     // VariableValue.value

// Every field a reader does not take out of line, kept as bytes (tag included) for protobuf to
// parse afterwards. Parsing the concatenation merges the fields as parsing them in place would,
// so the result is protobuf's, with its checks (UTF-8 of strings, nesting depth, groups).
class Rest {
 public:
  Rest() : stream_(&bytes_), out_(std::make_unique<CodedOutputStream>(&stream_)) {}
  Rest(const Rest&) = delete;
  Rest& operator=(const Rest&) = delete;
  CodedOutputStream* out() { return out_.get(); }
  bool ParseInto(google::protobuf::MessageLite* msg) {
    out_.reset();  // flushes into bytes_
    return msg->ParseFromString(bytes_);
  }

 private:
  std::string bytes_;
  StringOutputStream stream_;
  std::unique_ptr<CodedOutputStream> out_;
};

// Protobuf's parser reads a key or a length in at most 5 bytes; CodedInputStream reads up to 10
// and drops the high bits. These read as protobuf's parser does, so that what it refuses is
// refused here too: 0 for a bad key (or field number 0), false for a bad length.
constexpr int kMaxVarint32Bytes = 5;
uint32_t ReadKey(CodedInputStream* in) {
  const int at = in->CurrentPosition();
  const uint32_t tag = in->ReadTag();
  return in->CurrentPosition() - at <= kMaxVarint32Bytes ? tag : 0;
}
bool ReadLength(CodedInputStream* in, int* len) {
  const int at = in->CurrentPosition();
  return in->ReadVarintSizeAsInt(len) && in->CurrentPosition() - at <= kMaxVarint32Bytes;
}

// Copies the field of `tag` to `out` as WireFormatLite::SkipField does, reading each key and
// length (a group's fields' too) as protobuf's parser would.
bool CopyField(CodedInputStream* in, uint32_t tag, CodedOutputStream* out) {
  switch (WFL::GetTagWireType(tag)) {
    case WFL::WIRETYPE_LENGTH_DELIMITED: {
      int len = 0;
      std::string bytes;
      if (!ReadLength(in, &len) || len > in->BytesUntilLimit()) return false;
      if (!in->ReadString(&bytes, len)) return false;
      out->WriteTag(tag);
      out->WriteVarint32(static_cast<uint32_t>(len));
      out->WriteString(bytes);
      return true;
    }
    case WFL::WIRETYPE_START_GROUP: {
      if (!in->IncrementRecursionDepth()) return false;  // protobuf's nesting limit
      out->WriteTag(tag);
      while (true) {
        const uint32_t inner = ReadKey(in);
        if (inner == 0) return false;
        if (inner == WFL::MakeTag(WFL::GetTagFieldNumber(tag), WFL::WIRETYPE_END_GROUP)) {
          out->WriteTag(inner);
          in->DecrementRecursionDepth();
          return true;
        }
        if (!CopyField(in, inner, out)) return false;
      }
    }
    default:  // varints and fixed-size values have no key or length inside
      return WFL::SkipField(in, tag, out);
  }
}

// Walks the fields up to the current limit: length-delimited fields numbered `field` go to
// `take`, which reads them; every other field is copied to `rest`.
template <typename Take>
bool ReadFields(CodedInputStream* in, int field, Rest* rest, Take&& take) {
  const uint32_t wanted = WFL::MakeTag(field, WFL::WIRETYPE_LENGTH_DELIMITED);
  while (in->BytesUntilLimit() > 0) {
    const uint32_t tag = ReadKey(in);
    if (tag == 0) return false;  // a bad varint, or field number 0
    if (tag == wanted) {
      if (!take()) return false;
    } else if (!CopyField(in, tag, rest->out())) {
      return false;
    }
  }
  return true;
}

// Reads the length of a length-delimited field, checks it against what holds it, and runs
// `body` with the field as the limit.
template <typename Body>
bool ReadNested(CodedInputStream* in, Body&& body) {
  int len = 0;
  if (!ReadLength(in, &len) || len > in->BytesUntilLimit()) return false;
  const auto limit = in->PushLimit(len);
  if (!body(len)) return false;
  in->PopLimit(limit);
  return true;
}

class PushReader {
  struct Fields {
    Rest grad;
    Rest tensor;
    bool has_tensor = false;
  };

 public:
  PushReader(CodedInputStream* in, BufferPool* pool, PushPayload* out)
      : in_(in), pool_(pool), out_(out) {}

  // Every field but the tensors' data goes to protobuf: the request's to one Rest, each
  // gradient's to its own, each gradient's tensor's (all its occurrences, which protobuf merges)
  // to another.
  bool Read() {
    Rest rest;
    std::deque<Fields> grads;  // a deque: a Rest must not move
    const bool ok = ReadFields(in_, kPushGradients, &rest, [&] {
      // The PS refuses more anyway; stopping here bounds what a request of tiny gradients costs.
      if (grads.size() >= static_cast<size_t>(kMaxVariablesPerRequest)) {
        too_many_ = true;
        return false;
      }
      Fields& g = grads.emplace_back();
      out_->data.emplace_back();
      out_->ranges.emplace_back();
      return ReadNested(in_, [&](int) {
        return ReadFields(in_, kGradientTensor, &g.grad, [&] {
          g.has_tensor = true;
          return ReadNested(in_, [&](int) {
            return ReadFields(in_, kTensorData, &g.tensor, [&] {
              return ReadNested(in_, [&](int len) { return ReadData(len); });
            });
          });
        });
      });
    });
    if (!ok || !rest.ParseInto(&out_->head)) return false;
    for (Fields& f : grads) {
      Gradient* g = out_->head.add_gradients();
      if (!f.grad.ParseInto(g)) return false;
      if (f.has_tensor && !f.tensor.ParseInto(g->mutable_gradient())) return false;
    }
    return true;
  }
  // Whether Read failed for more than kMaxVariablesPerRequest gradients.
  bool too_many() const { return too_many_; }

 private:
  // The data, last occurrence winning as for any singular field: in place when the current
  // slice holds all of it at an address floats can be read from, else copied once if small, else
  // left in place as one piece per slice.
  bool ReadData(int len) {
    ConstBytes& bytes = out_->data.back();
    out_->ranges.back() = {};
    const void* ptr = nullptr;
    int avail = 0;
    if (len == 0) {
      bytes = {};
      return true;
    }
    if (in_->GetDirectBufferPointer(&ptr, &avail) && avail >= len &&
        reinterpret_cast<uintptr_t>(ptr) % alignof(float) == 0) {
      bytes = {ptr, len};
      return in_->Skip(len);
    }
    if (len >= PushPayload::kCopyBelowBytes) {
      bytes = {};
      PushPayload::Range& range = out_->ranges.back();
      range.begin = out_->piece_store.size();
      while (len > 0) {
        if (!in_->GetDirectBufferPointer(&ptr, &avail) || avail <= 0) return false;
        const int take = std::min(avail, len);
        out_->piece_store.push_back({ptr, take});
        if (!in_->Skip(take)) return false;
        len -= take;
      }
      range.count = out_->piece_store.size() - range.begin;
      return true;
    }
    BufferPool::Buffer copy = pool_->Get(len);
    if (!in_->ReadRaw(copy.data(), len)) return false;
    bytes = {copy.data(), len};
    out_->copies.push_back(std::move(copy));
    return true;
  }

  CodedInputStream* const in_;
  BufferPool* const pool_;
  PushPayload* const out_;
  bool too_many_ = false;  // more than kMaxVariablesPerRequest gradients
};

void AppendVarint(uint64_t v, std::string* out) {
  uint8_t buf[10];  // the longest varint
  const uint8_t* end = CodedOutputStream::WriteVarint64ToArray(v, buf);
  out->append(reinterpret_cast<const char*>(buf), end - buf);
}

void AppendLengthPrefix(int field, uint64_t len, std::string* out) {
  AppendVarint(WFL::MakeTag(field, WFL::WIRETYPE_LENGTH_DELIMITED), out);
  AppendVarint(len, out);
}

// Bytes of a length-delimited field of `len` bytes in its message (proto3 leaves out empty
// bytes).
size_t LengthFieldBytes(int field, size_t len) {
  if (len == 0) return 0;
  return CodedOutputStream::VarintSize32(WFL::MakeTag(field, WFL::WIRETYPE_LENGTH_DELIMITED)) +
         CodedOutputStream::VarintSize64(len) + len;
}

void DropKeep(void* keep) { delete static_cast<std::shared_ptr<const void>*>(keep); }

}  // namespace

absl::Status ReadPushRequest(const grpc::ByteBuffer& raw, absl::string_view method,
                             BufferPool* pool, PushPayload* out) {
  out->raw = raw;
  const size_t bytes = out->raw.Length();
  auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat(method, " request of ", bytes, " bytes is not a valid pstrain.PushRequest"));
  };
  if (bytes > static_cast<size_t>(kMaxMessageBytes)) return bad();
  out->reader = std::make_unique<grpc::ProtoBufferReader>(&out->raw);
  if (!out->reader->status().ok()) return bad();
  CodedInputStream in(out->reader.get());
  // Lengths are checked against the limit, so it must be the message's end, not INT_MAX.
  in.PushLimit(static_cast<int>(bytes));
  PushReader reader(&in, pool, out);
  if (!reader.Read()) {
    if (reader.too_many()) {
      return absl::InvalidArgumentError(
          absl::StrCat(method, " request carries more than ", kMaxVariablesPerRequest,
                       " gradients, over the limit of ", kMaxVariablesPerRequest, " per request"));
    }
    return bad();
  }
  // The pieces point into piece_store only now that it no longer grows.
  out->pieces.reserve(out->data.size());
  for (size_t i = 0; i < out->data.size(); ++i) {
    const PushPayload::Range& r = out->ranges[i];
    out->pieces.push_back(r.count == 0 ? absl::MakeConstSpan(&out->data[i], 1)
                                       : absl::MakeConstSpan(&out->piece_store[r.begin], r.count));
  }
  return absl::OkStatus();
}

absl::Status WritePullResponse(const PullResponse& resp, std::vector<LentBytes> data,
                               absl::string_view method, grpc::ByteBuffer* out) {
  if (data.size() != static_cast<size_t>(resp.values_size())) {
    return absl::InvalidArgumentError(absl::StrCat(method, " response of ", resp.values_size(),
                                                   " values with data for ", data.size()));
  }
  // Each value is (head, data): the head holds every byte protobuf would write before the
  // data, which VariableValue.value and TensorProto.data, the last fields of their messages,
  // put at the value's end. All heads share one slice.
  std::string heads;
  std::vector<size_t> head_end(data.size());
  size_t total = 0;
  for (int i = 0; i < resp.values_size(); ++i) {
    const VariableValue& v = resp.values(i);
    const size_t n = static_cast<size_t>(data[i].bytes.size);
    if (!v.value().data().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(method, " response value ", i, " has its data in the message"));
    }
    VariableValue fields;  // name and version, as protobuf writes them
    fields.set_name(v.name());
    fields.set_version(v.version());
    std::string value = fields.SerializeAsString();
    if (v.has_value()) {
      const std::string tensor = v.value().SerializeAsString();
      AppendLengthPrefix(kValueTensor, tensor.size() + LengthFieldBytes(kTensorData, n), &value);
      value += tensor;
      if (n > 0) AppendLengthPrefix(kTensorData, n, &value);
    } else if (n > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(method, " response value ", i, " has data but no tensor"));
    }
    AppendLengthPrefix(kPullValues, value.size() + n, &heads);
    heads += value;
    head_end[i] = heads.size();
    total += n;
  }
  total += heads.size();
  if (total > static_cast<size_t>(kMaxMessageBytes)) {
    return absl::ResourceExhaustedError(absl::StrCat(method, " response of ", total,
                                                     " bytes is over the limit of ",
                                                     kMaxMessageBytes, " bytes per message"));
  }
  std::vector<grpc::Slice> slices;
  slices.reserve(2 * data.size());
  size_t begin = 0;
  for (size_t i = 0; i < data.size(); ++i) {
    // Each head copied into a slice of its own (tens of bytes): a grpc_slice_sub of one slice
    // of all the heads, put in a ByteBuffer, is never freed by gRPC 1.51 (LeakSanitizer, one
    // per pull response).
    slices.emplace_back(heads.data() + begin, head_end[i] - begin);
    begin = head_end[i];
    if (data[i].bytes.size == 0) continue;
    void* bytes = const_cast<void*>(data[i].bytes.data);  // only read: gRPC sends it
    const size_t n = static_cast<size_t>(data[i].bytes.size);
    // The slice holds the owner's `keep` until gRPC has sent it.
    auto* keep = new std::shared_ptr<const void>(std::move(data[i].keep));
    slices.emplace_back(bytes, n, &DropKeep, keep);
  }
  grpc::ByteBuffer result(slices.data(), slices.size());
  out->Swap(&result);
  return absl::OkStatus();
}

}  // namespace pstrain
