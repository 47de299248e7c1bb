// Embedding tables through the gRPC ParameterServerService on 127.0.0.1: CreateTables, Lookup and
// PushSparse with raw key and row bytes, refusals that reach the client with their message, a
// sync lookup that waits on the server, and requests that do not parse.

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/rpc.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps_tables_testing.h"
#include "raw_call_testing.h"

namespace pstrain {
namespace {

using namespace ps_testing;  // NOLINT
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class PsTablesGrpcTest : public ::testing::Test {
 protected:
  void Start(const ConfigureRequest* config) {
    ps_ = MakePs(config);
    service_ = MakeParameterServerService(ps_.get(), nullptr);
    int port = 0;
    absl::StatusOr<std::unique_ptr<grpc::Server>> started =
        StartGrpcServer("127.0.0.1:0", {service_.get()}, &port);
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = *std::move(started);
    address_ = absl::StrCat("127.0.0.1:", port);
    channel_ = MakeChannel(address_);
    ASSERT_TRUE(channel_->WaitForConnected(absl::ToChronoTime(absl::Now() + absl::Seconds(30))));
    stub_ = ParameterServerService::NewStub(channel_);
    CreateTablesRequest req;
    *req.mutable_sender() = Chief();
    *req.add_tables() = TableOf("emb", 2, 0.0f, 0.5);
    CreateTablesResponse resp;
    grpc::ClientContext ctx;
    grpc::Status s = stub_->CreateTables(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  void TearDown() override {
    if (ps_) ps_->Stop();
    if (server_) server_->Shutdown();
  }

  absl::Status Lookup(const LookupRequest& req, LookupResponse* resp) {
    grpc::ClientContext ctx;
    return FromGrpcStatus(stub_->Lookup(&ctx, req, resp));
  }
  absl::Status Push(const Sender& from, const std::vector<SparseGradient>& gs,
                    PushSparseResponse* resp) {
    grpc::ClientContext ctx;
    return FromGrpcStatus(stub_->PushSparse(&ctx, PushSparseReq(from, gs), resp));
  }

  std::unique_ptr<ParameterServer> ps_;
  std::unique_ptr<grpc::Service> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<ParameterServerService::Stub> stub_;
};

TEST_F(PsTablesGrpcTest, LookupAndPushSparseCarryRawRowsAndRefusalsSayWhy) {
  Start(nullptr);
  LookupResponse looked;
  ASSERT_TRUE(Lookup(LookupReq(Worker(0), {{"emb", KeyBytes({10, 20, 30})}}), &looked).ok());
  ASSERT_EQ(looked.tables_size(), 1);
  EXPECT_THAT(Floats(looked.tables(0).rows()), ElementsAre(0, 0, 0, 0, 0, 0));

  PushSparseResponse pushed;
  ASSERT_TRUE(Push(Worker(0), {Grad("emb", {30, 10}, {1, 2, 4, 8}, 0)}, &pushed).ok());
  EXPECT_THAT(pushed.versions(), ElementsAre(1));
  ASSERT_TRUE(Lookup(LookupReq(Worker(1), {{"emb", KeyBytes({10, 20, 30})}}), &looked).ok());
  EXPECT_EQ(looked.tables(0).version(), 1u);
  EXPECT_THAT(Floats(looked.tables(0).rows()), ElementsAre(-2, -4, 0, 0, -0.5f, -1));

  absl::Status s = Push(Worker(0), {Grad("emb", {10, 10}, {1, 1, 1, 1}, 1)}, &pushed);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("table 'emb' on ps task 0: key 10 appears more than once"));
  s = Push(Worker(0), {Grad("emb", {10}, {1, 1, 1}, 1)}, &pushed);
  EXPECT_THAT(s.message(), HasSubstr("table 'emb' on ps task 0: 1 keys need 1 x 2 floats, got 3"));
  s = Lookup(LookupReq(Worker(0), {{"nope", KeyBytes({1})}}), &looked);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("table 'nope' not found on ps task 0"));

  StatsRequest stats_req;
  *stats_req.mutable_sender() = Chief();
  StatsResponse stats;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->Stats(&ctx, stats_req, &stats).ok());
  ASSERT_EQ(stats.tables_size(), 1);
  EXPECT_EQ(stats.tables(0).name(), "emb");
  EXPECT_EQ(stats.tables(0).rows(), 3);
  EXPECT_EQ(stats.tables(0).version(), 1u);
}

TEST_F(PsTablesGrpcTest, ASyncLookupWaitsOnTheServerUntilTheStepApplies) {
  const ConfigureRequest config = Config("sync", 2, 2, 0, 60, {});
  Start(&config);
  LookupResponse first;
  ASSERT_TRUE(Lookup(LookupReq(Worker(0), {{"emb", KeyBytes({5})}}), &first).ok());
  PushSparseResponse pushed;
  ASSERT_TRUE(Push(Worker(0), {Grad("emb", {5}, {4, 4}, 0)}, &pushed).ok());

  absl::Notification served;
  LookupResponse next;
  absl::Status next_status;
  std::thread waiter([&] {
    next_status = Lookup(LookupReq(Worker(0), {{"emb", KeyBytes({5})}}, 1), &next);
    served.Notify();
  });
  ASSERT_TRUE(Eventually([&] { return Stats(ps_.get()).pulls_waited() == 1; }));
  EXPECT_FALSE(served.HasBeenNotified());
  ASSERT_TRUE(Push(Worker(1), {Grad("emb", {}, {}, 0)}, &pushed).ok());
  served.WaitForNotification();
  waiter.join();
  ASSERT_TRUE(next_status.ok()) << next_status;
  EXPECT_EQ(next.tables(0).version(), 1u);
  EXPECT_THAT(Floats(next.tables(0).rows()), ElementsAre(-1, -1));  // 0.5 * (4 + 0) / 2
}

TEST_F(PsTablesGrpcTest, TableRequestsThatDoNotParseAreInvalidArgument) {
  Start(nullptr);
  const std::shared_ptr<grpc::Channel> channel = channel_;
  for (const char* method : {"CreateTables", "Lookup", "PushSparse"}) {
    SCOPED_TRACE(method);
    const grpc::Status status =
        ps_testing::RawUnaryCall(channel, absl::StrCat("/pstrain.ParameterServerService/", method),
                                 std::string("\xff\xff\xff\xff\x0f"));
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), AllOf(HasSubstr(method), HasSubstr("not a valid")));
  }
}

}  // namespace
}  // namespace pstrain
