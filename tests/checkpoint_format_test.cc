// The part file format: a round trip of every field, and the errors of a missing, damaged or
// unwritable file, each naming the path.
#include "common/checkpoint_format.h"

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

PartFile Sample() {
  PartFile p;
  p.ps_task = 1;
  p.num_ps = 3;
  p.checkpoint_id = 77;
  ShardRecord& s = p.shards.emplace_back();
  s.name = "w/part_1";
  s.variable = "w";
  s.shape = {5, 2};
  s.row_begin = 3;
  s.row_end = 5;
  s.version = 9;
  s.update_count = 8;
  s.optimizer = "adam";
  s.optimizer_config =
      "\x0a\x04"
      "adam";
  s.values = {1, 2, 3, 4};
  s.slots = {{"exp_avg", {5, 6, 7, 8}}, {"exp_avg_sq", {9, 10, 11, 12}}};
  TableRecord& t = p.tables.emplace_back();
  t.name = "emb";
  t.table_def = "def";
  t.dim = 1;
  t.floats_per_row = 2;
  t.version = 4;
  t.keys = {10, 20};
  t.floats = {0.5f, 1.5f, 2.5f, 3.5f};
  t.step_counts = {1, 2};
  t.last_update = {3, 4};
  return p;
}

TEST(CheckpointFormatTest, RoundTripsEveryField) {
  const std::string dir = testing::TempDir();
  const std::string path = dir + "/ps-1.ckpt";
  absl::StatusOr<WrittenFile> w = WritePartFile(Sample(), path);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->bytes, static_cast<int64_t>(std::filesystem::file_size(path)));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  WrittenFile info;
  absl::StatusOr<PartFile> r = ReadPartFile(path, &info);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(info.checksum, w->checksum);
  const PartFile want = Sample();
  EXPECT_EQ(r->ps_task, 1u);
  EXPECT_EQ(r->num_ps, 3u);
  EXPECT_EQ(r->checkpoint_id, 77u);
  ASSERT_EQ(r->shards.size(), 1u);
  const ShardRecord& s = r->shards[0];
  EXPECT_EQ(s.name, "w/part_1");
  EXPECT_EQ(s.variable, "w");
  EXPECT_EQ(s.shape, want.shards[0].shape);
  EXPECT_EQ(s.row_begin, 3);
  EXPECT_EQ(s.row_end, 5);
  EXPECT_EQ(s.version, 9u);
  EXPECT_EQ(s.update_count, 8);
  EXPECT_EQ(s.optimizer_config, want.shards[0].optimizer_config);
  EXPECT_EQ(s.values, want.shards[0].values);
  ASSERT_EQ(s.slots.size(), 2u);
  EXPECT_EQ(s.slots[1].name, "exp_avg_sq");
  EXPECT_EQ(s.slots[1].values, want.shards[0].slots[1].values);
  ASSERT_EQ(r->tables.size(), 1u);
  EXPECT_EQ(r->tables[0].keys, want.tables[0].keys);
  EXPECT_EQ(r->tables[0].floats, want.tables[0].floats);
  EXPECT_EQ(r->tables[0].step_counts, want.tables[0].step_counts);
  EXPECT_EQ(r->tables[0].last_update, want.tables[0].last_update);
  std::filesystem::remove_all(dir);
}

TEST(CheckpointFormatTest, MissingDamagedAndUnwritableFilesAreNamed) {
  const std::string dir = testing::TempDir();
  const std::string path = dir + "/ps-0.ckpt";
  absl::StatusOr<PartFile> missing = ReadPartFile(path);
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
  ASSERT_TRUE(WritePartFile(Sample(), path).ok());
  {  // a byte of the header changed: the checksum no longer matches
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(0);
    f.put('X');
  }
  absl::StatusOr<PartFile> damaged = ReadPartFile(path);
  EXPECT_TRUE(absl::IsDataLoss(damaged.status())) << damaged.status();
  EXPECT_THAT(damaged.status().message(), HasSubstr(path + ": checksum mismatch"));
  std::ofstream(path, std::ios::trunc) << "short";
  EXPECT_THAT(ReadPartFile(path).status().message(), HasSubstr(path + ": truncated"));
  const std::string nowhere = dir + "/no/such/dir/ps-0.ckpt";
  absl::StatusOr<WrittenFile> w = WritePartFile(Sample(), nowhere);
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(w.status().message(), HasSubstr(nowhere + ".tmp"));
  EXPECT_THAT(w.status().message(), HasSubstr("No such file or directory"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pstrain
