// Checkpoints of real jobs (pstrain launch, real processes on 127.0.0.1): a checkpoint saved by
// 2 PS restores bit-identically into 1 and 3 PS; a corrupted or truncated part is found and the
// previous checkpoint used; a full disk (a file size limit) keeps the previous checkpoint and
// the job; a second chief on one directory and a checkpoint of another model are refused; with
// the task queue every manifest holds the ledger of its cut.
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "checkpoint_testing.h"
#include "common/checkpoint_manifest.h"
#include "ctr_testing.h"
#include "gmock/gmock.h"
#include "nlohmann/json.hpp"
#include "testing.h"

namespace pstrain::testing {
namespace {

using ::testing::HasSubstr;

class CheckpointClusterTest : public ProcessTest {
 protected:
  // A 2 PS, 2 worker MNIST MLP job (Adam) saving under `dir` every `every` steps and at the end.
  Result TrainMlp(const std::string& dir, const std::vector<std::string>& more = {},
                  const std::string& every = "150") {
    std::vector<std::string> argv =
        Launch({"--data", MnistDir(), "--hidden", "16", "--epochs", "1", "--batch", "128",
                "--checkpoint_dir", dir, "--checkpoint_every_steps", every});
    argv.insert(argv.end(), more.begin(), more.end());
    return RunTagged(argv, {}, 180);
  }
  // The newest checkpoint directory under `root` with a manifest.
  static std::string Newest(const std::string& root, int skip = 0) {
    for (const auto& [step, dir] : ListCheckpoints(root)) {
      if (std::filesystem::exists(dir + "/manifest.json") && skip-- == 0) return dir;
    }
    return "";
  }
};

TEST_F(CheckpointClusterTest, WideDeepFromTwoPsRestoresBitIdenticallyIntoOneAndThree) {
  const GeneratedCriteo data = GenerateCriteo(dir_, 3000);
  const std::string saved = dir_ + "/saved";
  Result r = RunTagged(Launch({"--model", "wide_deep", "--data", "criteo:" + data.path,
                               "--table_optimizer", "adam", "--checkpoint_dir", saved}),
                       {}, 300);
  ResultOf(r);
  absl::StatusOr<LoadedCheckpoint> original = LoadCheckpoint(saved);
  ASSERT_TRUE(original.ok()) << original.status();
  EXPECT_EQ(original->num_ps, 2);
  ASSERT_FALSE(original->tables.empty());
  EXPECT_GT(original->tables[0].keys.size(), 100u);
  EXPECT_FALSE(original->tables[0].step_counts.empty());  // adam keeps a step count per row
  ASSERT_FALSE(original->variables.empty());
  EXPECT_EQ(original->variables[0].slots.size(), 2u);  // adam: exp_avg, exp_avg_sq
  EXPECT_GT(original->variables[0].update_count, 0);
  {  // `pstrain checkpoint inspect` reads the same outside the job
    Result inspect = RunTagged({PSTRAIN_BINARY, "checkpoint", "inspect", saved, "--json"}, {}, 60);
    ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
    const nlohmann::json j = nlohmann::json::parse(inspect.out);
    EXPECT_EQ(j["path"], original->path);
    EXPECT_EQ(j["global_step"], original->global_step);
    EXPECT_EQ(j["num_ps"], 2);
    EXPECT_TRUE(j["ledger"].is_object()) << j.dump();
    ASSERT_EQ(j["variables"].size(), original->variables.size());
    for (size_t i = 0; i < original->variables.size(); ++i) {
      const LoadedCheckpoint::Variable& v = original->variables[i];
      const nlohmann::json& got = j["variables"][i];
      EXPECT_EQ(got["name"], v.name);
      EXPECT_EQ(got["shape"].get<std::vector<int64_t>>(), v.shape);
      EXPECT_EQ(got["shards"], v.pieces.size());
      EXPECT_EQ(got["optimizer"], "adam");
      EXPECT_EQ(got["slots"], nlohmann::json({"exp_avg", "exp_avg_sq"}));
      EXPECT_EQ(got["version"], v.version);
    }
    ASSERT_EQ(j["tables"].size(), original->tables.size());
    for (size_t i = 0; i < original->tables.size(); ++i) {
      EXPECT_EQ(j["tables"][i]["name"], original->tables[i].name);
      EXPECT_EQ(j["tables"][i]["dim"], original->tables[i].dim);
      EXPECT_EQ(j["tables"][i]["rows"], original->tables[i].keys.size());
      EXPECT_EQ(j["tables"][i]["optimizer"], "adam");
    }
    Result table = RunTagged({PSTRAIN_BINARY, "checkpoint", "inspect", saved}, {}, 60);
    ASSERT_EQ(table.exit_code, 0) << table.err;
    EXPECT_THAT(table.out, HasSubstr("checkpoint " + original->path + ": global step " +
                                     std::to_string(original->global_step) + ", saved by 2 ps"));
    EXPECT_THAT(table.out, HasSubstr(original->tables[0].name));
  }
  for (int num_ps : {1, 3}) {
    SCOPED_TRACE(absl::StrCat(num_ps, " ps"));
    const std::string path =
        RestoreAndSave(*original, num_ps, dir_ + "/into-" + std::to_string(num_ps));
    ASSERT_FALSE(path.empty());
    absl::StatusOr<LoadedCheckpoint> again = LoadCheckpoint(path);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->num_ps, num_ps);
    ExpectSameState(*original, *again);
  }
  // A real job goes on from it on 3 PS.
  Result resumed = RunTagged(
      {PSTRAIN_BINARY, "launch", "--ps", "3", "--workers", "2", "--model", "wide_deep", "--data",
       "criteo:" + data.path, "--table_optimizer", "adam", "--restore_from", saved},
      {}, 300);
  ResultOf(resumed);
  EXPECT_THAT(resumed.err + resumed.out, HasSubstr("saved by 2 ps) into 3 ps"));
}

TEST_F(CheckpointClusterTest, EveryManifestHoldsTheLedgerOfItsCut) {
  RequireMnist();
  const std::string root = dir_ + "/ckpt";
  ResultOf(TrainMlp(root, {"--task_rows", "2560", "--keep_checkpoints", "20"}, "40"));
  int checked = 0;
  for (const auto& [step, dir] : ListCheckpoints(root)) {
    SCOPED_TRACE(dir);
    absl::StatusOr<Manifest> m = ReadManifest(dir);
    ASSERT_TRUE(m.ok()) << m.status();
    ASSERT_TRUE(m->ledger.is_object());
    EXPECT_EQ(m->ledger["task_rows"], 2560);
    // Every task the ledger says applied is whole in every shard of the cut.
    std::vector<std::pair<std::string, std::vector<TaskWatermarkRecord>>> shards;
    for (int t = 0; t < m->num_ps; ++t) {
      absl::StatusOr<PartFile> part = ReadPartFile(absl::StrCat(dir, "/ps-", t, ".ckpt"));
      ASSERT_TRUE(part.ok()) << part.status();
      for (const ShardRecord& r : part->shards) shards.emplace_back(r.name, r.applied);
    }
    int64_t applied = 0;
    for (size_t e = 0; e < m->ledger["ledger"].size(); ++e) {
      for (size_t id = 0; id < m->ledger["ledger"][e].size(); ++id) {
        const nlohmann::json& task = m->ledger["ledger"][e][id];
        if (task["state"] != "applied") continue;
        ++applied;
        const int64_t batches = (task["examples"].get<int64_t>() + 127) / 128;
        for (const auto& [name, marks] : shards) {
          int64_t next = 0;
          for (const TaskWatermarkRecord& w : marks) {
            if (w.epoch == static_cast<int>(e) && w.task == static_cast<int64_t>(id)) {
              next = w.next_batch;
            }
          }
          EXPECT_EQ(next, batches) << name << ": task " << id << " of epoch " << e;
        }
      }
    }
    EXPECT_EQ(m->ledger["applied"], applied);
    ++checked;
  }
  EXPECT_GE(checked, 3);
  absl::StatusOr<Manifest> last = ReadManifest(Newest(root));
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->ledger["applied"], last->ledger["tasks"]);  // the end of the job
}

TEST_F(CheckpointClusterTest, SyncModeCutsBetweenSteps) {
  RequireMnist();
  const std::string root = dir_ + "/ckpt";
  ResultOf(TrainMlp(root, {"--mode", "sync", "--keep_checkpoints", "10"}, "60"));
  int checked = 0;
  for (const auto& [step, dir] : ListCheckpoints(root)) {
    absl::StatusOr<LoadedCheckpoint> c = LoadCheckpoint(dir);
    ASSERT_TRUE(c.ok()) << c.status();
    for (const LoadedCheckpoint::Variable& v : c->variables) {
      for (const auto& piece : v.pieces) {
        EXPECT_EQ(piece.version, static_cast<uint64_t>(step)) << dir << " " << v.name;
        EXPECT_EQ(piece.update_count, step) << dir << " " << v.name;
      }
    }
    ++checked;
  }
  EXPECT_GE(checked, 3);
}

TEST_F(CheckpointClusterTest, ResumeStartsFromScratchThenFromTheNewestCheckpoint) {
  RequireMnist();
  const std::string root = dir_ + "/resume";
  const std::vector<std::string> job =
      Launch({"--data", MnistDir(), "--hidden", "16", "--epochs", "1", "--resume", root});
  Result first = RunTagged(job, {}, 180);
  ResultOf(first);
  EXPECT_THAT(first.err + first.out, HasSubstr("holds no checkpoint yet"));
  const std::string saved = Newest(root);
  ASSERT_FALSE(saved.empty());
  // Its ledger says every task was applied: the resumed job has nothing left to train.
  Result second = RunTagged(job, {}, 180);
  const nlohmann::json done = ResultOf(second);
  EXPECT_THAT(second.err + second.out, HasSubstr("restoring checkpoint " + saved));
  EXPECT_EQ(done["tasks_applied"], done["tasks"]) << done.dump();
  EXPECT_EQ(Newest(root), saved);
  // Without the task queue (no ledger) it trains its epochs again, and saves at its end.
  std::vector<std::string> again = job;
  again.insert(again.end(), {"--task_rows", "0"});
  Result third = RunTagged(again, {}, 180);
  ResultOf(third);
  EXPECT_THAT(third.err + third.out, HasSubstr("restoring checkpoint " + saved));
  EXPECT_NE(Newest(root), saved);
}

TEST_F(CheckpointClusterTest, CorruptedOrTruncatedPartIsNamedAndThePreviousOneUsed) {
  RequireMnist();
  const std::string root = dir_ + "/ckpt";
  ResultOf(TrainMlp(root));
  const std::string newest = Newest(root), previous = Newest(root, 1);
  ASSERT_FALSE(previous.empty()) << "two checkpoints expected under " << root;
  {  // one byte flipped in the middle of a part
    std::fstream f(newest + "/ps-0.ckpt", std::ios::in | std::ios::out | std::ios::binary);
    const std::streamoff at = std::filesystem::file_size(newest + "/ps-0.ckpt") / 2;
    f.seekg(at);
    const char c = static_cast<char>(f.get());
    f.seekp(at);
    f.put(static_cast<char>(c ^ 0x10));
  }
  absl::StatusOr<LoadedCheckpoint> direct = LoadCheckpoint(newest);
  ASSERT_FALSE(direct.ok());
  EXPECT_THAT(direct.status().message(), HasSubstr(newest + "/ps-0.ckpt"));
  EXPECT_THAT(direct.status().message(), HasSubstr("checksum mismatch"));
  Result inspect = RunTagged({PSTRAIN_BINARY, "checkpoint", "inspect", newest}, {}, 60);
  EXPECT_EQ(inspect.exit_code, 1);
  EXPECT_THAT(inspect.err, HasSubstr("pstrain checkpoint inspect: error: " + newest +
                                     "/ps-0.ckpt: checksum mismatch"));
  EXPECT_EQ(inspect.out, "");
  Result r = RunTagged(
      Launch({"--data", MnistDir(), "--hidden", "16", "--epochs", "1", "--restore_from", root}), {},
      180);
  ResultOf(r);
  EXPECT_THAT(r.err + r.out, HasSubstr(newest + "/ps-0.ckpt: checksum mismatch"));
  EXPECT_THAT(r.err + r.out, HasSubstr("restoring checkpoint " + previous));

  std::filesystem::resize_file(previous + "/ps-1.ckpt",
                               std::filesystem::file_size(previous + "/ps-1.ckpt") - 9);
  absl::StatusOr<LoadedCheckpoint> truncated = LoadCheckpoint(previous);
  ASSERT_FALSE(truncated.ok());
  EXPECT_THAT(truncated.status().message(), HasSubstr(previous + "/ps-1.ckpt: truncated"));
}

TEST_F(CheckpointClusterTest, FullDiskKeepsThePreviousCheckpointAndTheJob) {
  RequireMnist();
  const std::string root = dir_ + "/ckpt";
  ResultOf(TrainMlp(root));
  const std::string before = Newest(root);
  absl::StatusOr<LoadedCheckpoint> kept = LoadCheckpoint(before);
  ASSERT_TRUE(kept.ok()) << kept.status();
  // A file size limit of 64 KiB for every process of the job: a part (about 50 KiB per 100
  // thousand parameters... here over 64 KiB) cannot be written, the logs can.
  std::vector<std::string> job = Launch({"--data", MnistDir(), "--hidden", "64", "--epochs", "1",
                                         "--batch", "256", "--checkpoint_dir", dir_ + "/other"});
  std::string cmd = "ulimit -f 64 && exec";
  for (const std::string& a : job) cmd += " '" + a + "'";
  Result r = RunTagged({"/bin/bash", "-c", cmd}, {}, 180);
  ResultOf(r);  // training went on and the job succeeded
  EXPECT_THAT(r.err + r.out, HasSubstr("checkpoint not saved"));
  EXPECT_THAT(r.err + r.out, HasSubstr("File too large"));
  EXPECT_EQ(Newest(dir_ + "/other"), "");  // nothing half-written is left as a checkpoint
  // Into the directory that holds a checkpoint: it stays intact, and the error says so.
  job = Launch({"--data", MnistDir(), "--hidden", "64", "--epochs", "1", "--batch", "256",
                "--checkpoint_dir", root});
  cmd = "ulimit -f 64 && exec";
  for (const std::string& a : job) cmd += " '" + a + "'";
  r = RunTagged({"/bin/bash", "-c", cmd}, {}, 180);
  ResultOf(r);
  EXPECT_THAT(r.err + r.out, HasSubstr("the previous checkpoint " + before + " is intact"));
  EXPECT_EQ(Newest(root), before);
  absl::StatusOr<LoadedCheckpoint> after = LoadCheckpoint(before);
  ASSERT_TRUE(after.ok()) << after.status();
  ExpectSameState(*kept, *after);
}

TEST_F(CheckpointClusterTest, SecondChiefOnOneDirectoryAndAnotherModelAreRefused) {
  RequireMnist();
  const std::string root = dir_ + "/ckpt";
  ResultOf(TrainMlp(root));
  {
    CheckpointOptions o;
    o.dir = root;
    auto holder = CheckpointManager::Create(o, {});  // this process is the first chief
    ASSERT_TRUE(holder.ok()) << holder.status();
    Result second = RunTagged(
        Launch({"--data", MnistDir(), "--hidden", "16", "--epochs", "1", "--checkpoint_dir", root}),
        {}, 120);
    EXPECT_NE(second.exit_code, 0);
    EXPECT_THAT(second.err + second.out,
                HasSubstr("is in use by another chief (" + root + "/LOCK is locked by pid " +
                          std::to_string(getpid())));
  }
  Result other = RunTagged(
      Launch({"--data", MnistDir(), "--hidden", "24", "--epochs", "1", "--restore_from", root}), {},
      120);
  EXPECT_NE(other.exit_code, 0);
  EXPECT_THAT(other.err + other.out,
              HasSubstr("variable 'dense0/kernel' has shape [784, 24] in the model, [784, 16]"));
}

}  // namespace
}  // namespace pstrain::testing
