// The PS's gRPC wire path (transport/grpc_wire.h) against protobuf itself, the independent
// reference: a PushRequest read with its data out of line equals protobuf's parse of the same
// bytes (for valid bytes and for every truncation and many corruptions of them), lies about
// lengths allocate nothing, and a PullResponse written as slices is byte for byte what protobuf
// serialises.

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/limits.h"
#include "gmock/gmock.h"
#include "google/protobuf/stubs/logging.h"
#include "grpcpp/support/slice.h"
#include "gtest/gtest.h"
#include "transport/grpc_wire.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

std::string Floats(int n, float start) {
  std::string s(n * sizeof(float), '\0');
  for (int i = 0; i < n; ++i) {
    const float f = start + static_cast<float>(i) * 0.25f;
    std::memcpy(&s[i * sizeof(float)], &f, sizeof(f));
  }
  return s;
}

PushRequest Sample() {
  PushRequest req;
  req.mutable_sender()->set_job("worker");
  req.mutable_sender()->set_task(3);
  req.mutable_sender()->set_incarnation(77);
  req.mutable_tag()->set_epoch(1);
  req.mutable_tag()->set_batch(9);
  const std::vector<std::vector<int64_t>> shapes = {{2, 3}, {}, {0}, {1000}};
  for (size_t i = 0; i < shapes.size(); ++i) {
    Gradient* g = req.add_gradients();
    g->set_name("layer" + std::to_string(i) + "/w");
    g->set_read_version(i * 5);
    g->mutable_gradient()->set_dtype(DT_FLOAT);
    int64_t n = 1;
    for (int64_t d : shapes[i]) n *= d;
    g->mutable_gradient()->mutable_shape()->Assign(shapes[i].begin(), shapes[i].end());
    g->mutable_gradient()->set_data(Floats(static_cast<int>(n), static_cast<float>(i)));
  }
  return req;
}

// `bytes` as a ByteBuffer cut into slices of `piece` bytes (0: one slice).
grpc::ByteBuffer Buffer(const std::string& bytes, size_t piece = 0) {
  std::vector<grpc::Slice> slices;
  if (piece == 0) piece = bytes.size() + 1;
  for (size_t at = 0; at < bytes.size(); at += piece) {
    slices.emplace_back(bytes.data() + at, std::min(piece, bytes.size() - at));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

// The request ReadPushRequest read, with each gradient's data put back in its message.
std::string Inlined(const PushPayload& p) {
  PushRequest req = p.head;
  for (int i = 0; i < req.gradients_size(); ++i) {
    const ConstBytes& b = p.data[i];
    if (b.size == 0) continue;
    req.mutable_gradients(i)->mutable_gradient()->set_data(static_cast<const char*>(b.data),
                                                           b.size);
  }
  return req.SerializeAsString();
}

TEST(ReadPushRequestTest, OneAlignedSliceIsReadInPlace) {
  const PushRequest req = Sample();
  // One slice of its own; where the tensors then start decides whether they can stay in place.
  grpc::Slice slice(req.SerializeAsString());
  grpc::ByteBuffer raw(&slice, 1);
  BufferPool pool;
  PushPayload p;
  ASSERT_TRUE(ReadPushRequest(raw, "Push", &pool, &p).ok());
  ASSERT_EQ(p.data.size(), 4u);
  ASSERT_EQ(p.head.gradients_size(), 4);
  int in_place = 0;
  for (int i = 0; i < 4; ++i) {
    const std::string& want = req.gradients(i).gradient().data();
    EXPECT_TRUE(p.head.gradients(i).gradient().data().empty());
    ASSERT_EQ(p.data[i].size, static_cast<int64_t>(want.size()));
    if (!want.empty()) EXPECT_EQ(std::memcmp(p.data[i].data, want.data(), want.size()), 0);
    const auto* at = static_cast<const uint8_t*>(p.data[i].data);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(at) % 4, 0u) << i;
    in_place += !want.empty() && at >= slice.begin() && at < slice.end();
  }
  // A tensor stays in place exactly when it starts at an aligned address in the slice.
  const std::string bytes(reinterpret_cast<const char*>(slice.begin()), slice.size());
  int aligned = 0;
  for (int i = 0; i < 4; ++i) {
    const std::string& want = req.gradients(i).gradient().data();
    if (want.empty()) continue;
    const size_t offset = bytes.find(want);
    ASSERT_NE(offset, std::string::npos);
    aligned += reinterpret_cast<uintptr_t>(slice.begin() + offset) % 4 == 0;
  }
  EXPECT_EQ(in_place, aligned);
  EXPECT_EQ(in_place + static_cast<int>(p.copies.size()), 3);
  EXPECT_EQ(pool.counters().allocated, static_cast<int64_t>(p.copies.size()));
  EXPECT_EQ(Inlined(p), req.SerializeAsString());
}

void NoFree(void*) {}

TEST(ReadPushRequestTest, OfFourNameLengthsExactlyOnePutsTheTensorInPlace) {
  int in_place = 0;
  for (int pad = 0; pad < 4; ++pad) {
    PushRequest req;
    Gradient* g = req.add_gradients();
    g->set_name(std::string(1 + pad, 'x'));
    g->mutable_gradient()->set_dtype(DT_FLOAT);
    g->mutable_gradient()->add_shape(16);
    g->mutable_gradient()->set_data(Floats(16, 2));
    const std::string bytes = req.SerializeAsString();
    std::vector<uint32_t> storage((bytes.size() + 3) / 4);  // 4-byte aligned
    std::memcpy(storage.data(), bytes.data(), bytes.size());
    grpc::Slice slice(storage.data(), bytes.size(), &NoFree);
    grpc::ByteBuffer raw(&slice, 1);
    BufferPool pool;
    PushPayload p;
    ASSERT_TRUE(ReadPushRequest(raw, "Push", &pool, &p).ok());
    const auto* at = static_cast<const uint8_t*>(p.data[0].data);
    const bool here = at >= slice.begin() && at < slice.end();
    in_place += here;
    EXPECT_EQ(pool.counters().allocated, here ? 0 : 1);
    EXPECT_EQ(Inlined(p), bytes);
  }
  EXPECT_EQ(in_place, 1);
}

TEST(ReadPushRequestTest, TensorsAcrossSlicesAreCopiedOnceAndEqualProtobufsParse) {
  const std::string bytes = Sample().SerializeAsString();
  for (size_t piece : {1, 3, 7, 64, 1000}) {
    SCOPED_TRACE(piece);
    BufferPool pool;
    PushPayload p;
    ASSERT_TRUE(ReadPushRequest(Buffer(bytes, piece), "Push", &pool, &p).ok());
    EXPECT_EQ(Inlined(p), bytes);
    for (const ConstBytes& b : p.data) EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data) % 4, 0u);
  }
}

// Protobuf's verdict on `bytes` and ours must agree, and so must the messages when both accept.
// Returns whether protobuf accepted.
bool AgreesWithProtobuf(const std::string& bytes, size_t piece) {
  PushRequest want;
  const bool protobuf_ok = want.ParseFromString(bytes);
  BufferPool pool;
  PushPayload p;
  const absl::Status s = ReadPushRequest(Buffer(bytes, piece), "Push", &pool, &p);
  EXPECT_EQ(s.ok(), protobuf_ok) << s;
  if (!s.ok()) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("Push request of"));
    EXPECT_THAT(s.message(), HasSubstr("is not a valid pstrain.PushRequest"));
  } else if (protobuf_ok) {
    EXPECT_EQ(Inlined(p), want.SerializeAsString());
  }
  return protobuf_ok;
}

TEST(ReadPushRequestTest, EveryTruncationAndCorruptionIsJudgedAsProtobufJudgesIt) {
  google::protobuf::LogSilencer quiet;  // protobuf logs each invalid UTF-8 string it refuses
  PushRequest small = Sample();
  small.mutable_gradients(3)->mutable_gradient()->set_data(Floats(4, 1));
  small.mutable_gradients(3)->mutable_gradient()->set_shape(0, 4);
  const std::string bytes = small.SerializeAsString();
  int rejected = 0;
  int accepted = 0;
  for (size_t len = 0; len < bytes.size(); ++len) {
    SCOPED_TRACE(absl::StrCat("truncated to ", len));
    (AgreesWithProtobuf(bytes.substr(0, len), 5) ? accepted : rejected)++;
  }
  for (size_t at = 0; at < bytes.size(); ++at) {
    for (unsigned char c : {0x00, 0x01, 0x07, 0x0a, 0x12, 0x1a, 0x23, 0x7f, 0x80, 0xff}) {
      std::string bad = bytes;
      bad[at] = static_cast<char>(c);
      SCOPED_TRACE(absl::StrCat("byte ", at, " set to ", c));
      (AgreesWithProtobuf(bad, at % 2 ? 0 : 4) ? accepted : rejected)++;
    }
  }
  // Both kinds must have been seen, or the comparison proved nothing.
  EXPECT_GT(rejected, 100);
  EXPECT_GT(accepted, 100);
}

TEST(ReadPushRequestTest, RepeatedAndMisplacedFieldsMergeAsProtobufMerges) {
  PushRequest a = Sample();
  PushRequest b;
  b.mutable_sender()->set_task(5);  // a later sender merges into the first
  Gradient* g = b.add_gradients();
  g->set_name("again");
  std::string bytes = a.SerializeAsString() + b.SerializeAsString();
  // A gradient whose tensor comes twice (merged, the last data winning), and a gradients field
  // with the varint wire type (an unknown field to protobuf).
  Gradient twice;
  twice.mutable_gradient()->set_data(Floats(2, 0));
  twice.mutable_gradient()->add_shape(2);
  std::string t2;
  TensorProto second;
  second.set_dtype(DT_FLOAT);
  second.set_data(Floats(2, 9));
  std::string gbytes = twice.SerializeAsString();
  gbytes += '\x1a';
  gbytes += static_cast<char>(second.ByteSizeLong());
  gbytes += second.SerializeAsString();
  bytes += '\x12';
  bytes += static_cast<char>(gbytes.size());
  bytes += gbytes;
  bytes += "\x10\x05";
  EXPECT_TRUE(AgreesWithProtobuf(bytes, 0));
  EXPECT_TRUE(AgreesWithProtobuf(bytes, 3));
}

// Protobuf's parser reads a field key or a length in at most 5 bytes; CodedInputStream, which
// the reader walks the request with, reads up to 10 and drops the high bits. Each such request is
// refused as protobuf refuses it, whether the key or length is the reader's own or that of a field
// it passes on (found by fuzz/grpc_wire_fuzz: an unknown field's 6-byte key was accepted).
TEST(ReadPushRequestTest, KeysAndLengthsOverFiveBytesAreRefusedAsProtobufRefusesThem) {
  google::protobuf::LogSilencer quiet;
  const std::string sample = Sample().SerializeAsString();
  const std::vector<std::string> cases = {
      std::string("\xc2\xff\xff\xff\xc0\x3a\x00", 7),  // an unknown field's key (the fuzzer's)
      std::string("\x92\x80\x80\x80\x80\x00\x00", 7),  // gradients' key in 6 bytes
      std::string("\x12\x80\x80\x80\x80\x80\x00", 7),  // gradients' length 0 in 6 bytes
      std::string("\x12\x07\x1a\x80\x80\x80\x80\x80\x00", 9),  // a tensor's length
      std::string("\x2a\x81\x80\x80\x80\x80\x00x", 8),         // an unknown field's length
      std::string("\x2b\x90\x80\x80\x80\x80\x00\x01\x2c", 9),  // a key inside an unknown group
  };
  for (const std::string& tail : cases) {
    SCOPED_TRACE(absl::CHexEscape(tail));
    EXPECT_FALSE(AgreesWithProtobuf(sample + tail, 0));
    EXPECT_FALSE(AgreesWithProtobuf(sample + tail, 3));
  }
}

TEST(ReadPushRequestTest, LyingLengthsAreRefusedWithoutAllocating) {
  // gradients (field 2) of 2^31 - 1 bytes; a tensor's data of 500 MB inside a message of a few
  // bytes; a length that overflows an int.
  const std::vector<std::string> lies = {
      std::string("\x12\xff\xff\xff\xff\x07", 6) + "abc",
      std::string("\x12\x08\x1a\x06\x1a\x84\x80\x80\xee\x01", 10),
      std::string("\x12\xff\xff\xff\xff\xff\xff\xff\xff\x01", 10),
      std::string("\x2a\xff\xff\xff\xff\x07", 6) + "xyz",  // an unknown field that lies
  };
  for (const std::string& bytes : lies) {
    BufferPool pool;
    PushPayload p;
    const absl::Status s = ReadPushRequest(Buffer(bytes), "Push", &pool, &p);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_EQ(pool.counters().allocated, 0);
    PushRequest check;
    EXPECT_FALSE(check.ParseFromString(bytes));
  }
}

TEST(ReadPushRequestTest, StopsAtTheLimitOfGradientsPerRequest) {
  // 65537 empty gradients, two bytes each: protobuf parses them, the PS would refuse them.
  std::string bytes;
  for (int i = 0; i <= kMaxVariablesPerRequest; ++i) bytes += std::string("\x12\x00", 2);
  BufferPool pool;
  PushPayload p;
  const absl::Status s = ReadPushRequest(Buffer(bytes), "Push", &pool, &p);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("more than 65536 gradients"));
  PushPayload fine;  // one fewer is read
  ASSERT_TRUE(ReadPushRequest(Buffer(bytes.substr(2)), "Push", &pool, &fine).ok());
  EXPECT_EQ(fine.head.gradients_size(), kMaxVariablesPerRequest);
}

TEST(WritePullResponseTest, BytesAreWhatProtobufSerialises) {
  PullResponse full;
  const std::vector<std::pair<std::string, std::vector<int64_t>>> values = {
      {"w", {3, 2}}, {"", {}}, {"empty", {0}}, {"big/kernel", {40000}}, {"v0", {1}}};
  for (size_t i = 0; i < values.size(); ++i) {
    VariableValue* v = full.add_values();
    v->set_name(values[i].first);
    v->set_version(i == 4 ? 0 : i * 1000 + 1);  // version 0 is left out of the bytes
    v->mutable_value()->set_dtype(DT_FLOAT);
    int64_t n = 1;
    for (int64_t d : values[i].second) n *= d;
    v->mutable_value()->mutable_shape()->Assign(values[i].second.begin(), values[i].second.end());
    v->mutable_value()->set_data(Floats(static_cast<int>(n), static_cast<float>(i)));
  }
  full.add_values()->set_name("no tensor");  // a value without its TensorProto

  PullResponse head = full;
  std::vector<LentBytes> data;
  std::vector<const void*> where;
  std::vector<std::weak_ptr<const void>> owners;
  for (VariableValue& v : *head.mutable_values()) {
    auto owned = std::make_shared<const std::string>(v.value().data());
    data.push_back({{owned->data(), static_cast<int64_t>(owned->size())}, owned});
    where.push_back(owned->data());
    owners.push_back(owned);
    if (v.has_value()) v.mutable_value()->clear_data();
  }
  {
    grpc::ByteBuffer out;
    ASSERT_TRUE(WritePullResponse(head, std::move(data), "Pull", &out).ok());
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(out.Dump(&slices).ok());
    std::string bytes;
    int zero_copy = 0;
    for (const grpc::Slice& s : slices) {
      for (const void* w : where) zero_copy += s.begin() == w;
      bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
    EXPECT_EQ(bytes, full.SerializeAsString());
    EXPECT_EQ(zero_copy, 4);  // every non-empty value is sent from its owner's bytes
    int held = 0;
    for (const auto& o : owners) held += !o.expired();
    EXPECT_EQ(held, 4);  // the empty values' owners are let go at once
  }
  // The slices are gone with the ByteBuffer (and `slices`), and their owners' bytes with them.
  for (const auto& o : owners) EXPECT_TRUE(o.expired());
}

TEST(WritePullResponseTest, RefusesDataInTheMessageOrAMissingBuffer) {
  PullResponse resp;
  resp.add_values()->mutable_value()->set_data("abcd");
  grpc::ByteBuffer out;
  auto owned = std::make_shared<const std::string>("abcd");
  std::vector<LentBytes> one = {{{owned->data(), 4}, owned}};
  EXPECT_EQ(WritePullResponse(resp, std::move(one), "Pull", &out).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WritePullResponse(resp, {}, "Pull", &out).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pstrain
