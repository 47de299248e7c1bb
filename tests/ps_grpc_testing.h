// A parameter server in the test's process behind its gRPC service on 127.0.0.1, called through
// a real channel; and the helpers of the recovery tests (tags, tagged pushes, watermarks, a
// fixture).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/rpc.h"
#include "gtest/gtest.h"
#include "ps/ps.h"
#include "ps_tables_testing.h"
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

// A PS on 127.0.0.1 with two variables and a table, and the calls the recovery tests make.
class PsRecoveryTest : public ::testing::Test {
 protected:
  // A PS configured with `config` (if any) holding "w" and "v" ([4] zeros, sgd lr 1) and table
  // "emb" (dim 1, zeros, sgd lr 1) whose key 7 was looked up.
  void Start(const ConfigureRequest* config = nullptr) {
    ps_ = std::make_unique<GrpcPs>(0);
    if (config) {
      ConfigureResponse resp;
      ASSERT_TRUE(ps_->Call(&ParameterServerService::Stub::Configure, *config, &resp).ok());
    }
    CreateTables();
  }
  void CreateTables(float init = 0.0f) {
    CreateVariablesRequest vars = CreateReq("w", Tensor({4}, init));
    *vars.add_variables() = CreateReq("v", Tensor({4}, init)).variables(0);
    ASSERT_TRUE(ps_->AsChief(&ParameterServerService::Stub::CreateVariables, vars).ok());
    CreateTablesRequest tables;
    *tables.add_tables() = TableOf("emb", 1, init);
    ASSERT_TRUE(ps_->AsChief(&ParameterServerService::Stub::CreateTables, tables).ok());
    LookupResponse looked;
    ASSERT_TRUE(ps_->Call(&ParameterServerService::Stub::Lookup,
                          LookupReq(Chief(), {{"emb", KeyBytes({7})}}), &looked)
                    .ok());
  }

  absl::Status Push(const Sender& from, float g, uint64_t read_version, std::optional<PushTag> tag,
                    const std::vector<std::string>& names = {"w"}, PushResponse* resp = nullptr) {
    PushRequest req = PushReq(from, names[0], Tensor({4}, g), read_version);
    for (size_t i = 1; i < names.size(); ++i) {
      *req.add_gradients() = PushReq(from, names[i], Tensor({4}, g), read_version).gradients(0);
    }
    if (tag) *req.mutable_tag() = *tag;
    PushResponse unused;
    return ps_->Call(&ParameterServerService::Stub::Push, req, resp ? resp : &unused);
  }
  absl::Status PushEmb(const Sender& from, float g, uint64_t read_version,
                       std::optional<PushTag> tag) {
    PushSparseRequest req = PushSparseReq(from, {Grad("emb", {7}, {g}, read_version)});
    if (tag) *req.mutable_tag() = *tag;
    PushSparseResponse resp;
    return ps_->Call(&ParameterServerService::Stub::PushSparse, req, &resp);
  }
  State Read(const std::string& name = "w") {
    PullRequest req;
    *req.mutable_sender() = Chief();
    req.add_names(name);
    PullResponse resp;
    absl::Status s = ps_->Call(&ParameterServerService::Stub::Pull, req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) return {};
    return {resp.values(0).version(),
            reinterpret_cast<const float*>(resp.values(0).value().data().data())[0]};
  }
  float Row7(uint64_t* version = nullptr) {
    LookupResponse resp;
    absl::Status s = ps_->Call(&ParameterServerService::Stub::Lookup,
                               LookupReq(Chief(), {{"emb", KeyBytes({7})}}), &resp);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) return 0;
    if (version) *version = resp.tables(0).version();
    return Floats(resp.tables(0).rows())[0];
  }
  AppliedTasksResponse Applied() {
    AppliedTasksRequest req;
    *req.mutable_sender() = Chief();
    AppliedTasksResponse resp;
    EXPECT_TRUE(ps_->Call(&ParameterServerService::Stub::AppliedTasks, req, &resp).ok());
    return resp;
  }
  // The watermarks of shard `i` (in name order: "v", "w").
  Marks ShardMarks(int i) {
    AppliedTasksResponse a = Applied();
    return i < a.shards_size() ? MarksOf(a.shards(i).tasks()) : Marks{{-1, -1, -1}};
  }
  Marks TableMarks() {
    AppliedTasksResponse a = Applied();
    return a.tables_size() == 1 ? MarksOf(a.tables(0).tasks()) : Marks{{-1, -1, -1}};
  }
  StatsResponse GetStats() {
    StatsRequest req;
    *req.mutable_sender() = Chief();
    StatsResponse resp;
    EXPECT_TRUE(ps_->Call(&ParameterServerService::Stub::Stats, req, &resp).ok());
    return resp;
  }

  std::unique_ptr<GrpcPs> ps_;
};

}  // namespace pstrain::ps_testing
