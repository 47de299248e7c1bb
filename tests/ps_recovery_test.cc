// What a PS does for the job's recovery (docs/recovery.md), through its gRPC service on
// 127.0.0.1: the task watermarks cut into a checkpoint part and imported back, Reset bringing the
// PS back to a fresh start, the generation check of worker calls, and bad tags refused with
// nothing applied. (Duplicates dropped: ps_duplicates_test.cc.)
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/checkpoint_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps_grpc_testing.h"
#include "ps_tables_testing.h"

namespace pstrain::ps_testing {
namespace {

using ::testing::HasSubstr;
using Stub = ParameterServerService::Stub;

// The cut holds the watermarks (part file format 2) and Import, after a Reset, puts them back.
TEST_F(PsRecoveryTest, WatermarksGoThroughACheckpointAndImport) {
  Start();
  const Sender w0 = Worker(0);
  ASSERT_TRUE(Push(w0, 1, 0, Tag(0, 0, 0)).ok());
  ASSERT_TRUE(Push(w0, 1, 0, Tag(0, 0, 1)).ok());
  ASSERT_TRUE(Push(w0, 1, 0, Tag(2, 3, 0), {"w", "v"}).ok());
  ASSERT_TRUE(PushEmb(w0, 1, 0, Tag(0, 0, 0)).ok());
  const std::string dir = std::filesystem::temp_directory_path() / "ps_recovery_test_cut";
  std::filesystem::remove_all(dir);
  CheckpointRequest freeze;
  freeze.set_phase(CheckpointRequest::FREEZE);
  freeze.set_id(1);
  freeze.set_num_ps(1);
  freeze.set_freeze_timeout_s(30);
  for (const std::string name : {"w", "v"}) {
    CheckpointShard* s = freeze.add_shards();
    s->set_name(name);
    s->set_variable(name);
    s->add_shape(4);
    s->set_row_end(4);
  }
  ASSERT_TRUE(ps_->AsChief(&Stub::Checkpoint, freeze).ok());
  CheckpointRequest release;
  release.set_phase(CheckpointRequest::RELEASE);
  release.set_id(1);
  release.set_dir(dir);
  ASSERT_TRUE(ps_->AsChief(&Stub::Checkpoint, release).ok());
  CheckpointRequest wait;
  *wait.mutable_sender() = Chief();
  wait.set_phase(CheckpointRequest::WAIT);
  wait.set_id(1);
  CheckpointResponse written;
  for (int i = 0; i < 30 && written.path().empty(); ++i) {
    ASSERT_TRUE(ps_->Call(&Stub::Checkpoint, wait, &written).ok());
  }
  absl::StatusOr<PartFile> part = ReadPartFile(written.path());
  ASSERT_TRUE(part.ok()) << part.status();
  std::filesystem::remove_all(dir);
  ASSERT_EQ(part->shards.size(), 2u);
  ASSERT_EQ(part->tables.size(), 1u);
  for (const ShardRecord& s : part->shards) {
    EXPECT_EQ(MarksOf(s.applied),
              s.name == "w" ? (Marks{{0, 0, 2}, {2, 3, 1}}) : (Marks{{2, 3, 1}}))
        << s.name;
  }
  EXPECT_EQ(MarksOf(part->tables[0].applied), (Marks{{0, 0, 1}}));

  ASSERT_TRUE(ps_->AsChief(&Stub::Reset, ResetRequest()).ok());
  CreateTables(0.0f);
  EXPECT_EQ(ShardMarks(1), Marks{});
  ImportRequest import;
  for (const ShardRecord& s : part->shards) {
    VariableImport* v = import.add_variables();
    v->set_name(s.name);
    v->set_version(s.version);
    for (const TaskWatermarkRecord& m : s.applied) {
      TaskWatermark* w = v->add_applied();
      w->set_epoch(m.epoch);
      w->set_task(m.task);
      w->set_next_batch(m.next_batch);
    }
  }
  const TableRecord& t = part->tables[0];
  TableImport* ti = import.add_tables();
  ti->set_table("emb");
  ti->set_version(t.version);
  ti->set_keys(KeyBytes(t.keys));
  ti->set_floats(FloatBytes(t.floats));
  ti->set_last_update(std::string(reinterpret_cast<const char*>(t.last_update.data()),
                                  t.last_update.size() * sizeof(uint64_t)));
  for (const TaskWatermarkRecord& m : t.applied) {
    TaskWatermark* w = ti->add_applied();
    w->set_epoch(m.epoch);
    w->set_task(m.task);
    w->set_next_batch(m.next_batch);
  }
  // A bad watermark is refused, naming it, and nothing is imported.
  ImportRequest bad = import;
  const int w = import.variables(0).name() == "w" ? 0 : 1;
  bad.mutable_variables(w)->mutable_applied(0)->set_next_batch(-1);
  absl::Status refused = ps_->AsChief(&Stub::Import, bad);
  EXPECT_TRUE(absl::IsInvalidArgument(refused)) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("applied[0] (epoch 0, task 0, next_batch -1)"));
  EXPECT_THAT(refused.message(), HasSubstr("negative next_batch"));
  bad = import;
  *bad.mutable_tables(0)->add_applied() = bad.tables(0).applied(0);
  refused = ps_->AsChief(&Stub::Import, bad);
  EXPECT_THAT(refused.message(), HasSubstr("table 'emb'"));
  EXPECT_THAT(refused.message(), HasSubstr("applied[1] (epoch 0, task 0, next_batch 1) repeats"));
  EXPECT_EQ(ShardMarks(0), Marks{});
  EXPECT_EQ(Read(), (State{0, 0}));

  ASSERT_TRUE(ps_->AsChief(&Stub::Import, import).ok());
  EXPECT_EQ(ShardMarks(0), (Marks{{2, 3, 1}}));
  EXPECT_EQ(ShardMarks(1), (Marks{{0, 0, 2}, {2, 3, 1}}));
  EXPECT_EQ(TableMarks(), (Marks{{0, 0, 1}}));
  EXPECT_EQ(Row7(), -1);
  // The batches the cut holds are duplicates now; the next one is applied.
  ASSERT_TRUE(Push(w0, 1, 0, Tag(0, 0, 1)).ok());
  ASSERT_TRUE(PushEmb(w0, 1, 0, Tag(0, 0, 0)).ok());
  EXPECT_EQ(Read().version, 3u);
  EXPECT_EQ(Row7(), -1);
  ASSERT_TRUE(Push(w0, 1, 0, Tag(0, 0, 2)).ok());
  EXPECT_EQ(Read().version, 4u);
  EXPECT_EQ(GetStats().duplicates_dropped(), 2);
}

// Reset drops everything (waiting pulls end FailedPrecondition, naming the generation) and says
// which generation it ended; Configure and the creates work again.
TEST_F(PsRecoveryTest, ResetBringsThePsBackToAFreshStart) {
  ConfigureRequest config = Config("sync", 2, 2, 0, 30, {});
  config.set_generation(1);
  Start(&config);
  const Sender w0 = OfGeneration(Worker(0), 1);
  ASSERT_TRUE(Push(w0, 1, 0, Tag(0, 0, 0)).ok());
  absl::Status waited;
  std::thread pull([&] {
    PullRequest req;
    *req.mutable_sender() = w0;
    req.add_names("w");
    req.set_min_version(1);  // waits for worker:1's gradient, which never comes
    PullResponse resp;
    waited = ps_->Call(&Stub::Pull, req, &resp);
  });
  ASSERT_TRUE(Eventually([&] { return GetStats().pulls_waited() == 1; }));
  EXPECT_TRUE(absl::IsFailedPrecondition(ps_->AsChief(&Stub::Configure, config)))
      << "configure while variables exist";

  ResetRequest reset;
  *reset.mutable_sender() = Worker(0);
  ResetResponse reset_resp;
  EXPECT_TRUE(absl::IsPermissionDenied(ps_->Call(&Stub::Reset, reset, &reset_resp)));
  *reset.mutable_sender() = From("chief", 0, 5);
  EXPECT_TRUE(absl::IsPermissionDenied(ps_->Call(&Stub::Reset, reset, &reset_resp)));
  *reset.mutable_sender() = Chief();
  ASSERT_TRUE(ps_->Call(&Stub::Reset, reset, &reset_resp).ok());
  EXPECT_EQ(reset_resp.generation(), 1u) << "the generation the reset ended";
  pull.join();
  EXPECT_TRUE(absl::IsFailedPrecondition(waited)) << waited;
  EXPECT_THAT(waited.message(), HasSubstr("reset"));

  PullRequest gone;
  *gone.mutable_sender() = Chief();
  gone.add_names("w");
  PullResponse gone_resp;
  EXPECT_TRUE(absl::IsNotFound(ps_->Call(&Stub::Pull, gone, &gone_resp)));
  AppliedTasksResponse applied = Applied();
  EXPECT_EQ(applied.shards_size() + applied.tables_size(), 0);
  // A fresh start: async with no generation (any worker), then configured again.
  ASSERT_TRUE(Push(Worker(1), 1, 0, Tag(0, 0, 0)).code() == absl::StatusCode::kNotFound);
  config = Config("async", 2, 0, 0, 30, {});
  config.set_generation(2);
  ASSERT_TRUE(ps_->AsChief(&Stub::Configure, config).ok());
  CreateTables(0.5f);
  EXPECT_EQ(Read(), (State{0, 0.5f}));
  EXPECT_EQ(Row7(), 0.5f);
  ASSERT_TRUE(Push(OfGeneration(Worker(0), 2), 1, 0, Tag(0, 0, 0)).ok());  // no duplicate now
  EXPECT_EQ(Read(), (State{1, -0.5f}));
  EXPECT_EQ(ShardMarks(1), (Marks{{0, 0, 1}}));
  EXPECT_EQ(GetStats().pushes_applied(), 2) << "the counters keep counting over a Reset";
}

// Once the chief configured a generation, worker calls of another one are refused, naming both,
// with nothing applied; the chief's calls are not checked.
TEST_F(PsRecoveryTest, WorkerCallsOfAnotherGenerationAreRefused) {
  ConfigureRequest config = Config("async", 2, 0, 0, 30, {});
  config.set_generation(3);
  Start(&config);
  const Sender old = OfGeneration(Worker(1), 2);
  absl::Status s = Push(old, 1, 0, Tag(0, 0, 0));
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("push from worker:1 (incarnation 1) of generation 2 refused "
                                     "by ps:0: it runs generation 3 (the job rolled back)"));
  s = PushEmb(old, 1, 0, Tag(0, 0, 0));
  EXPECT_THAT(s.message(), HasSubstr("sparse push from worker:1 (incarnation 1) of generation 2"));
  PullRequest pull;
  *pull.mutable_sender() = old;
  pull.add_names("w");
  PullResponse pulled;
  s = ps_->Call(&Stub::Pull, pull, &pulled);
  EXPECT_THAT(s.message(), HasSubstr("pull from worker:1 (incarnation 1) of generation 2"));
  LookupResponse looked;
  s = ps_->Call(&Stub::Lookup, LookupReq(old, {{"emb", KeyBytes({7})}}), &looked);
  EXPECT_THAT(s.message(), HasSubstr("lookup from worker:1 (incarnation 1) of generation 2"));
  LeaveRequest leave;
  *leave.mutable_sender() = Worker(1);  // generation 0: none given is another one too
  LeaveResponse left;
  s = ps_->Call(&Stub::Leave, leave, &left);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("leave from worker:1 (incarnation 1) of generation 0"));
  EXPECT_EQ(Read(), (State{0, 0}));  // the chief (generation 0) reads
  EXPECT_EQ(Row7(), 0);
  EXPECT_EQ(ShardMarks(1), Marks{});
  ASSERT_TRUE(Push(OfGeneration(Worker(1), 3), 1, 0, Tag(0, 0, 0)).ok());
  EXPECT_EQ(Read(), (State{1, -1}));
  EXPECT_EQ(GetStats().pushes_applied(), 1);
}

TEST_F(PsRecoveryTest, BadTagsAreRefusedNamingTheFieldAndAppliedTasksIsTheChiefs) {
  Start();
  struct Case {
    PushTag tag;
    std::string says;
  };
  for (const Case& c : {Case{Tag(-1, 0, 0), "tag.epoch -1 is negative"},
                        Case{Tag(0, -2, 0), "tag.task -2 is negative"},
                        Case{Tag(0, 0, -3), "tag.batch -3 is negative"},
                        Case{Tag(0, 0, std::numeric_limits<int64_t>::max()),
                             "tag.batch 9223372036854775807 is out of range"}}) {
    absl::Status s = Push(Worker(0), 1, 0, c.tag);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr(c.says));
    EXPECT_THAT(s.message(), HasSubstr("push from worker:0 (incarnation 1) to ps task 0"));
    s = PushEmb(Worker(0), 1, 0, c.tag);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr(c.says));
  }
  EXPECT_EQ(Read(), (State{0, 0}));
  EXPECT_EQ(Row7(), 0);
  EXPECT_EQ(ShardMarks(1), Marks{});
  EXPECT_EQ(TableMarks(), Marks{});
  AppliedTasksRequest req;
  *req.mutable_sender() = Worker(0);
  AppliedTasksResponse resp;
  EXPECT_TRUE(absl::IsPermissionDenied(ps_->Call(&Stub::AppliedTasks, req, &resp)));
}

}  // namespace
}  // namespace pstrain::ps_testing
