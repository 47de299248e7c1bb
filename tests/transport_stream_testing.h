// Helpers of transport_stream_test: deterministic tensors, bit-exact comparison, this process's
// memory, a raw client of PushStream for streams the real client never sends, and the fixture.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/rpc.h"
#include "gtest/gtest.h"
#include "ps/ps.h"
#include "ps_testing.h"
#include "stream.grpc.pb.h"
#include "transport/grpc_stream.h"

namespace pstrain::stream_testing {

using ps_testing::Chief;
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

// A real ParameterServer behind its ParameterServerService and TensorStreamService on
// 127.0.0.1, and the stream client's calls to it.
class StreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ps_ = *ParameterServer::Create({});
    ps_->ExpectChief(Chief().incarnation());
    handler_ = MakeDataHandler(ps_.get());
    service_ = MakeParameterServerService(ps_.get(), nullptr);
    streams_ = MakeTensorStreamService(handler_.get());
    ASSERT_NE(streams_, nullptr);
    int port = 0;
    absl::StatusOr<std::unique_ptr<grpc::Server>> started =
        StartGrpcServer("127.0.0.1:0", {service_.get(), streams_.get()}, &port);
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = *std::move(started);
    peer_ = absl::StrCat("ps:0 127.0.0.1:", port);
    channel_ = MakeChannel(absl::StrCat("127.0.0.1:", port));
  }
  void TearDown() override {
    ps_->Stop();
    if (server_) server_->Shutdown();
  }

  // A variable of n floats with value Pattern(i) (or `value` if given) and SGD at lr 1, created
  // in place (its initial value would not fit a CreateVariables message).
  void Create(const std::string& name, int64_t n) {
    CreateVariablesRequest req;
    *req.mutable_sender() = Chief();
    VariableDef* def = req.add_variables();
    def->set_name(name);
    def->mutable_initial_value()->set_dtype(DT_FLOAT);
    def->mutable_initial_value()->add_shape(n);
    std::string* data = def->mutable_initial_value()->mutable_data();
    data->resize(n * sizeof(float));
    float* p = reinterpret_cast<float*>(data->data());
    for (int64_t i = 0; i < n; ++i) p[i] = Pattern(i);
    *def->mutable_optimizer() = ps_testing::Sgd(1.0);
    CreateVariablesResponse resp;
    ASSERT_TRUE(ps_->CreateVariables(req, &resp).ok());
  }

  absl::Status Pull(const std::string& name, std::vector<float>* dest, PullResponse* resp,
                    int64_t dest_floats = -1) {
    PullRequest req;
    *req.mutable_sender() = Worker(0);
    req.add_names(name);
    absl::Status out;
    absl::Notification done;
    StreamPull(channel_.get(), peer_, Options(), req,
               {{dest->data(),
                 dest_floats < 0 ? static_cast<int64_t>(dest->size() * 4) : dest_floats * 4}},
               resp, [&](absl::Status s) {
                 out = s;
                 done.Notify();
               });
    done.WaitForNotification();
    return out;
  }
  absl::Status Push(const std::string& name, const std::vector<float>& grad,
                    int64_t read_version = 0) {
    PushRequest head;
    *head.mutable_sender() = Worker(0);
    Gradient* g = head.add_gradients();
    g->set_name(name);
    g->set_read_version(read_version);
    g->mutable_gradient()->set_dtype(DT_FLOAT);
    g->mutable_gradient()->add_shape(static_cast<int64_t>(grad.size()));
    PushResponse resp;
    absl::Status out;
    absl::Notification done;
    StreamPush(channel_.get(), peer_, Options(), head,
               {{grad.data(), static_cast<int64_t>(grad.size() * 4)}}, &resp, [&](absl::Status s) {
                 out = s;
                 done.Notify();
               });
    done.WaitForNotification();
    return out;
  }
  static CallOptions Options() {
    CallOptions o;
    o.deadline = absl::Now() + absl::Seconds(300);
    return o;
  }

  // The variable's value and version, read in process (not through the stream under test).
  uint64_t VersionAndValue(const std::string& name, std::vector<float>* value) {
    PullRequest req;
    *req.mutable_sender() = Chief();
    req.add_names(name);
    PullResponse resp;
    absl::Status s = ps_->Pull(req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) return ~uint64_t{0};
    const std::string& d = resp.values(0).value().data();
    value->resize(d.size() / 4);
    std::memcpy(value->data(), d.data(), d.size());
    return resp.values(0).version();
  }

  std::unique_ptr<ParameterServer> ps_;
  std::unique_ptr<DataHandler> handler_;
  std::unique_ptr<grpc::Service> service_;
  std::unique_ptr<grpc::Service> streams_;
  std::unique_ptr<grpc::Server> server_;
  std::string peer_;
  std::shared_ptr<grpc::Channel> channel_;
};

}  // namespace pstrain::stream_testing
