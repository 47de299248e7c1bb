// The chief's final check (docs/recovery.md): every batch of every task of every epoch applied
// once on every shard and table, by the task watermarks the PS report (AppliedTasks); and a
// checkpoint whose ledger the job cannot use loses its watermarks.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/job.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

// 2 epochs of 250 rows in tasks of 100 (100, 100, 50 rows), batches of 32: 4, 4 and 2 batches.
const LedgerShape kShape{250, 100, 2, 2};
constexpr int kBatch = 32;

void Mark(AppliedTasks* a, int epoch, int64_t task, int64_t next) {
  TaskWatermark* w = a->add_tasks();
  w->set_epoch(epoch);
  w->set_task(task);
  w->set_next_batch(next);
}

// One PS holding `shards` shards and `tables` tables, every task complete.
AppliedTasksResponse Complete(int shards, int tables) {
  AppliedTasksResponse r;
  for (int i = 0; i < shards + tables; ++i) {
    AppliedTasks* a = i < shards ? r.add_shards() : r.add_tables();
    a->set_name(i < shards ? "dense/kernel/part_" + std::to_string(i) : "emb");
    for (int e = 0; e < 2; ++e) {
      for (int t = 0; t < 3; ++t) Mark(a, e, t, t < 2 ? 4 : 2);
    }
  }
  return r;
}

TEST(CheckWatermarksTest, EveryTaskCompleteOnEveryShardAndTablePasses) {
  EXPECT_EQ(CheckWatermarks({Complete(2, 1), Complete(1, 1)}, kShape, kBatch, 3, 1), "");
}

TEST(CheckWatermarksTest, NamesTheFirstShardAndTaskShortOfBatches) {
  std::vector<AppliedTasksResponse> ps = {Complete(2, 1), Complete(1, 1)};
  ps[1].mutable_shards(0)->mutable_tasks(4)->set_next_batch(3);  // epoch 1, task 1
  EXPECT_EQ(CheckWatermarks(ps, kShape, kBatch, 3, 1),
            "ps:1 shard dense/kernel/part_0: task 1 of epoch 1 has 3 of its 4 batches applied");
}

TEST(CheckWatermarksTest, AMissingTaskOrTableOrShardFails) {
  std::vector<AppliedTasksResponse> ps = {Complete(2, 1), Complete(1, 1)};
  ps[0].mutable_tables(0)->mutable_tasks()->RemoveLast();  // epoch 1, task 2
  EXPECT_EQ(CheckWatermarks(ps, kShape, kBatch, 3, 1),
            "ps:0 table emb: task 2 of epoch 1 has 0 of its 2 batches applied");
  EXPECT_THAT(CheckWatermarks({Complete(2, 1), Complete(1, 1)}, kShape, kBatch, 4, 1),
              HasSubstr("the PS hold 3 shards; the job created 4"));
  EXPECT_THAT(CheckWatermarks({Complete(2, 1), Complete(1, 0)}, kShape, kBatch, 3, 1),
              HasSubstr("the PS hold 1 table parts; the job created 2"));
  // A PS that lost everything (a Reset, nothing created again) holds nothing to check.
  EXPECT_THAT(CheckWatermarks({Complete(2, 1), {}}, kShape, kBatch, 3, 1),
              HasSubstr("the PS hold 2 shards; the job created 3"));
}

TEST(CheckWatermarksTest, ATaskTheJobDoesNotHaveFails) {
  std::vector<AppliedTasksResponse> ps = {Complete(1, 0)};
  Mark(ps[0].mutable_shards(0), 2, 0, 4);
  EXPECT_EQ(CheckWatermarks(ps, kShape, kBatch, 1, 0),
            "ps:0 shard dense/kernel/part_0 holds batches of task 0 of epoch 2, which the job "
            "does not have");
}

TEST(DropWatermarksTest, ClearsEveryShardsAndTablesWatermarks) {
  LoadedCheckpoint ckpt;
  ckpt.variables.resize(1);
  ckpt.variables[0].pieces.push_back({0, 10, 5, 0, {{0, 1, 3}}});
  ckpt.tables.resize(1);
  ckpt.tables[0].applied.push_back({1, 2, 4});
  DropWatermarks(&ckpt);
  EXPECT_TRUE(ckpt.variables[0].pieces[0].applied.empty());
  EXPECT_TRUE(ckpt.tables[0].applied.empty());
  EXPECT_EQ(ckpt.variables[0].pieces[0].end, 10);
}

}  // namespace
}  // namespace pstrain
