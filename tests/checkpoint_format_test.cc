// The part file format: a round trip of every field, and the errors of a missing, damaged or
// unwritable file, each naming the path.
#include "common/checkpoint_format.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

void ExpectWatermarks(const std::vector<TaskWatermarkRecord>& got,
                      const std::vector<TaskWatermarkRecord>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].epoch, want[i].epoch) << i;
    EXPECT_EQ(got[i].task, want[i].task) << i;
    EXPECT_EQ(got[i].next_batch, want[i].next_batch) << i;
  }
}

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
  s.applied = {{0, 3, 7}, {1, 0, 1}};
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
  t.applied = {{2, 5, 40000000000}};
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
  ExpectWatermarks(s.applied, want.shards[0].applied);
  ExpectWatermarks(r->tables[0].applied, want.tables[0].applied);
  std::filesystem::remove_all(dir);
}

// A format 1 file (as builds before the watermarks wrote it) still reads, with no watermarks,
// and its bytes are exactly the format 2 file's less the watermark lists.
TEST(CheckpointFormatTest, ReadsFormatOneWithoutWatermarks) {
  const std::string dir = testing::TempDir();
  const std::string v1 = dir + "/v1.ckpt", v2 = dir + "/v2.ckpt";
  absl::StatusOr<WrittenFile> w1 = WritePartFile(Sample(), v1, 1);
  ASSERT_TRUE(w1.ok()) << w1.status();
  absl::StatusOr<WrittenFile> w2 = WritePartFile(Sample(), v2);
  ASSERT_TRUE(w2.ok()) << w2.status();
  // Shard: a list of 2 (8 + 2 * 20 bytes); table: a list of 1 (8 + 20).
  EXPECT_EQ(w2->bytes - w1->bytes, 8 + 2 * 20 + 8 + 20);
  absl::StatusOr<PartFile> r = ReadPartFile(v1);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->shards.size(), 1u);
  ASSERT_EQ(r->tables.size(), 1u);
  EXPECT_TRUE(r->shards[0].applied.empty());
  EXPECT_TRUE(r->tables[0].applied.empty());
  EXPECT_EQ(r->shards[0].slots[1].values, Sample().shards[0].slots[1].values);
  EXPECT_EQ(r->tables[0].last_update, Sample().tables[0].last_update);
  EXPECT_THAT(WritePartFile(Sample(), v1, 3).status().message(), HasSubstr("format version 3"));
  std::filesystem::remove_all(dir);
}

// The byte layout of docs/checkpoints.md: the shard's watermark list ends its record, each
// item i32 epoch, i64 task, i64 next_batch; an unknown version is refused by number.
TEST(CheckpointFormatTest, WatermarksAreWhereTheDocsSay) {
  const std::string dir = testing::TempDir();
  const std::string path = dir + "/ps-1.ckpt";
  PartFile p = Sample();
  p.tables.clear();
  ASSERT_TRUE(WritePartFile(p, path).ok());
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint32_t version = 0;
  std::memcpy(&version, bytes.data() + 8, 4);
  EXPECT_EQ(version, 2u);
  const size_t end = bytes.size() - 24;  // the trailer
  const char* list = bytes.data() + end - (8 + 2 * 20);
  uint64_t count = 0;
  int32_t epoch = 0;
  int64_t task = 0, next_batch = 0;
  std::memcpy(&count, list, 8);
  std::memcpy(&epoch, list + 8 + 20, 4);
  std::memcpy(&task, list + 8 + 20 + 4, 8);
  std::memcpy(&next_batch, list + 8 + 20 + 12, 8);
  EXPECT_EQ(count, 2u);
  EXPECT_EQ(epoch, 1);
  EXPECT_EQ(task, 0);
  EXPECT_EQ(next_batch, 1);
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
