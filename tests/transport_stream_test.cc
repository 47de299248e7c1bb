// Chunked pushes and pulls (transport/grpc_stream.h) against a real ParameterServer behind its
// TensorStreamService on 127.0.0.1: tensors past one gRPC message round-trip bit-exactly, a push
// applies as the optimizer says, bad streams are refused with nothing applied, and the PS holds
// at most one extra copy of a variable while it streams it.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/checkpoint_format.h"
#include "common/limits.h"
#include "common/rpc.h"
#include "common/security.h"
#include "gtest/gtest.h"
#include "ps/ps.h"
#include "ps_testing.h"
#include "stream.grpc.pb.h"
#include "transport/grpc_stream.h"
#include "transport/stream_chunks.h"
#include "transport_stream_testing.h"

namespace pstrain {
namespace {

using ps_testing::Chief;
using ps_testing::Worker;
using stream_testing::Data;
using stream_testing::Grad;
using stream_testing::Head;
using stream_testing::Mismatches;
using stream_testing::Pattern;
using stream_testing::PeakRss;
using stream_testing::RawPush;
using stream_testing::ResetPeakRss;
using stream_testing::Rss;
using stream_testing::StreamTest;

TEST_F(StreamTest, A600MbTensorRoundTripsBitExactly) {
  constexpr int64_t kFloats = (int64_t{600} << 20) / 4;
  static_assert(kFloats * 4 > kMaxMessageBytes, "the tensor must not fit one message");
  Create("big", kFloats);

  std::vector<float> got(kFloats);
  PullResponse resp;
  ASSERT_TRUE(Pull("big", &got, &resp).ok());
  ASSERT_EQ(resp.values_size(), 1);
  EXPECT_EQ(resp.values(0).name(), "big");
  EXPECT_EQ(resp.values(0).version(), 0u);
  EXPECT_TRUE(resp.values(0).value().data().empty());
  EXPECT_EQ(Mismatches(got, Pattern), 0);

  std::vector<float> grad(kFloats);
  for (int64_t i = 0; i < kFloats; ++i) grad[i] = Grad(i);
  ASSERT_TRUE(Push("big", grad).ok());
  grad = {};
  std::fill(got.begin(), got.end(), 0.0f);
  ASSERT_TRUE(Pull("big", &got, &resp).ok());
  EXPECT_EQ(resp.values(0).version(), 1u);
  EXPECT_EQ(Mismatches(got, [](int64_t i) { return Pattern(i) - Grad(i); }), 0);
  got = {};

  // The PS checkpoints it whole: its part file holds the pushed value bit for bit.
  const std::string dir = std::filesystem::temp_directory_path() / "transport_stream_test_ckpt";
  std::filesystem::remove_all(dir);
  CheckpointRequest req;
  *req.mutable_sender() = Chief();
  req.set_id(1);
  req.set_num_ps(1);
  req.set_phase(CheckpointRequest::FREEZE);
  req.set_freeze_timeout_s(60);
  CheckpointShard* shard = req.add_shards();
  shard->set_name("big");
  shard->set_variable("big");
  shard->add_shape(kFloats);
  shard->set_row_end(kFloats);
  CheckpointResponse cresp;
  ASSERT_TRUE(ps_->Checkpoint(req, &cresp).ok());
  req.clear_shards();
  req.set_phase(CheckpointRequest::RELEASE);
  req.set_dir(dir);
  req.set_global_step(1);
  ASSERT_TRUE(ps_->Checkpoint(req, &cresp).ok());
  req.set_phase(CheckpointRequest::WAIT);
  for (int i = 0; i < 600 && cresp.path().empty(); ++i) {
    ASSERT_TRUE(ps_->Checkpoint(req, &cresp).ok());
    if (cresp.path().empty()) absl::SleepFor(absl::Milliseconds(100));
  }
  absl::StatusOr<PartFile> part = ReadPartFile(cresp.path());
  ASSERT_TRUE(part.ok()) << part.status();
  ASSERT_EQ(part->shards.size(), 1u);
  EXPECT_EQ(part->shards[0].version, 1u);
  EXPECT_EQ(Mismatches(part->shards[0].values, [](int64_t i) { return Pattern(i) - Grad(i); }), 0);
  std::filesystem::remove_all(dir);
}

TEST_F(StreamTest, BadStreamsAreRefusedAndApplyNothing) {
  constexpr int64_t n = 1000;
  Create("w", n);
  std::vector<float> before;
  ASSERT_EQ(VersionAndValue("w", &before), 0u);
  std::vector<float> g(n, 1.0f);
  std::vector<float> nan = g;
  nan[n - 1] = std::nanf("");

  struct Case {
    const char* what;
    std::vector<PushChunk> chunks;
    absl::StatusCode code;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"a 1 TB claim",
       {Head("w", {int64_t{1} << 38}), Data(0, 0, g, 0, n)},
       absl::StatusCode::kInvalidArgument,
       "over the limit of 17179869184 bytes per tensor"},
      {"a 4 GB claim",
       {Head("w", {int64_t{1} << 30}), Data(0, 0, g, 0, n)},
       absl::StatusCode::kInvalidArgument,
       "claims 4294967296 bytes; its variable holds 4000"},
      {"an unknown variable", {Head("nope", {n})}, absl::StatusCode::kNotFound, "nope"},
      {"data before the head",
       {Data(0, 0, g, 0, n)},
       absl::StatusCode::kInvalidArgument,
       "data before the head"},
      {"a second head",
       {Head("w", {n}), Data(0, 0, g, 0, 10), Head("w", {n})},
       absl::StatusCode::kInvalidArgument,
       "second head"},
      {"a chunk out of order",
       {Head("w", {n}), Data(0, 400, g, 100, n - 100)},
       absl::StatusCode::kInvalidArgument,
       "at offset 400 out of order: expected gradient 0"},
      {"a chunk of another gradient",
       {Head("w", {n}), Data(1, 0, g, 0, n)},
       absl::StatusCode::kInvalidArgument,
       "a chunk for tensor 1 of a stream of 1"},
      {"too many bytes",
       {Head("w", {n}), Data(0, 0, g, 0, n), Data(0, 4000, g, 0, 1)},
       absl::StatusCode::kInvalidArgument,
       "expected no more chunks"},
      {"too few bytes",
       {Head("w", {n}), Data(0, 0, g, 0, n - 1)},
       absl::StatusCode::kInvalidArgument,
       "gradient 0 'w' got 3996 of its 4000 bytes"},
      {"a wrong shape",
       {Head("w", {n - 1}), Data(0, 0, g, 0, n - 1)},
       absl::StatusCode::kInvalidArgument,
       "shape"},
      {"a non-finite value",
       {Head("w", {n}), Data(0, 0, nan, 0, n)},
       absl::StatusCode::kInvalidArgument,
       "non-finite"},
  };
  for (const Case& c : cases) {
    absl::Status s = RawPush(channel_.get(), c.chunks);
    EXPECT_EQ(s.code(), c.code) << c.what << ": " << s;
    EXPECT_NE(s.message().find(c.says), std::string::npos) << c.what << ": " << s;
    std::vector<float> after;
    EXPECT_EQ(VersionAndValue("w", &after), 0u) << c.what;
    EXPECT_EQ(after, before) << c.what;
  }
  // The same stream, well formed, in protobuf's encoding and odd chunk sizes, applies once.
  ASSERT_TRUE(
      RawPush(channel_.get(), {Head("w", {n}), Data(0, 0, g, 0, 3), Data(0, 12, g, 3, n - 3)})
          .ok());
  std::vector<float> after;
  EXPECT_EQ(VersionAndValue("w", &after), 1u);
  EXPECT_EQ(Mismatches(after, [](int64_t i) { return Pattern(i) - 1.0f; }), 0);
}

// A chunk protobuf would not parse as a PushChunk is malformed, however harmless its odd part:
// field number 0, one past protobuf's largest (2^29 - 1), a key or a length in more than the 5
// bytes of a varint32 (found by fuzz/stream_chunks_fuzz: field 0 was taken as an unknown field).
TEST(ParsedChunkTest, WhatProtobufRefusesIsMalformed) {
  const std::string data("\x10\x01\x22\x04wxyz", 8);  // index 1, 4 bytes of data
  stream_chunks::ParsedChunk chunk;
  grpc::Slice good(data);
  ASSERT_TRUE(chunk.Parse(grpc::ByteBuffer(&good, 1)).ok());
  EXPECT_EQ(chunk.index(), 1u);
  EXPECT_EQ(chunk.data_size(), 4);
  const struct {
    std::string bytes;
    const char* says;
  } cases[] = {
      {std::string("\x00\x00", 2) + data, "field number 0"},
      {std::string("\x80\x80\x80\x80\x10\x00", 6) + data, "a field key over 32 bits"},
      {std::string("\x90\x80\x80\x80\x80\x00\x01", 7) + data.substr(2), "a field key over 5 bytes"},
      {std::string("\x10\x01\x22\x84\x80\x80\x80\x80\x00wxyz", 12),
       "field 4 has a truncated length, or a length over 5 bytes"},
      {std::string("\x10\x01\x22\x80\x80\x80\x80\x08", 8), "field 4 has a length over 2^31"},
  };
  for (const auto& c : cases) {
    grpc::Slice slice(c.bytes);
    absl::Status s = chunk.Parse(grpc::ByteBuffer(&slice, 1));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.says << ": " << s;
    EXPECT_NE(s.message().find(c.says), std::string::npos) << c.says << ": " << s;
  }
}

TEST_F(StreamTest, StreamsWithoutTheJobTokenAreRefused) {
  Security with_token;
  with_token.token = "stream-test-token";
  SetSecurity(with_token);
  constexpr int64_t n = 100;
  Create("w", n);
  std::vector<float> g(n, 1.0f);
  // A channel without pstrain's credentials carries no token.
  std::shared_ptr<grpc::Channel> bare =
      grpc::CreateChannel(peer_.substr(peer_.find(' ') + 1), grpc::InsecureChannelCredentials());
  absl::Status s = RawPush(bare.get(), {Head("w", {n}), Data(0, 0, g, 0, n)});
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  EXPECT_NE(s.message().find("PushStream refused: the request carries no job token"),
            std::string::npos)
      << s;
  std::vector<float> dest(n);
  PullResponse resp;
  PullRequest req;
  *req.mutable_sender() = Worker(0);
  req.add_names("w");
  absl::Notification done;
  StreamPull(bare.get(), peer_, Options(), req, {{dest.data(), n * 4}}, &resp,
             [&](absl::Status st) {
               s = st;
               done.Notify();
             });
  done.WaitForNotification();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  std::vector<float> value;
  EXPECT_EQ(VersionAndValue("w", &value), 0u);
  // With the token (pstrain's channel) the same push applies.
  EXPECT_TRUE(RawPush(MakeChannel(peer_.substr(peer_.find(' ') + 1)).get(),
                      {Head("w", {n}), Data(0, 0, g, 0, n)})
                  .ok());
  EXPECT_EQ(VersionAndValue("w", &value), 1u);
  SetSecurity(Security{});
}

// Several tensors in one stream, each of several chunks or less than one, in request order.
TEST_F(StreamTest, SeveralTensorsShareOneStream) {
  const std::vector<int64_t> sizes = {3, (int64_t{9} << 20) / 4 + 5, 1};  // 9 MB: three chunks
  const std::vector<std::string> names = {"a", "b", "c"};
  for (size_t k = 0; k < sizes.size(); ++k) Create(names[k], sizes[k]);
  PushRequest head;
  *head.mutable_sender() = Worker(0);
  std::vector<std::vector<float>> grads(sizes.size());
  std::vector<ConstBytes> bytes;
  for (size_t k = 0; k < sizes.size(); ++k) {
    Gradient* g = head.add_gradients();
    g->set_name(names[k]);
    g->mutable_gradient()->set_dtype(DT_FLOAT);
    g->mutable_gradient()->add_shape(sizes[k]);
    grads[k].assign(sizes[k], static_cast<float>(k + 1));
    bytes.push_back({grads[k].data(), sizes[k] * 4});
  }
  PushResponse presp;
  absl::Status pushed;
  absl::Notification push_done;
  StreamPush(channel_.get(), peer_, Options(), head, bytes, &presp, [&](absl::Status s) {
    pushed = s;
    push_done.Notify();
  });
  push_done.WaitForNotification();
  ASSERT_TRUE(pushed.ok()) << pushed;

  PullRequest req;
  *req.mutable_sender() = Worker(0);
  std::vector<std::vector<float>> got(sizes.size());
  std::vector<MutableBytes> dest;
  for (size_t k = sizes.size(); k-- > 0;) {  // in another order than pushed
    req.add_names(names[k]);
    got[k].assign(sizes[k], 0.0f);
    dest.push_back({got[k].data(), sizes[k] * 4});
  }
  PullResponse resp;
  absl::Status pulled;
  absl::Notification pull_done;
  StreamPull(channel_.get(), peer_, Options(), req, dest, &resp, [&](absl::Status s) {
    pulled = s;
    pull_done.Notify();
  });
  pull_done.WaitForNotification();
  ASSERT_TRUE(pulled.ok()) << pulled;
  ASSERT_EQ(resp.values_size(), 3);
  for (size_t k = 0; k < sizes.size(); ++k) {
    EXPECT_EQ(resp.values(2 - k).name(), names[k]);
    EXPECT_EQ(resp.values(2 - k).version(), 1u);
    EXPECT_EQ(Mismatches(got[k], [k](int64_t i) { return Pattern(i) - (k + 1.0f); }), 0)
        << names[k];
  }
}

TEST_F(StreamTest, ClientRefusesMismatchedBuffers) {
  Create("w", 100);
  std::vector<float> dest(100);
  PullResponse resp;
  absl::Status s = Pull("w", &dest, &resp, /*dest_floats=*/99);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("Pull at " + peer_ +
                             ": variable 'w' has 400 bytes, its "
                             "destination 396"),
            std::string::npos)
      << s;
  std::vector<float> short_grad(99, 1.0f);
  PushRequest head;
  *head.mutable_sender() = Worker(0);
  Gradient* g = head.add_gradients();
  g->set_name("w");
  g->mutable_gradient()->set_dtype(DT_FLOAT);
  g->mutable_gradient()->add_shape(100);
  absl::Status pushed;
  PushResponse presp;
  StreamPush(channel_.get(), peer_, Options(), head, {{short_grad.data(), 99 * 4}}, &presp,
             [&](absl::Status st) { pushed = st; });  // refused before any call: inline
  EXPECT_EQ(pushed.code(), absl::StatusCode::kInvalidArgument) << pushed;
  EXPECT_NE(pushed.message().find("gradient 0 'w' has 396 bytes, its dtype and shape need 400"),
            std::string::npos)
      << pushed;
  std::vector<float> after;
  EXPECT_EQ(VersionAndValue("w", &after), 0u);
  // An unknown variable is the PS's NotFound, naming the peer.
  s = Pull("nope", &dest, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find("Pull at " + peer_), std::string::npos) << s;
}

TEST_F(StreamTest, ACancelledPullEndsCancelled) {
  Create("w", 100);
  std::vector<float> dest(100);
  CallCanceller canceller;
  canceller.Cancel();
  CallOptions o = Options();
  o.canceller = &canceller;
  PullRequest req;
  *req.mutable_sender() = Worker(0);
  req.add_names("w");
  PullResponse resp;
  absl::Status out;
  absl::Notification done;
  StreamPull(channel_.get(), peer_, o, req, {{dest.data(), 400}}, &resp, [&](absl::Status s) {
    out = s;
    done.Notify();
  });
  done.WaitForNotification();
  EXPECT_EQ(out.code(), absl::StatusCode::kCancelled) << out;
}

// Peak memory of the PS (in this process) around a 256 MB push and pull, over what the variable,
// the client's gradient and its pull buffer already hold: one copy of the variable at most (the
// push's gradient buffer, then the pull's copy; never both), plus gRPC's buffers.
TEST_F(StreamTest, PeakMemoryOfA256MbPushAndPull) {
  constexpr int64_t kFloats = (int64_t{256} << 20) / 4;
  constexpr int64_t kBytes = kFloats * 4;
  Create("m", kFloats);
  std::vector<float> grad(kFloats, 0.5f);
  std::vector<float> dest(kFloats, 0.0f);
  ASSERT_TRUE(ResetPeakRss()) << "cannot reset VmHWM";
  const int64_t base = Rss();
  ASSERT_GT(base, 3 * kBytes);
  ASSERT_LE(PeakRss(), base + (int64_t{8} << 20));  // the reset took
  const absl::Time start = absl::Now();
  ASSERT_TRUE(Push("m", grad).ok());
  const absl::Duration push_time = absl::Now() - start;
  const int64_t push_extra = PeakRss() - base;
  ASSERT_TRUE(ResetPeakRss());
  PullResponse resp;
  ASSERT_TRUE(Pull("m", &dest, &resp).ok());
  const absl::Duration pull_time = absl::Now() - start - push_time;
  const int64_t pull_extra = PeakRss() - base;
  // For the record only (speed is the benchmark's): GB/s of each, on this machine's load.
  std::printf("256 MB push %.2f GB/s, pull %.2f GB/s\n",
              kBytes / 1e9 / absl::ToDoubleSeconds(push_time),
              kBytes / 1e9 / absl::ToDoubleSeconds(pull_time));
  EXPECT_EQ(Mismatches(dest, [](int64_t i) { return Pattern(i) - 0.5f; }), 0);
  // The variable (SGD: no slots) plus what streaming it took, against the variable alone.
  const int64_t extra = std::max(push_extra, pull_extra);
  const double ratio = static_cast<double>(kBytes + extra) / kBytes;
  std::printf(
      "PS peak around a 256 MB push+pull: variable %lld MB + at most %lld MB streaming (push "
      "%lld MB, pull %lld MB) = %.2fx the variable\n",
      static_cast<long long>(kBytes >> 20), static_cast<long long>(extra >> 20),
      static_cast<long long>(push_extra >> 20), static_cast<long long>(pull_extra >> 20), ratio);
  RecordProperty("peak_ratio", std::to_string(ratio));
  // One copy (the push's gradient, or the pull's copy of the value) and gRPC's buffers; a second
  // copy would pass this.
  EXPECT_LE(extra, kBytes + kBytes / 2) << "more than one extra copy of the variable";
}

}  // namespace
}  // namespace pstrain
