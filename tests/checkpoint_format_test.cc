// The part file format: a round trip of every field, and the errors of a missing, damaged or
// unwritable file, each naming the path.
#include "common/checkpoint_format.h"

#include <xxhash.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/limits.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing.h"

namespace pstrain {
namespace {

using ::testing::AllOf;
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

// The bytes of the file at `path`, and writing them back with the trailer's checksum made right
// again: a file that lies in a field yet passes the checksum (XXH3 guards against damage, not
// against a crafted file).
std::string Bytes(const std::string& path) { return testing::ReadFile(path); }
void WriteResigned(const std::string& path, std::string bytes) {
  const size_t body = bytes.size() - 24;
  const uint64_t checksum = XXH3_64bits(bytes.data(), body);
  std::memcpy(bytes.data() + body + 16, &checksum, 8);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Fields that lie, each written faithfully by the writer: refused by the reader, naming the
// file, the record and the value, before anything is sized by them.
TEST(CheckpointFormatTest, FieldsOutsideTheLimitsAreRefused) {
  const std::string dir = testing::TempDir();
  const std::string path = dir + "/ps-0.ckpt";
  auto refused = [&](const PartFile& p, const std::vector<std::string>& says) {
    ASSERT_TRUE(WritePartFile(p, path).ok());
    absl::StatusOr<PartFile> r = ReadPartFile(path);
    EXPECT_TRUE(absl::IsDataLoss(r.status())) << r.status();
    EXPECT_THAT(r.status().message(), HasSubstr(path + ": "));
    for (const std::string& s : says) EXPECT_THAT(r.status().message(), HasSubstr(s));
  };
  PartFile p = Sample();
  p.shards[0].shape = {-784, 32};
  p.shards[0].slots.clear();
  p.shards[0].values.clear();
  p.shards[0].row_begin = p.shards[0].row_end = 0;
  refused(p, {"shard 'w/part_1'", "[-784, 32]"});
  p.shards[0].shape = {int64_t{1} << 20, int64_t{1} << 20};
  refused(p, {"shard 'w/part_1'", "[1048576, 1048576]"});
  p = Sample();
  p.shards[0].row_end = 9;  // past the shape's 5 rows
  refused(p, {"shard 'w/part_1'", "rows [3, 9)"});
  p = Sample();
  p.shards[0].update_count = -1;
  refused(p, {"update_count -1"});
  p = Sample();
  p.shards[0].name = std::string(kMaxNameBytes + 1, 'n');
  refused(p, {"1025"});
  p = Sample();
  p.tables[0].dim = -5;
  refused(p, {"table 'emb'", "dim -5"});
  p = Sample();
  p.tables[0].dim = 1;
  p.tables[0].floats_per_row = 1000;  // the row and 999 slots
  p.tables[0].floats.assign(2000, 0.0f);
  refused(p, {"table 'emb'", "1000 floats per row"});
  p = Sample();
  p.ps_task = 3;  // of 3 PS
  refused(p, {"ps task 3 of 3 PS"});
  std::filesystem::remove_all(dir);
}

// Counts and lengths in the bytes that lie: a record longer or shorter than it says, an array
// whose count runs past the end. Refused, never sized by the count.
TEST(CheckpointFormatTest, LyingLengthsAreRefused) {
  const std::string dir = testing::TempDir();
  const std::string path = dir + "/ps-0.ckpt";
  PartFile p = Sample();
  p.tables.clear();
  ASSERT_TRUE(WritePartFile(p, path).ok());
  const std::string good = Bytes(path);
  // The shard record's payload length, just after the header (28 bytes) and its kind byte.
  constexpr size_t kRecordBytes = 28 + 1;
  uint64_t payload = 0;
  std::memcpy(&payload, good.data() + kRecordBytes, 8);
  std::string lying = good;
  const uint64_t shorter = payload - 8;
  std::memcpy(lying.data() + kRecordBytes, &shorter, 8);
  WriteResigned(path, lying);
  absl::StatusOr<PartFile> r = ReadPartFile(path);
  EXPECT_TRUE(absl::IsDataLoss(r.status())) << r.status();
  EXPECT_THAT(r.status().message(),
              AllOf(HasSubstr(path), HasSubstr(absl::StrCat("says ", shorter, " bytes"))));
  // The name's length (the first field of the record) past the end of the file.
  lying = good;
  const uint64_t huge = uint64_t{1} << 40;
  std::memcpy(lying.data() + kRecordBytes + 8, &huge, 8);
  WriteResigned(path, lying);
  r = ReadPartFile(path);
  EXPECT_TRUE(absl::IsDataLoss(r.status())) << r.status();
  EXPECT_THAT(r.status().message(), AllOf(HasSubstr(path), HasSubstr("past the end")));
  std::filesystem::remove_all(dir);
}

// A part is the checkpoint directory's own regular file: a symbolic link (which could lead
// anywhere) and a directory are refused, naming the path.
TEST(CheckpointFormatTest, APartThatIsNotARegularFileOfItsDirectoryIsRefused) {
  const std::string dir = testing::TempDir();
  const std::string outside = testing::TempDir();
  ASSERT_TRUE(WritePartFile(Sample(), outside + "/ps-0.ckpt").ok());
  const std::string path = dir + "/ps-0.ckpt";
  std::filesystem::create_symlink(outside + "/ps-0.ckpt", path);
  absl::StatusOr<PartFile> r = ReadPartFile(path);
  EXPECT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), AllOf(HasSubstr(path), HasSubstr("symbolic link")));
  std::filesystem::remove(path);
  std::filesystem::create_directory(path);
  r = ReadPartFile(path);
  EXPECT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), AllOf(HasSubstr(path), HasSubstr("not a regular file")));
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(outside);
}

}  // namespace
}  // namespace pstrain
