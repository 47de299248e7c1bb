// The PS's part of checkpoints: freeze, release and the background write; pushes held back while
// frozen and let go at the release or the freeze's deadline; Import and Checkpoint refusing bad
// input and changing nothing then.
#include <atomic>
#include <filesystem>

#include "common/checkpoint_format.h"
#include "gmock/gmock.h"
#include "ps_testing.h"

namespace pstrain::ps_testing {
namespace {

using ::testing::HasSubstr;

CheckpointRequest Phase(CheckpointRequest::Phase phase, uint64_t id) {
  CheckpointRequest req;
  *req.mutable_sender() = Chief();
  req.set_phase(phase);
  req.set_id(id);
  req.set_num_ps(1);
  return req;
}

CheckpointRequest Freeze(uint64_t id, double timeout_s = 30) {
  CheckpointRequest req = Phase(CheckpointRequest::FREEZE, id);
  req.set_freeze_timeout_s(timeout_s);
  CheckpointShard* s = req.add_shards();
  s->set_name("w");
  s->set_variable("w");
  s->add_shape(4);
  s->set_row_end(4);
  return req;
}

// A PS holding "w" ([4], adam) after one push.
std::unique_ptr<ParameterServer> AdamPs() {
  auto ps = MakePs();
  CreateVariablesRequest req = CreateReq("w", Tensor({4}, 0.5f));
  req.mutable_variables(0)->mutable_optimizer()->set_name("adam");
  CreateVariablesResponse resp;
  EXPECT_TRUE(ps->CreateVariables(req, &resp).ok());
  EXPECT_TRUE(Push(ps.get(), Worker(0), "w", 1.0f, 0).ok());
  return ps;
}

absl::Status Call(ParameterServer* ps, const CheckpointRequest& req,
                  CheckpointResponse* resp = nullptr) {
  CheckpointResponse ignored;
  return ps->Checkpoint(req, resp ? resp : &ignored);
}

TEST(PsCheckpointTest, FrozenPushesWaitAndTheWrittenPartHoldsTheCut) {
  auto ps = AdamPs();
  const std::string dir = std::filesystem::temp_directory_path() / "ps_checkpoint_test_cut";
  std::filesystem::remove_all(dir);
  CheckpointResponse frozen;
  ASSERT_TRUE(Call(ps.get(), Freeze(1), &frozen).ok());
  EXPECT_EQ(frozen.min_version(), 1u);
  EXPECT_EQ(frozen.max_version(), 1u);
  std::atomic<bool> pushed{false};
  ps->AfterFreeze([&] {
    EXPECT_TRUE(Push(ps.get(), Worker(0), "w", 1.0f, 1).ok());
    pushed = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(pushed) << "a push ran while the PS was frozen";
  CheckpointRequest release = Phase(CheckpointRequest::RELEASE, 1);
  release.set_dir(dir);
  release.set_global_step(1);
  ASSERT_TRUE(Call(ps.get(), release).ok());
  CheckpointResponse written;
  for (int i = 0; i < 30 && written.path().empty(); ++i) {
    ASSERT_TRUE(Call(ps.get(), Phase(CheckpointRequest::WAIT, 1), &written).ok());
  }
  for (int i = 0; i < 100 && !pushed; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(pushed);
  WrittenFile info;
  absl::StatusOr<PartFile> part = ReadPartFile(written.path(), &info);
  ASSERT_TRUE(part.ok()) << part.status();
  EXPECT_EQ(info.bytes, written.file_bytes());
  EXPECT_EQ(info.checksum, written.checksum());
  EXPECT_EQ(part->checkpoint_id, 1u);
  ASSERT_EQ(part->shards.size(), 1u);
  const ShardRecord& r = part->shards[0];
  EXPECT_EQ(r.version, 1u);  // the cut, not the push released after it
  EXPECT_EQ(r.update_count, 1);
  EXPECT_EQ(r.optimizer, "adam");
  ASSERT_EQ(r.slots.size(), 2u);
  EXPECT_EQ(r.slots[0].name, "exp_avg");
  EXPECT_FLOAT_EQ(r.slots[0].values[0], 0.1f);  // (1 - beta1) g
  std::filesystem::remove_all(dir);
}

TEST(PsCheckpointTest, AFreezeEndsByItselfAtItsDeadline) {
  auto ps = AdamPs();
  ASSERT_TRUE(Call(ps.get(), Freeze(7, 0.2)).ok());
  std::atomic<bool> pushed{false};
  ps->AfterFreeze([&] { pushed = true; });
  for (int i = 0; i < 200 && !pushed; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(pushed) << "the freeze did not end at its deadline";
  CheckpointRequest release = Phase(CheckpointRequest::RELEASE, 7);
  release.set_dir("unused");
  absl::Status s = Call(ps.get(), release);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("its freeze expired"));
  EXPECT_TRUE(Call(ps.get(), Freeze(8)).ok());  // a new checkpoint may start
  EXPECT_TRUE(Call(ps.get(), Phase(CheckpointRequest::ABORT, 8)).ok());
}

TEST(PsCheckpointTest, BadCheckpointRequestsAreRefused) {
  auto ps = AdamPs();
  CheckpointRequest req = Freeze(1);
  req.clear_sender();
  EXPECT_TRUE(absl::IsInvalidArgument(Call(ps.get(), req)));
  req = Freeze(1);
  *req.mutable_sender() = Worker(0);
  EXPECT_TRUE(absl::IsPermissionDenied(Call(ps.get(), req)));
  req = Freeze(1);
  req.set_num_ps(0);
  EXPECT_TRUE(absl::IsInvalidArgument(Call(ps.get(), req)));
  req = Freeze(1);
  req.mutable_shards(0)->set_name("other");
  absl::Status s = Call(ps.get(), req);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("does not list shard 'w'"));
  EXPECT_TRUE(Push(ps.get(), Worker(0), "w", 1.0f, 1).ok());  // a failed freeze froze nothing
  s = Call(ps.get(), Phase(CheckpointRequest::RELEASE, 3));
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;  // no directory
  CheckpointRequest release = Phase(CheckpointRequest::RELEASE, 3);
  release.set_dir("unused");
  EXPECT_TRUE(absl::IsFailedPrecondition(Call(ps.get(), release)));
  EXPECT_TRUE(
      absl::IsInvalidArgument(Call(ps.get(), Phase(CheckpointRequest::PHASE_UNSPECIFIED, 1))));
}

TEST(PsCheckpointTest, ImportRestoresSlotsAndVersionsAndRefusesBadInput) {
  auto ps = AdamPs();
  auto import = [&](auto edit) {
    ImportRequest req;
    *req.mutable_sender() = Chief();
    VariableImport* v = req.add_variables();
    v->set_name("w");
    v->set_version(41);
    v->set_update_count(40);
    for (const char* name : {"exp_avg", "exp_avg_sq"}) {
      SlotValue* slot = v->add_slots();
      slot->set_name(name);
      EncodeTensor(Tensor({4}, 0.25f), slot->mutable_value());
    }
    edit(&req);
    ImportResponse resp;
    return ps->Import(req, &resp);
  };
  absl::Status s =
      import([](ImportRequest* r) { r->mutable_variables(0)->mutable_slots(1)->set_name("sum"); });
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("slot 1 is 'sum', its optimizer adam names it 'exp_avg_sq'"));
  s = import([](ImportRequest* r) { r->mutable_variables(0)->mutable_slots()->RemoveLast(); });
  EXPECT_THAT(s.message(), HasSubstr("1 slots, its optimizer adam has 2"));
  s = import([](ImportRequest* r) {
    const float x[2] = {0, 0};
    EncodeTensor({2}, x, r->mutable_variables(0)->mutable_slots(0)->mutable_value());
  });
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  s = import([](ImportRequest* r) { r->mutable_variables(0)->set_name("nope"); });
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  s = import([](ImportRequest* r) { *r->mutable_sender() = Worker(0); });
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  s = import([](ImportRequest* r) {
    TableImport* t = r->add_tables();
    t->set_table("nope");
  });
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  // Nothing of the refused imports was applied: the next push reads version 1.
  EXPECT_TRUE(Push(ps.get(), Worker(0), "w", 1.0f, 1).ok());
  ASSERT_TRUE(import([](ImportRequest*) {}).ok());
  EXPECT_FALSE(Push(ps.get(), Worker(0), "w", 1.0f, 42).ok());  // newer than the variable
  EXPECT_TRUE(Push(ps.get(), Worker(0), "w", 1.0f, 41).ok());
}

}  // namespace
}  // namespace pstrain::ps_testing
