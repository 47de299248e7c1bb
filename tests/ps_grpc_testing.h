// A parameter server in the test's process behind its gRPC service on 127.0.0.1, called through
// a real channel; and the helpers of the recovery tests (tags, tagged pushes, watermarks).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/rpc.h"
#include "gtest/gtest.h"
#include "ps/ps.h"
#include "ps_testing.h"

namespace pstrain::ps_testing {

class GrpcPs {
 public:
  explicit GrpcPs(int task) {
    ps_ = *ParameterServer::Create({.task = task});
    ps_->ExpectChief(ps_testing::Chief().incarnation());
    service_ = MakeParameterServerService(ps_.get(), nullptr);
    int port = 0;
    absl::StatusOr<std::unique_ptr<grpc::Server>> started =
        StartGrpcServer("127.0.0.1:0", {service_.get()}, &port);
    EXPECT_TRUE(started.ok()) << started.status();
    if (!started.ok()) return;
    server_ = *std::move(started);
    std::shared_ptr<grpc::Channel> channel = MakeChannel(absl::StrCat("127.0.0.1:", port));
    EXPECT_TRUE(channel->WaitForConnected(absl::ToChronoTime(absl::Now() + absl::Seconds(30))));
    stub_ = ParameterServerService::NewStub(channel);
  }
  ~GrpcPs() {
    ps_->Stop();
    if (server_) server_->Shutdown();
  }

  // One RPC through the channel: Call(&Stub::Push, req, &resp).
  template <typename Req, typename Resp>
  absl::Status Call(grpc::Status (ParameterServerService::Stub::*method)(grpc::ClientContext*,
                                                                         const Req&, Resp*),
                    const Req& req, Resp* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
    return FromGrpcStatus((stub_.get()->*method)(&ctx, req, resp));
  }
  // The same, for a request from the chief whose response is not looked at.
  template <typename Req, typename Resp>
  absl::Status AsChief(grpc::Status (ParameterServerService::Stub::*method)(grpc::ClientContext*,
                                                                            const Req&, Resp*),
                       Req req) {
    *req.mutable_sender() = ps_testing::Chief();
    Resp resp;
    return Call(method, req, &resp);
  }

  ParameterServer* ps() { return ps_.get(); }

 private:
  std::unique_ptr<ParameterServer> ps_;
  std::unique_ptr<grpc::Service> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<ParameterServerService::Stub> stub_;
};

inline PushTag Tag(int32_t epoch, int64_t task, int64_t batch) {
  PushTag t;
  t.set_epoch(epoch);
  t.set_task(task);
  t.set_batch(batch);
  return t;
}

inline Sender OfGeneration(Sender s, uint64_t generation) {
  s.set_generation(generation);
  return s;
}

// (epoch, task, next_batch) of each watermark, as AppliedTasks or a part file lists them.
using Marks = std::vector<std::tuple<int32_t, int64_t, int64_t>>;
template <typename List>
Marks MarksOf(const List& list) {
  Marks out;
  for (const auto& w : list) out.emplace_back(w.epoch, w.task, w.next_batch);
  return out;
}
inline Marks MarksOf(const google::protobuf::RepeatedPtrField<TaskWatermark>& list) {
  Marks out;
  for (const TaskWatermark& w : list) out.emplace_back(w.epoch(), w.task(), w.next_batch());
  return out;
}

}  // namespace pstrain::ps_testing
