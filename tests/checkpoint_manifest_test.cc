// A checkpoint read back from a manifest that lies: every field is checked against
// common/limits.h, and every path against the checkpoint's directory, before anything is
// allocated or opened. Each bad manifest is refused with an error naming the file, the field and
// the value; nothing crashes, and no single allocation grows with what the manifest declares.
#include "common/checkpoint_manifest.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <new>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_format.h"
#include "common/limits.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/checkpoints.h"
#include "nlohmann/json.hpp"
#include "testing.h"

// Every allocation of this test binary goes through here: the largest one is recorded, and one
// over kRefused fails as if the memory were not there (so a reader that sizes memory by what a
// manifest declares is caught without taking the machine's memory).
namespace {
constexpr size_t kRefused = size_t{256} << 20;
std::atomic<size_t> g_largest{0};

void* Allocate(size_t n) {
  size_t seen = g_largest.load(std::memory_order_relaxed);
  while (n > seen && !g_largest.compare_exchange_weak(seen, n, std::memory_order_relaxed)) {
  }
  if (n > kRefused) throw std::bad_alloc();
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
}  // namespace

void* operator new(size_t n) { return Allocate(n); }
void* operator new[](size_t n) { return Allocate(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }

namespace pstrain {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

class CheckpointManifestTest : public ::testing::Test {
 protected:
  // A valid checkpoint of one PS: variable "w" of shape [4, 2] (SGD), step 7.
  void SetUp() override {
    root_ = testing::TempDir();
    dir_ = root_ + "/ckpt-7";
    std::filesystem::create_directories(dir_);
    Manifest m;
    m.global_step = 7;
    m.num_ps = 1;
    m.files.push_back({"ps-0.ckpt", {}});
    m.signature.variables.push_back({"w", {4, 2}});
    ASSERT_TRUE(WriteManifest(dir_, m).ok());
    manifest_ = nlohmann::json::parse(testing::ReadFile(dir_ + "/manifest.json"));
    WritePart(Part({4, 2}, 4));
  }
  // The part of one shard "w" of `shape` holding rows [0, rows).
  static PartFile Part(const std::vector<int64_t>& shape, int64_t rows) {
    PartFile part;
    part.ps_task = 0;
    part.num_ps = 1;
    part.checkpoint_id = 7;
    ShardRecord& s = part.shards.emplace_back();
    s.name = s.variable = "w";
    s.shape = shape;
    s.row_begin = 0;
    s.row_end = rows;
    s.version = 7;
    s.optimizer = "sgd";
    for (int64_t i = 0; i < rows * 2; ++i) s.values.push_back(static_cast<float>(i));
    return part;
  }
  // Writes `part` as ps-0.ckpt, and its size and checksum into the manifest to come.
  void WritePart(const PartFile& part) {
    absl::StatusOr<WrittenFile> w = WritePartFile(part, dir_ + "/ps-0.ckpt");
    ASSERT_TRUE(w.ok()) << w.status();
    manifest_["files"][0]["bytes"] = w->bytes;
    manifest_["files"][0]["xxh3"] = absl::StrCat(absl::Hex(w->checksum, absl::kZeroPad16));
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  // The manifest changed by `edit`, then LoadCheckpoint of the directory, with the largest
  // allocation it made. An exception out of it (bad_alloc, length_error) fails the test.
  absl::Status LoadWith(const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = manifest_;
    edit(j);
    std::ofstream(dir_ + "/manifest.json", std::ios::trunc) << j.dump();
    g_largest = 0;
    absl::Status s;
    try {
      s = LoadCheckpoint(dir_).status();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "LoadCheckpoint threw " << e.what();
      s = absl::InternalError(e.what());
    }
    largest_ = g_largest;
    return s;
  }
  // Refused, naming the manifest, `field` and `value`, with no allocation above 16 MiB (the
  // largest manifest here, of 65537 variables, is 2 MB).
  void ExpectRefused(const absl::Status& s, const std::string& field, const std::string& value) {
    EXPECT_TRUE(absl::IsDataLoss(s)) << s;
    EXPECT_THAT(s.message(), AllOf(HasSubstr(dir_ + "/manifest.json"),
                                   HasSubstr("\"" + field + "\""), HasSubstr(value)));
    EXPECT_LT(largest_, size_t{16} << 20) << "bytes in one allocation";
  }

  std::string root_, dir_;
  nlohmann::json manifest_;
  size_t largest_ = 0;
};

TEST_F(CheckpointManifestTest, TheValidCheckpointLoads) {
  absl::Status s = LoadWith([](nlohmann::json&) {});
  EXPECT_TRUE(s.ok()) << s;
}

TEST_F(CheckpointManifestTest, AHugeShapeIsRefusedBeforeAnythingIsAllocated) {
  ExpectRefused(LoadWith([](nlohmann::json& j) {
                  j["variables"][0]["shape"] = {1048576, 1048576};
                }),
                "variables[0].shape", "[1048576,1048576]");
}

TEST_F(CheckpointManifestTest, ANegativeDimensionIsRefused) {
  ExpectRefused(LoadWith([](nlohmann::json& j) {
                  j["variables"][0]["shape"] = {-784, 32};
                }),
                "variables[0].shape", "[-784,32]");
}

TEST_F(CheckpointManifestTest, AnOverflowingElementCountIsRefused) {
  const int64_t big = int64_t{1} << 40;
  ExpectRefused(LoadWith([&](nlohmann::json& j) {
                  j["variables"][0]["shape"] = {big, big, big};
                }),
                "variables[0].shape", "[1099511627776,");
  ExpectRefused(LoadWith([](nlohmann::json& j) {
                  j["variables"][0]["shape"] = nlohmann::json::parse("[18446744073709551615]");
                }),
                "variables[0].shape", "18446744073709551615");
  ExpectRefused(LoadWith([](nlohmann::json& j) {
                  j["variables"][0]["shape"] = std::vector<int64_t>(kMaxTensorRank + 1, 1);
                }),
                "variables[0].shape", "[1,1,");
}

TEST_F(CheckpointManifestTest, TooManyVariablesOrTablesAreRefused) {
  ExpectRefused(LoadWith([](nlohmann::json& j) {
                  for (int i = 0; i < kMaxCheckpointVariables; ++i) {
                    j["variables"].push_back({{"name", "v" + std::to_string(i)}, {"shape", {1}}});
                  }
                }),
                "variables", "65537 items");
  ExpectRefused(LoadWith([](nlohmann::json& j) {
                  j["variables"].push_back({{"name", "w"}, {"shape", {4, 2}}});
                }),
                "variables[1].name", "listed twice");
  ExpectRefused(LoadWith([](nlohmann::json& j) {
                  j["variables"][0]["name"] = std::string(kMaxNameBytes + 1, 'x');
                }),
                "variables[0].name", "1 to 1024 bytes");
  ExpectRefused(LoadWith([](nlohmann::json& j) {
                  j["tables"].push_back({{"name", "t"}, {"dim", kMaxTableDim + 1}});
                }),
                "tables[0].dim", "65537");
}

TEST_F(CheckpointManifestTest, APartNameLeadingOutOfTheDirectoryIsRefused) {
  // A copy of the part beside the checkpoint: before the fix it was read, and the restore worked.
  std::filesystem::copy_file(dir_ + "/ps-0.ckpt", root_ + "/ps-0.ckpt");
  ExpectRefused(LoadWith([](nlohmann::json& j) { j["files"][0]["name"] = "../ps-0.ckpt"; }),
                "files[0].name", "\"../ps-0.ckpt\"");
  const std::string absolute = root_ + "/ps-0.ckpt";
  ExpectRefused(LoadWith([&](nlohmann::json& j) { j["files"][0]["name"] = absolute; }),
                "files[0].name", absolute);
  ExpectRefused(LoadWith([](nlohmann::json& j) { j["files"][0]["name"] = "sub/ps-0.ckpt"; }),
                "files[0].name", "sub/ps-0.ckpt");
}

TEST_F(CheckpointManifestTest, ASymlinkedPartLeavingTheDirectoryIsRefused) {
  const std::string outside = root_ + "/elsewhere.ckpt";
  std::filesystem::rename(dir_ + "/ps-0.ckpt", outside);
  std::filesystem::create_symlink(outside, dir_ + "/ps-0.ckpt");
  absl::Status s = LoadWith([](nlohmann::json&) {});
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), AllOf(HasSubstr(dir_ + "/ps-0.ckpt"), HasSubstr("symbolic link")));
  // A symlinked checkpoint directory in a root is not one of its checkpoints either.
  std::filesystem::remove(dir_ + "/ps-0.ckpt");
  std::filesystem::rename(outside, dir_ + "/ps-0.ckpt");
  const std::string other = testing::TempDir();
  std::filesystem::create_directory_symlink(dir_, other + "/ckpt-9");
  EXPECT_TRUE(ListCheckpoints(other).empty());
  std::filesystem::remove_all(other);
}

TEST_F(CheckpointManifestTest, ANonNumericOrNegativeStepOrPsCountIsRefused) {
  ExpectRefused(LoadWith([](nlohmann::json& j) { j["global_step"] = "seven"; }), "global_step",
                "\"seven\"");
  ExpectRefused(LoadWith([](nlohmann::json& j) { j["global_step"] = -7; }), "global_step", "-7");
  ExpectRefused(LoadWith([](nlohmann::json& j) { j["global_step"] = 7.5; }), "global_step", "7.5");
  ExpectRefused(LoadWith([](nlohmann::json& j) { j["num_ps"] = kMaxTasks + 1; }), "num_ps", "4097");
  ExpectRefused(LoadWith([](nlohmann::json& j) { j["files"][0]["bytes"] = -1; }), "files[0].bytes",
                "-1");
  ExpectRefused(LoadWith([](nlohmann::json& j) { j.erase("variables"); }), "variables", "missing");
  // ckpt-<step> directories with a sign are not checkpoints.
  std::filesystem::create_directories(root_ + "/ckpt--5");
  for (const auto& [step, dir] : ListCheckpoints(root_)) EXPECT_GE(step, 0) << dir;
}

// A model's schema and statistics travel in the manifest and back; anything else under
// "features" is refused, naming it.
TEST_F(CheckpointManifestTest, FeaturesAreAnObjectOfASchemaAndItsStatistics) {
  nlohmann::json features = {{"schema", {{"label", "y"}}}, {"stats", {{"rows", 3}}}};
  ASSERT_TRUE(LoadWith([&](nlohmann::json& j) { j["features"] = features; }).ok());
  absl::StatusOr<Manifest> m = ReadManifest(dir_);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->signature.features, features);
  ExpectRefused(LoadWith([](nlohmann::json& j) { j["features"] = "csv"; }), "features", "\"csv\"");
  ExpectRefused(LoadWith([](nlohmann::json& j) {
                  j["features"] = {{"schema", {{"a", 1}}}};
                }),
                "features", "not an object of a schema and its statistics");
  ExpectRefused(LoadWith([](nlohmann::json& j) {
                  j["features"] = {{"schema", 1}, {"stats", {{"a", 1}}}};
                }),
                "features", "not an object");
}

// Sizes within the limits, parts that hold less: refused as truncated, and the variable's
// declared size is never allocated.
TEST_F(CheckpointManifestTest, PartsSmallerThanTheManifestSaysAreTruncated) {
  // 2^28 floats (1 GiB, within the 8 GiB of a variable) declared; the part holds 8 of them.
  const std::vector<int64_t> declared = {int64_t{1} << 27, 2};
  auto declare = [&](nlohmann::json& j) { j["variables"][0]["shape"] = declared; };
  absl::Status s = LoadWith(declare);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr(dir_), HasSubstr("'w'")));
  EXPECT_LT(largest_, size_t{1} << 20);
  WritePart(Part(declared, 4));  // the shard says so too, and holds its first 4 rows
  s = LoadWith(declare);
  EXPECT_THAT(s.message(), AllOf(HasSubstr(dir_), HasSubstr("cover 4 of its 134217728 rows"),
                                 HasSubstr("truncated")));
  EXPECT_LT(largest_, size_t{1} << 20);
  WritePart(Part({4, 2}, 4));
  // The part cut short of the size the manifest lists: named before it is read.
  std::filesystem::resize_file(dir_ + "/ps-0.ckpt", 40);
  s = LoadWith([](nlohmann::json&) {});
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr(dir_ + "/ps-0.ckpt"), HasSubstr("truncated"), HasSubstr("40 bytes")));
  // A part that is a huge sparse file of the declared size: refused by its missing trailer, not
  // read into memory.
  s = LoadWith([](nlohmann::json& j) { j["files"][0]["bytes"] = int64_t{1} << 40; });
  EXPECT_FALSE(s.ok());
  std::filesystem::resize_file(dir_ + "/ps-0.ckpt", int64_t{1} << 36);
  s = LoadWith([](nlohmann::json& j) { j["files"][0]["bytes"] = int64_t{1} << 36; });
  EXPECT_THAT(s.message(), AllOf(HasSubstr(dir_ + "/ps-0.ckpt"), HasSubstr("no trailer")));
  EXPECT_LT(largest_, size_t{1} << 20);
}

// A root whose only checkpoint is bad is not "no checkpoint" (which --resume takes for a job to
// start from scratch): the error names the problem.
TEST_F(CheckpointManifestTest, ARootWhoseCheckpointsAreAllBadNamesTheProblem) {
  nlohmann::json j = manifest_;
  j["variables"][0]["shape"] = {-784, 32};
  std::ofstream(dir_ + "/manifest.json", std::ios::trunc) << j.dump();
  absl::StatusOr<LoadedCheckpoint> c = LoadCheckpoint(root_);
  EXPECT_FALSE(absl::IsNotFound(c.status())) << c.status();
  EXPECT_THAT(c.status().message(), AllOf(HasSubstr("variables[0].shape"), HasSubstr("[-784,32]"),
                                          Not(HasSubstr("no checkpoint yet"))));
  std::filesystem::remove_all(dir_);
  EXPECT_TRUE(absl::IsNotFound(LoadCheckpoint(root_).status()));
}

}  // namespace
}  // namespace pstrain
