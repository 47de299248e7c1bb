// The trainer's push path with tags (PsClient and TableClient, as ParameterSession uses them)
// against a real PS behind gRPC on 127.0.0.1: every request of a tagged push carries the tag,
// so the same batch pushed again is dropped by the PS (counted) and applied once, even a batch
// with no key on the PS; a tagged table push that would need two requests to one PS is refused
// before anything is sent.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/ps_client.h"
#include "client/table_client.h"
#include "common/rpc.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps_tables_testing.h"
#include "ps_testing.h"
#include "testing.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

class WorkerTaggedPushTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ps_ = ps_testing::MakePs();
    service_ = MakeParameterServerService(ps_.get(), nullptr);
    address_ = absl::StrCat("127.0.0.1:", testing::FreePorts(1)[0]);
    server_ = *StartGrpcServer(address_, {service_.get()});
    ASSERT_TRUE(ps_testing::CreateTables(ps_.get(), {ps_testing::TableOf("emb", 2, 0.5f)}).ok());
    CreateVariablesRequest req;
    *req.mutable_sender() = ps_testing::Chief();
    VariableDef* def = req.add_variables();
    def->set_name("w");
    EncodeTensor(Tensor({2}, 1.0f), def->mutable_initial_value());
    *def->mutable_optimizer() = ps_testing::Sgd(1.0);
    CreateVariablesResponse resp;
    ASSERT_TRUE(ps_->CreateVariables(req, &resp).ok());
  }
  void TearDown() override {
    ps_->Stop();
    server_->Shutdown();
  }
  int64_t Duplicates() {
    StatsRequest req;
    *req.mutable_sender() = ps_testing::Chief();
    StatsResponse resp;
    EXPECT_TRUE(ps_->Stats(req, &resp).ok());
    return resp.duplicates_dropped();
  }
  static PushTag Tag(int64_t batch) {
    PushTag t;
    t.set_epoch(0);
    t.set_task(3);
    t.set_batch(batch);
    return t;
  }

  std::unique_ptr<ParameterServer> ps_;
  std::unique_ptr<grpc::Service> service_;
  std::string address_;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(WorkerTaggedPushTest, ADensePushOfABatchAgainIsDroppedByThePs) {
  PsClient client({address_}, {{"w", {2}, {{"w", 0, 0, 2}}}}, ps_testing::Worker(0),
                  absl::Seconds(10));
  std::vector<const float*> values;
  ASSERT_TRUE(client.Pull(&values).ok());
  const PushTag first = Tag(0), second = Tag(1);
  const std::vector<Tensor> grads = {Tensor({2}, 0.25f)};
  ASSERT_TRUE(client.Push(grads, nullptr, &first).ok());
  ASSERT_TRUE(client.Push(grads, nullptr, &first).ok());  // acknowledged, not applied
  EXPECT_EQ(Duplicates(), 1);
  ASSERT_TRUE(client.Push(grads, nullptr, &second).ok());
  ASSERT_TRUE(client.Push(grads).ok());  // untagged: always applied
  EXPECT_EQ(Duplicates(), 1);
  ASSERT_TRUE(client.Pull(&values).ok());
  EXPECT_FLOAT_EQ(values[0][0], 1.0f - 3 * 0.25f);
}

TEST_F(WorkerTaggedPushTest, ATablePushOfABatchAgainIsDroppedByThePs) {
  TableClient client({address_}, {{"emb", 2}}, ps_testing::Worker(0), absl::Seconds(10));
  const std::vector<std::vector<uint64_t>> keys = {{7, 8}};
  std::vector<std::vector<float>> rows;
  ASSERT_TRUE(client.Lookup(keys, &rows).ok());
  const PushTag tag = Tag(0);
  const std::vector<std::vector<float>> grads = {{0.1f, 0.1f, 0.2f, 0.2f}};
  ASSERT_TRUE(client.Push(keys, grads, false, nullptr, &tag).ok());
  ASSERT_TRUE(client.Push(keys, grads, false, nullptr, &tag).ok());
  EXPECT_EQ(Duplicates(), 1);
  ASSERT_TRUE(client.Lookup(keys, &rows).ok());
  EXPECT_FLOAT_EQ(rows[0][0], 0.5f - 0.1f);
  EXPECT_FLOAT_EQ(rows[0][2], 0.5f - 0.2f);
}

// A batch with no key of a table on a PS still moves that table part's watermark there (the
// chief's final check wants every batch of a task on every part): a second copy is a duplicate.
TEST_F(WorkerTaggedPushTest, ATaggedTablePushWithNoKeysStillReachesThePs) {
  TableClient client({address_}, {{"emb", 2}}, ps_testing::Worker(0), absl::Seconds(10));
  const std::vector<std::vector<uint64_t>> keys = {{}};
  std::vector<std::vector<float>> rows;
  ASSERT_TRUE(client.Lookup(keys, &rows).ok());
  const PushTag tag = Tag(0);
  const std::vector<std::vector<float>> grads = {{}};
  ASSERT_TRUE(client.Push(keys, grads, false, nullptr, &tag).ok());
  ASSERT_TRUE(client.Push(keys, grads, false, nullptr, &tag).ok());
  EXPECT_EQ(Duplicates(), 1);
  ASSERT_TRUE(client.Push(keys, grads).ok());  // untagged and empty: nothing to send
  EXPECT_EQ(Duplicates(), 1);
}

TEST_F(WorkerTaggedPushTest, ATaggedTablePushNeedingTwoRequestsToAPsIsRefused) {
  TableClient client({address_}, {{"emb", 2}}, ps_testing::Worker(0), absl::Seconds(10),
                     {.max_keys = 1});
  const std::vector<std::vector<uint64_t>> keys = {{7, 8}};
  std::vector<std::vector<float>> rows;
  ASSERT_TRUE(client.Lookup(keys, &rows).ok());
  const PushTag tag = Tag(0);
  const std::vector<std::vector<float>> grads = {{0.1f, 0.1f, 0.2f, 0.2f}};
  const absl::Status s = client.Push(keys, grads, false, nullptr, &tag);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("table \"emb\": the keys of one tagged push to ps:0 need "
                                     "more than one request"));
  ASSERT_TRUE(client.Lookup(keys, &rows).ok());
  EXPECT_FLOAT_EQ(rows[0][0], 0.5f);           // nothing was sent
  EXPECT_TRUE(client.Push(keys, grads).ok());  // untagged, it may take two requests
}

}  // namespace
}  // namespace pstrain
