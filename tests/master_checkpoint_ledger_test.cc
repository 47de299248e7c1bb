// Checkpoints carry the chief's task ledger and the PS's task watermarks: two real PS over gRPC
// in this process, a worker thread taking tasks from the Coordinator's queue and pushing tagged
// gradients to every shard and table, and checkpoints cut meanwhile. Every task the manifest's
// ledger says applied is whole in the parts; the watermarks survive a restore into 1 and 3 PS
// by the per-(epoch, task) minimum; a ledger claiming a task the cut lacks is rewritten.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "checkpoint_testing.h"
#include "common/checkpoint_manifest.h"
#include "common/tensor_codec.h"
#include "gmock/gmock.h"
#include "master/coordinator.h"
#include "testing.h"

namespace pstrain::testing {
namespace {

constexpr int64_t kBatches = 4;  // per task: 40 rows in batches of 10
constexpr LedgerShape kShape{400, 40, 2, 1};

using Watermarks = std::map<std::pair<int, int64_t>, int64_t>;

Watermarks MapOf(const std::vector<TaskWatermarkRecord>& list) {
  Watermarks m;
  for (const TaskWatermarkRecord& w : list) m[{w.epoch, w.task}] = w.next_batch;
  return m;
}

// The watermarks of every shard and table record of the parts of checkpoint `dir`, by record.
std::map<std::string, Watermarks> RecordsOf(const std::string& dir, int num_ps) {
  std::map<std::string, Watermarks> out;
  for (int t = 0; t < num_ps; ++t) {
    absl::StatusOr<PartFile> part = ReadPartFile(absl::StrCat(dir, "/ps-", t, ".ckpt"));
    EXPECT_TRUE(part.ok()) << part.status();
    if (!part.ok()) continue;
    for (const ShardRecord& s : part->shards) out["shard " + s.name] = MapOf(s.applied);
    for (const TableRecord& r : part->tables) {
      out[absl::StrCat("table ", r.name, " on ps:", t)] = MapOf(r.applied);
    }
  }
  return out;
}

class CheckpointLedgerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir();
    for (int t = 0; t < 2; ++t) {
      ps_.push_back(std::make_unique<ServedPs>(t));
      addresses_.push_back(ps_.back()->address);
      stubs_.push_back(ParameterServerService::NewStub(MakeChannel(addresses_.back())));
    }
    NewVariable w;
    w.name = "w";
    w.shape = {60, 4};
    w.optimizer.set_name("sgd");
    w.optimizer.set_learning_rate(0.1);
    w.initial_value = [] { return absl::StatusOr<Tensor>(Tensor({60, 4})); };
    auto placer = *VariablePlacer::Create(addresses_, "fixed:2", "greedy", absl::Seconds(30));
    placement_ = *placer->CreateAll({w});
    ASSERT_EQ(placement_[0].shards_size(), 2);
    TableDef emb;
    emb.set_name("emb");
    emb.set_dim(4);
    emb.mutable_optimizer()->set_name("sgd");
    emb.mutable_optimizer()->set_learning_rate(0.1);
    emb.mutable_initializer()->set_kind("zeros");
    TableCreator creator(addresses_, absl::Seconds(30));
    ASSERT_TRUE(creator.GetOrCreate(emb).ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // One tagged batch: a gradient for every shard and an empty one for the table, on every PS.
  void PushBatch(const Sender& s, const TaskAssignment& t, int64_t batch) {
    PushTag tag;
    tag.set_epoch(t.epoch());
    tag.set_task(t.task());
    tag.set_batch(batch);
    for (size_t ps = 0; ps < stubs_.size(); ++ps) {
      PushDense(s, tag, static_cast<int>(ps));
      PushSparseRequest sparse;
      *sparse.mutable_sender() = s;
      *sparse.mutable_tag() = tag;
      sparse.add_gradients()->set_table("emb");
      grpc::ClientContext sctx;
      PushSparseResponse sresp;
      ASSERT_TRUE(stubs_[ps]->PushSparse(&sctx, sparse, &sresp).ok());
    }
  }

  // Batch `batch` of task 0 of epoch 0 to the shard of `w` on ps:`ps` only, as worker:0 of
  // generation 1 (as a push whose other requests are still on the wire).
  void PushOneShard(int ps, int64_t batch) {
    Sender s = MakeSender("worker", 0);
    s.set_generation(1);
    PushTag tag;
    tag.set_batch(batch);
    PushDense(s, tag, ps);
  }

  // A gradient of 0.01 for the shard of `w` on ps:`ps`.
  void PushDense(const Sender& s, const PushTag& tag, int ps) {
    PushRequest push;
    *push.mutable_sender() = s;
    *push.mutable_tag() = tag;
    for (const Shard& shard : placement_[0].shards()) {
      if (shard.ps_task() != ps) continue;
      Gradient* g = push.add_gradients();
      g->set_name(shard.name());
      const std::vector<float> ones((shard.row_end() - shard.row_begin()) * 4, 0.01f);
      EncodeTensor({shard.row_end() - shard.row_begin(), 4}, ones.data(), g->mutable_gradient());
    }
    grpc::ClientContext ctx;
    PushResponse resp;
    ASSERT_TRUE(stubs_[ps]->Push(&ctx, push, &resp).ok());
  }

  // A task queue of kShape in its generation 1.
  std::unique_ptr<Coordinator> StartTasks() {
    auto c = std::make_unique<Coordinator>(addresses_, 1, absl::Milliseconds(50));
    EXPECT_TRUE(c->EnableTasks(kShape, absl::Seconds(1), absl::Seconds(30)).ok());
    EXPECT_TRUE(c->BeginGeneration(nullptr).ok());
    return c;
  }

  // Checkpoints of w and emb under dir_/ckpt, the newest `keep` kept.
  std::unique_ptr<CheckpointManager> Checkpoints(int keep = CheckpointOptions().keep) {
    CheckpointOptions o;
    o.dir = dir_ + "/ckpt";
    o.keep = keep;
    auto manager = *CheckpointManager::Create(o, addresses_);
    manager->SetModel(placement_, {{{"w", {60, 4}}}, {{"emb", 4}}});
    return manager;
  }

  // Takes every task of the queue and pushes its batches, as worker:0 of generation 1.
  void Work(Coordinator& c) {
    const Sender s = [] {
      Sender w = MakeSender("worker", 0);
      w.set_generation(1);
      return w;
    }();
    RegisterRequest reg;
    *reg.mutable_sender() = s;
    RegisterResponse rr;
    ASSERT_TRUE(c.Register(reg, &rr).ok());
    for (;;) {
      NextTaskRequest next;
      *next.mutable_sender() = s;
      NextTaskResponse n;
      ASSERT_TRUE(c.NextTask(next, &n).ok());
      if (n.kind() == NextTaskResponse::FINISHED) return;
      ASSERT_EQ(n.kind(), NextTaskResponse::TASK);
      for (int64_t b = 0; b < kBatches; ++b) {
        PushBatch(s, n.task(), b);
        absl::SleepFor(absl::Milliseconds(3));  // cuts fall in the middle of tasks
      }
      TaskDoneRequest done;
      *done.mutable_sender() = s;
      done.set_epoch(n.task().epoch());
      done.set_task(n.task().task());
      done.set_steps(kBatches);
      done.set_examples(n.task().end() - n.task().begin());
      ASSERT_TRUE(c.TaskDone(done).ok());
    }
  }

  std::string dir_;
  std::vector<std::unique_ptr<ServedPs>> ps_;
  std::vector<std::string> addresses_;
  std::vector<std::unique_ptr<ParameterServerService::Stub>> stubs_;
  std::vector<Placement> placement_;
};

TEST_F(CheckpointLedgerTest, TheManifestsLedgerIsTheCutsAndWatermarksSurviveARestore) {
  std::unique_ptr<Coordinator> tasks = StartTasks();
  Coordinator& c = *tasks;
  auto manager = Checkpoints(1000);
  manager->SetLedgerSource([&c] { return c.LedgerJson(); });
  std::atomic<bool> finished = false;
  std::thread worker([&] {
    Work(c);
    finished = true;
  });
  std::vector<std::string> saved;
  while (!finished) {
    absl::StatusOr<std::string> path = manager->SaveAndWait();
    ASSERT_TRUE(path.ok()) << path.status();
    if (saved.empty() || saved.back() != *path) saved.push_back(*path);
  }
  worker.join();
  saved.push_back(*manager->SaveAndWait());
  ASSERT_GE(saved.size(), 4u);

  int partial_cuts = 0;  // cuts in the middle of a task
  for (const std::string& dir : saved) {
    SCOPED_TRACE(dir);
    absl::StatusOr<Manifest> m = ReadManifest(dir);
    ASSERT_TRUE(m.ok()) << m.status();
    ASSERT_TRUE(m->ledger.is_object());
    const std::map<std::string, Watermarks> records = RecordsOf(dir, 2);
    ASSERT_EQ(records.size(), 4u);  // 2 shards, the table on 2 PS
    int64_t applied = 0;
    bool partial = false;
    for (int e = 0; e < kShape.epochs; ++e) {
      for (int64_t id = 0; id < 10; ++id) {
        const bool done = m->ledger["ledger"][e][id]["state"] == "applied";
        applied += done;
        for (const auto& [name, marks] : records) {
          const auto it = marks.find({e, id});
          const int64_t next = it == marks.end() ? 0 : it->second;
          if (done) {
            EXPECT_EQ(next, kBatches) << name << " task " << id << " of epoch " << e;
          }
          partial = partial || (next > 0 && next < kBatches);
        }
      }
    }
    EXPECT_EQ(m->ledger["applied"], applied);
    partial_cuts += partial;
    absl::StatusOr<LoadedCheckpoint> loaded = LoadCheckpoint(dir);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->ledger, m->ledger);  // whole: nothing rewritten
  }
  std::cout << saved.size() << " checkpoints, " << partial_cuts << " in the middle of a task\n";

  // Into 1 and 3 PS, a checkpoint whose two shards differ if one does (a push applied on one PS
  // and queued on the other at the cut), else the one before the last: each new shard gets per
  // (epoch, task) the smallest watermark of the saved shards it overlaps, each table the
  // smallest of its parts.
  absl::StatusOr<LoadedCheckpoint> original = LoadCheckpoint(saved[saved.size() - 2]);
  for (const std::string& dir : saved) {
    absl::StatusOr<LoadedCheckpoint> c = LoadCheckpoint(dir);
    ASSERT_TRUE(c.ok()) << c.status();
    const auto& pieces = c->variables[0].pieces;
    if (MapOf(pieces[0].applied) != MapOf(pieces[1].applied) &&
        !MinWatermarks({&pieces[0].applied, &pieces[1].applied}).empty() &&
        !c->tables[0].applied.empty()) {
      original = std::move(c);
      std::cout << dir << ": its shards' watermarks differ\n";
      break;
    }
  }
  ASSERT_TRUE(original.ok()) << original.status();
  ASSERT_EQ(original->variables[0].pieces.size(), 2u);
  EXPECT_FALSE(original->variables[0].pieces[0].applied.empty());
  EXPECT_FALSE(original->tables[0].applied.empty());
  for (int num_ps : {1, 3}) {
    SCOPED_TRACE(absl::StrCat(num_ps, " ps"));
    const std::string path =
        RestoreAndSave(*original, num_ps, dir_ + "/into-" + std::to_string(num_ps));
    ASSERT_FALSE(path.empty());
    absl::StatusOr<LoadedCheckpoint> again = LoadCheckpoint(path);
    ASSERT_TRUE(again.ok()) << again.status();
    ExpectSameState(*original, *again);
    for (const auto& piece : again->variables[0].pieces) {
      std::vector<const std::vector<TaskWatermarkRecord>*> overlapped;
      for (const auto& old : original->variables[0].pieces) {
        if (old.begin < piece.end && piece.begin < old.end) overlapped.push_back(&old.applied);
      }
      EXPECT_EQ(MapOf(piece.applied), MapOf(MinWatermarks(overlapped)))
          << "rows " << piece.begin << " to " << piece.end;
    }
    EXPECT_EQ(MapOf(again->tables[0].applied), MapOf(original->tables[0].applied));
  }
}

// An async cut between the per-PS requests of one tagged push leaves the table's parts with
// different watermarks for that task. Restored into as many PS (a rollback), each part takes its
// own: the part that holds the batch must not apply it again when the task is redone. Into
// another number of PS every part takes the smallest.
TEST_F(CheckpointLedgerTest, ATablesPartsKeepTheirOwnWatermarksIntoAsManyPs) {
  std::unique_ptr<Coordinator> tasks = StartTasks();
  Coordinator& c = *tasks;
  Work(c);
  auto manager = Checkpoints();
  absl::StatusOr<LoadedCheckpoint> cut = LoadCheckpoint(*manager->SaveAndWait());
  ASSERT_TRUE(cut.ok()) << cut.status();
  ASSERT_EQ(cut->table_part_applied.size(), 1u);
  ASSERT_EQ(cut->table_part_applied[0].size(), 2u);
  // As a cut in the middle of task 5 of epoch 1 would leave it: batch 2 applied on ps:1 only.
  for (int part = 0; part < 2; ++part) {
    for (TaskWatermarkRecord& w : cut->table_part_applied[0][part]) {
      if (w.epoch == 1 && w.task == 5) w.next_batch = part == 0 ? 2 : 3;
    }
  }
  cut->tables[0].applied =
      MinWatermarks({&cut->table_part_applied[0][0], &cut->table_part_applied[0][1]});
  ASSERT_EQ(MapOf(cut->tables[0].applied)[std::make_pair(1, int64_t{5})], 2);
  for (int num_ps : {1, 2, 3}) {
    SCOPED_TRACE(absl::StrCat(num_ps, " ps"));
    const std::string path = RestoreAndSave(*cut, num_ps, dir_ + "/into-" + std::to_string(num_ps));
    ASSERT_FALSE(path.empty());
    const std::map<std::string, Watermarks> records = RecordsOf(path, num_ps);
    for (int t = 0; t < num_ps; ++t) {
      const Watermarks& marks = records.at(absl::StrCat("table emb on ps:", t));
      EXPECT_EQ(marks.at({1, 5}), num_ps == 2 ? 2 + t : 2) << "ps:" << t;
      EXPECT_EQ(marks.at({1, 4}), kBatches);
    }
  }
}

TEST_F(CheckpointLedgerTest, ALedgerTaskTheCutLacksIsRewrittenAsPendingAtLoad) {
  std::unique_ptr<Coordinator> tasks = StartTasks();
  Coordinator& c = *tasks;
  Work(c);
  auto manager = Checkpoints();
  // A ledger saying task 3 of epoch 1 had a batch more than any push carried.
  nlohmann::json claimed = c.LedgerJson();
  claimed["ledger"][1][3]["steps"] = kBatches + 1;
  manager->SetLedgerSource([&claimed] { return claimed; });
  const std::string path = *manager->SaveAndWait();
  absl::StatusOr<LoadedCheckpoint> loaded = LoadCheckpoint(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->ledger["ledger"][1][3]["state"], "pending");
  EXPECT_EQ(loaded->ledger["ledger"][1][2]["state"], "applied");
  EXPECT_EQ(loaded->ledger["applied"], 19);
  // Saved again with nothing pushed since: the ledger went on (as a last TaskDone does), so the
  // checkpoint's manifest gets it.
  claimed["redone"] = 5;
  EXPECT_EQ(*manager->SaveAndWait(), path);
  EXPECT_EQ(ReadManifest(path)->ledger["redone"], 5);
  // The rewritten ledger is one a chief takes: that task is handed out again.
  ASSERT_TRUE(c.BeginGeneration(loaded->ledger).ok());
  EXPECT_EQ(c.LedgerJson()["applied"], 19);
}

// In async mode a checkpoint's step is its largest version: a shard below it can move while the
// step stays. A save then writes that step again (beside the earlier checkpoint, swapped in once
// whole); with nothing moved, the ledger alone goes into the manifest even though the
// versions differ (the last TaskDone of a job). After a restore the step is written again.
TEST_F(CheckpointLedgerTest, AShardBelowTheStepThatMovedIsSavedAgainAtThatStep) {
  std::unique_ptr<Coordinator> tasks = StartTasks();
  auto manager = Checkpoints(10);
  nlohmann::json ledger = {{"note", 1}};
  manager->SetLedgerSource([&ledger] { return ledger; });
  auto shard_version = [](const LoadedCheckpoint& ckpt, int piece) {
    return ckpt.variables[0].pieces.at(piece).version;
  };
  ASSERT_EQ(placement_[0].shards(0).ps_task(), 0);
  PushOneShard(0, 0);
  PushOneShard(0, 1);
  const std::string path = *manager->SaveAndWait();
  EXPECT_EQ(std::filesystem::path(path).filename(), "ckpt-2");
  ASSERT_EQ(shard_version(*LoadCheckpoint(path), 1), 0u);

  ledger["note"] = 2;  // nothing pushed: the manifest takes the ledger
  EXPECT_EQ(*manager->SaveAndWait(), path);
  EXPECT_EQ(ReadManifest(path)->ledger["note"], 2);

  PushOneShard(1, 0);  // ps:1's shard moves to version 1, the step stays 2
  ledger["note"] = 3;
  EXPECT_EQ(*manager->SaveAndWait(), path);
  absl::StatusOr<LoadedCheckpoint> again = LoadCheckpoint(path);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(shard_version(*again, 1), 1u);
  EXPECT_EQ(again->ledger["note"], 3);
  EXPECT_FALSE(std::filesystem::exists(path + ".next"));
  EXPECT_EQ(ListCheckpoints(dir_ + "/ckpt").size(), 1u);

  manager->SetRestoredStep(2);  // restored PS: no stamps to compare, the step is written again
  ledger["note"] = 4;
  EXPECT_EQ(*manager->SaveAndWait(), path);
  EXPECT_EQ(ReadManifest(path)->ledger["note"], 4);
  EXPECT_EQ(shard_version(*LoadCheckpoint(path), 1), 1u);

  // A rewrite cut off by the chief's death leaves <path>.next beside the checkpoint: the next
  // chief of the directory removes it, and the checkpoint stays as it was.
  manager.reset();
  std::filesystem::create_directories(path + ".next");
  std::ofstream(path + ".next/ps-0.ckpt") << "cut off";
  // What is not a real ckpt-<digits>.next directory is not the chief's: left alone.
  std::ofstream(dir_ + "/ckpt/notes.next") << "the user's";
  std::filesystem::create_directories(dir_ + "/ckpt/ckpt-x.next");
  std::filesystem::create_directories(dir_ + "/elsewhere");
  std::ofstream(dir_ + "/elsewhere/keep") << "the user's";
  std::filesystem::create_directory_symlink(dir_ + "/elsewhere", dir_ + "/ckpt/ckpt-7.next");
  manager = Checkpoints(10);
  EXPECT_FALSE(std::filesystem::exists(path + ".next"));
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/ckpt/notes.next"));
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/ckpt/ckpt-x.next"));
  EXPECT_TRUE(std::filesystem::is_symlink(dir_ + "/ckpt/ckpt-7.next"));
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/elsewhere/keep"));
  EXPECT_EQ(ReadManifest(path)->ledger["note"], 4);
  EXPECT_EQ(ListCheckpoints(dir_ + "/ckpt").size(), 1u);
}

}  // namespace
}  // namespace pstrain::testing
