#include "transport/stream_chunks.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/limits.h"
#include "common/tensor.h"

namespace pstrain::stream_chunks {
namespace {

// Field numbers and wire types of PushChunk and PullChunk (proto/stream.proto).
constexpr int kHeadField = 1, kIndexField = 2, kOffsetField = 3, kDataField = 4;
constexpr int kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;
// What protobuf's parser takes: a key in a varint32 of at most 5 bytes naming a field in
// [1, 2^29 - 1]; a length in at most 5 bytes, under 2^31.
constexpr int kMaxKeyBytes = 5;
constexpr uint64_t kMaxFieldNumber = (uint64_t{1} << 29) - 1;
constexpr uint64_t kMaxLength = (uint64_t{1} << 31) - 1;

char* PutVarint(uint64_t v, char* p) {
  while (v >= 0x80) {
    *p++ = static_cast<char>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<char>(v);
  return p;
}

// Reads across the slices of one message.
class Reader {
 public:
  explicit Reader(const std::vector<grpc::Slice>& slices) : slices_(slices) { Settle(); }
  bool empty() const { return i_ == slices_.size(); }
  size_t slice() const { return i_; }
  size_t pos() const { return pos_; }
  // A varint of at most `max_bytes` bytes (protobuf reads keys and lengths in at most 5).
  std::optional<uint64_t> Varint(int max_bytes = 10) {
    uint64_t v = 0;
    for (int shift = 0; shift < 7 * max_bytes; shift += 7) {
      if (empty()) return std::nullopt;
      const uint8_t b = slices_[i_].begin()[pos_];
      Skip(1);
      v |= uint64_t{b & 0x7fu} << shift;
      if (!(b & 0x80)) return v;
    }
    return std::nullopt;  // more than max_bytes
  }
  // Skips `n` bytes, or copies them to `out` (if not null); false if fewer remain.
  bool Take(uint64_t n, char* out = nullptr) {
    while (n > 0) {
      if (empty()) return false;
      const size_t here = std::min<uint64_t>(n, slices_[i_].size() - pos_);
      if (out) {
        std::memcpy(out, slices_[i_].begin() + pos_, here);
        out += here;
      }
      Skip(here);
      n -= here;
    }
    return true;
  }

 private:
  void Skip(size_t n) {
    pos_ += n;
    Settle();
  }
  void Settle() {
    while (i_ < slices_.size() && pos_ == slices_[i_].size()) {
      ++i_;
      pos_ = 0;
    }
  }
  const std::vector<grpc::Slice>& slices_;
  size_t i_ = 0;
  size_t pos_ = 0;
};

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("malformed stream chunk: ", what));
}

}  // namespace

grpc::ByteBuffer HeadChunk(const google::protobuf::Message& head) {
  const std::string body = head.SerializeAsString();
  std::string out(11, '\0');
  char* p = PutVarint(kHeadField << 3 | kLengthDelimited, out.data());
  p = PutVarint(body.size(), p);
  out.resize(p - out.data());
  out += body;
  grpc::Slice slice(out);
  return grpc::ByteBuffer(&slice, 1);
}

grpc::ByteBuffer DataChunk(int index, int64_t offset, grpc::Slice data) {
  char header[40];
  char* p = PutVarint(kIndexField << 3 | kVarint, header);
  p = PutVarint(static_cast<uint64_t>(index), p);
  p = PutVarint(kOffsetField << 3 | kVarint, p);
  p = PutVarint(static_cast<uint64_t>(offset), p);
  p = PutVarint(kDataField << 3 | kLengthDelimited, p);
  p = PutVarint(data.size(), p);
  grpc::Slice slices[2] = {grpc::Slice(header, p - header), std::move(data)};
  return grpc::ByteBuffer(slices, 2);
}

absl::Status ParsedChunk::Parse(const grpc::ByteBuffer& buf) {
  *this = ParsedChunk();
  if (grpc::Status s = buf.Dump(&slices_); !s.ok()) return Malformed(s.error_message());
  Reader r(slices_);
  bool seen[kDataField + 1] = {};
  while (!r.empty()) {
    const std::optional<uint64_t> key = r.Varint(kMaxKeyBytes);
    if (!key) return Malformed("a truncated field key, or a field key over 5 bytes");
    if (*key > UINT32_MAX) return Malformed("a field key over 32 bits");
    const uint64_t field = *key >> 3;
    if (field == 0 || field > kMaxFieldNumber)
      return Malformed(absl::StrCat("field number ", field));
    const int type = static_cast<int>(*key & 7);
    if (field >= kHeadField && field <= kDataField) {
      if (seen[field]) return Malformed(absl::StrCat("field ", field, " given twice"));
      seen[field] = true;
      const int want = field == kHeadField || field == kDataField ? kLengthDelimited : kVarint;
      if (type != want) return Malformed(absl::StrCat("field ", field, " has wire type ", type));
    }
    std::optional<uint64_t> v;
    switch (type) {
      case kVarint:
        v = r.Varint();
        if (!v) return Malformed(absl::StrCat("field ", field, " is a truncated varint"));
        if (field == kIndexField) index_ = *v;
        if (field == kOffsetField) offset_ = *v;
        break;
      case kLengthDelimited: {
        v = r.Varint(kMaxKeyBytes);
        if (!v) {
          return Malformed(
              absl::StrCat("field ", field, " has a truncated length, or a length over 5 bytes"));
        }
        if (*v > kMaxLength)
          return Malformed(absl::StrCat("field ", field, " has a length over 2^31"));
        if (field == kDataField) {
          data_slice_ = r.slice();
          data_pos_ = r.pos();
          data_size_ = static_cast<int64_t>(*v);
        }
        if (field == kHeadField) {
          if (*v > static_cast<uint64_t>(kMaxMessageBytes)) return Malformed("an oversized head");
          head_.resize(*v);
          has_head_ = true;
        }
        if (!r.Take(*v, field == kHeadField ? head_.data() : nullptr)) {
          return Malformed(absl::StrCat("field ", field, " is cut short"));
        }
        break;
      }
      case kFixed64:
      case kFixed32:
        if (!r.Take(type == kFixed64 ? 8 : 4)) return Malformed("a truncated fixed field");
        break;
      default:
        return Malformed(absl::StrCat("wire type ", type, " of field ", field));
    }
  }
  if (has_head_ && (seen[kDataField] || seen[kIndexField] || seen[kOffsetField])) {
    return Malformed("a head chunk also carries data");
  }
  return absl::OkStatus();
}

void ParsedChunk::CopyData(void* dest) const {
  std::vector<grpc::Slice> rest(slices_.begin() + data_slice_, slices_.end());
  if (!rest.empty()) rest[0] = rest[0].sub(data_pos_, rest[0].size());
  Reader(rest).Take(data_size_, static_cast<char*>(dest));
}

absl::StatusOr<int64_t> StreamedBytes(const TensorProto& t, const std::string& what) {
  auto bad = [&](auto... parts) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", parts...));
  };
  if (!t.data().empty()) {
    return bad("carries ", t.data().size(), " bytes in the head; a stream sends them in chunks");
  }
  int64_t element_bytes = 0;
  switch (t.dtype()) {
    case DT_FLOAT:
      element_bytes = 4;
      break;
    case DT_HALF:
    case DT_BFLOAT16:
      element_bytes = 2;
      break;
    default:
      return bad("dtype ", static_cast<int>(t.dtype()), " is not DT_FLOAT, DT_HALF or DT_BFLOAT16");
  }
  const std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
  const std::optional<int64_t> elements = CheckedNumElements(shape);
  const std::optional<int64_t> bytes = elements ? CheckedMul(*elements, element_bytes) : elements;
  if (!bytes) return bad("shape ", ShapeString(shape), " is negative, too long or overflows");
  if (*bytes > kMaxTensorBytes) {
    return bad("shape ", ShapeString(shape), " needs ", *bytes, " bytes, over the limit of ",
               kMaxTensorBytes, " bytes per tensor");
  }
  return *bytes;
}

ChunkOrder::ChunkOrder(std::vector<int64_t> sizes, std::vector<std::string> names)
    : sizes_(std::move(sizes)), names_(std::move(names)) {
  SkipFull();
}

void ChunkOrder::SkipFull() {
  while (at_ < sizes_.size() && got_ == sizes_[at_]) {
    ++at_;
    got_ = 0;
  }
}

bool ChunkOrder::Next(int* index, int64_t* offset, int64_t* size) {
  if (done()) return false;
  *index = static_cast<int>(at_);
  *offset = got_;
  *size = std::min(kStreamChunkBytes, sizes_[at_] - got_);
  got_ += *size;
  SkipFull();
  return true;
}

absl::Status ChunkOrder::Accept(uint64_t index, uint64_t offset, int64_t size) {
  if (index >= sizes_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a chunk for tensor ", index, " of a stream of ", sizes_.size()));
  }
  const std::string& name = names_[index];
  if (done() || index != at_ || offset != static_cast<uint64_t>(got_)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a chunk of ", name, " at offset ", offset, " out of order: expected ",
        done() ? std::string("no more chunks") : absl::StrCat(names_[at_], " at offset ", got_)));
  }
  if (size <= 0 || size > sizes_[at_] - got_) {
    return absl::InvalidArgumentError(absl::StrCat("a chunk of ", size, " bytes of ", name,
                                                   " at offset ", offset, ": it holds ",
                                                   sizes_[at_], " bytes"));
  }
  got_ += size;
  SkipFull();
  return absl::OkStatus();
}

bool ChunkOrder::done() const { return at_ == sizes_.size(); }

std::string ChunkOrder::Missing() const {
  if (done()) return "nothing";
  return absl::StrCat(names_[at_], " got ", got_, " of its ", sizes_[at_], " bytes");
}

}  // namespace pstrain::stream_chunks
