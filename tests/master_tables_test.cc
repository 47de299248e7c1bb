// The chief's side of embedding tables in-process: MasterService.CreateTable checks its sender
// before the Coordinator's hook runs, and SumTableStats adds up the PS tasks' table counters.
#include <string>
#include <vector>

#include "coordinator_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/coordinator.h"
#include "master/tables.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

TEST(CoordinatorCreateTable, ChecksTheSenderThenCallsTheHook) {
  Coordinator c(std::vector<std::string>{"h:1"}, 1, absl::Milliseconds(5));
  RegisterResponse reg;
  RegisterRequest r;
  *r.mutable_sender() = Task("worker", 0, 7);
  ASSERT_TRUE(c.Register(r, &reg).ok());

  CreateTableRequest req;
  req.mutable_table()->set_name("emb");
  CreateTableResponse resp;
  *req.mutable_sender() = Task("worker", 0, 7);
  // Before the chief is ready (a restarted one that has not reset the PS yet): retried.
  absl::Status s = c.CreateTable(req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("not ready yet"));
  c.SetReady();
  // No hook: a chief whose job makes its own tables.
  s = c.CreateTable(req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("--model external"));

  std::vector<std::string> created;
  c.SetCreateTable([&](const TableDef& def) {
    created.push_back(def.name());
    return def.dim() == 0 ? absl::InvalidArgumentError("dim 0") : absl::OkStatus();
  });
  req.clear_sender();
  EXPECT_EQ(c.CreateTable(req, &resp).code(), absl::StatusCode::kInvalidArgument);
  *req.mutable_sender() = Task("worker", 0, 8);  // another process than the one registered
  EXPECT_EQ(c.CreateTable(req, &resp).code(), absl::StatusCode::kFailedPrecondition);
  *req.mutable_sender() = Task("ps", 0, 7);
  EXPECT_EQ(c.CreateTable(req, &resp).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(created.empty());  // refused before the hook

  *req.mutable_sender() = Task("worker", 0, 7);
  EXPECT_EQ(c.CreateTable(req, &resp).code(), absl::StatusCode::kInvalidArgument);  // the hook's
  req.mutable_table()->set_dim(8);
  EXPECT_TRUE(c.CreateTable(req, &resp).ok());
  EXPECT_EQ(created, (std::vector<std::string>{"emb", "emb"}));
}

TEST(SumTableStats, AddsCountersTakesTheLargestVersionKeepsFirstAppearanceOrder) {
  auto stats = [](const std::string& name, uint64_t version, int64_t rows) {
    TableStats t;
    t.set_name(name);
    t.set_dim(4);
    t.set_version(version);
    t.set_rows(rows);
    t.set_bytes(100 * rows);
    t.set_payload_bytes_per_row(32);
    t.set_keys_looked_up(2 * rows);
    t.set_admitted(rows);
    t.set_filtered_lookups(1);
    t.set_filtered_gradients(2);
    t.set_evicted_by_age(3);
    t.set_evicted_by_cap(4);
    t.set_gradient_rows_applied(5);
    return t;
  };
  std::vector<StatsResponse> per_ps(2);
  *per_ps[0].add_tables() = stats("wide", 3, 10);
  *per_ps[0].add_tables() = stats("emb", 5, 20);
  *per_ps[1].add_tables() = stats("emb", 6, 1);
  *per_ps[1].add_tables() = stats("deep", 1, 2);
  const std::vector<TableStats> sum = SumTableStats(per_ps);
  ASSERT_EQ(sum.size(), 3u);
  EXPECT_EQ(sum[0].name(), "wide");
  EXPECT_EQ(sum[1].name(), "emb");
  EXPECT_EQ(sum[2].name(), "deep");
  const TableStats& e = sum[1];
  EXPECT_EQ(e.dim(), 4);
  EXPECT_EQ(e.version(), 6u);
  EXPECT_EQ(e.rows(), 21);
  EXPECT_EQ(e.bytes(), 2100);
  EXPECT_EQ(e.payload_bytes_per_row(), 32);
  EXPECT_EQ(e.keys_looked_up(), 42);
  EXPECT_EQ(e.admitted(), 21);
  EXPECT_EQ(e.filtered_lookups(), 2);
  EXPECT_EQ(e.filtered_gradients(), 4);
  EXPECT_EQ(e.evicted_by_age(), 6);
  EXPECT_EQ(e.evicted_by_cap(), 8);
  EXPECT_EQ(e.gradient_rows_applied(), 10);
  EXPECT_EQ(sum[0].rows(), 10);
  EXPECT_TRUE(SumTableStats({}).empty());
}

}  // namespace
}  // namespace pstrain
