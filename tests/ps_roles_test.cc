// Who may call what on a parameter server, the chief's pinned incarnation, and DeleteVariables.

#include <string>
#include <vector>

#include "common/limits.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps_tables_testing.h"
#include "ps_testing.h"

namespace pstrain {
namespace {

using namespace ps_testing;  // NOLINT
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr auto kDenied = absl::StatusCode::kPermissionDenied;

TEST(PsRolesTest, ChiefOnlyMethodsRefuseEveryOtherSender) {
  std::unique_ptr<ParameterServer> ps = MakePs();
  Create(ps.get(), "w", Tensor({4}, 1.0f));
  for (const Sender& who :
       {Worker(0), From("nobody", 0, 1), From("ps", 1, 1), From("chief", 1, 100)}) {
    SCOPED_TRACE(who.job() + ":" + std::to_string(who.task()));
    const std::string name = who.job() + ":" + std::to_string(who.task());
    ConfigureRequest configure = Config("sync", 1, 1, 0, 10, {});
    *configure.mutable_sender() = who;
    ConfigureResponse configured;
    absl::Status s = ps->Configure(configure, &configured);
    EXPECT_EQ(s.code(), kDenied);
    EXPECT_THAT(s.message(), AllOf(HasSubstr("Configure from " + name), HasSubstr("ps task 0"),
                                   HasSubstr("only chief:0 may call it")));

    CreateVariablesRequest create = CreateReq("x", Tensor({1}));
    *create.mutable_sender() = who;
    CreateVariablesResponse created;
    s = ps->CreateVariables(create, &created);
    EXPECT_EQ(s.code(), kDenied);
    EXPECT_THAT(s.message(), HasSubstr("CreateVariables from " + name));

    DeleteVariablesRequest del;
    *del.mutable_sender() = who;
    del.add_names("w");
    DeleteVariablesResponse deleted;
    s = ps->DeleteVariables(del, &deleted);
    EXPECT_EQ(s.code(), kDenied);
    EXPECT_THAT(s.message(), HasSubstr("DeleteVariables from " + name));

    ShutdownRequest shutdown;
    *shutdown.mutable_sender() = who;
    EXPECT_EQ(ps->CheckShutdown(shutdown).code(), kDenied);
  }
  EXPECT_EQ(Read(ps.get(), "w"), (State{0, 1.0f}));  // still there, still async
  ASSERT_TRUE(Push(ps.get(), Worker(0), "w", 1.0f, 0).ok());
  EXPECT_EQ(Read(ps.get(), "w").version, 1u);
}

TEST(PsRolesTest, TheChiefIsPinnedToOneIncarnation) {
  std::unique_ptr<ParameterServer> ps = *ParameterServer::Create({.task = 2});
  // The first chief call pins its incarnation...
  ConfigureRequest forged = Config("async", 1, 0, 0, 10, {});
  *forged.mutable_sender() = Chief(5);
  ConfigureResponse resp;
  ASSERT_TRUE(ps->Configure(forged, &resp).ok());
  ConfigureRequest real = Config("sync", 2, 2, 0, 10, {Worker(0, 7), Worker(1, 8)});
  absl::Status s = ps->Configure(real, &resp);
  EXPECT_EQ(s.code(), kDenied);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("chief:0 (incarnation 100)"), HasSubstr("ps task 2"),
                                 HasSubstr("the job's chief is incarnation 5")));
  // ...but registration is authoritative: ExpectChief overrides it.
  ps->ExpectChief(100);
  ASSERT_TRUE(ps->Configure(real, &resp).ok());
  ASSERT_TRUE(ps->Configure(real, &resp).ok()) << "a retried Configure is accepted";
  s = ps->Configure(forged, &resp);
  EXPECT_EQ(s.code(), kDenied);
  EXPECT_THAT(s.message(), HasSubstr("the job's chief is incarnation 100"));
  Create(ps.get(), "w", Tensor({4}, 0.0f));
  EXPECT_EQ(ps->Configure(real, &resp).code(), absl::StatusCode::kFailedPrecondition);
  // The forged chief may not pull or read stats either; the real one may.
  PullRequest pull;
  *pull.mutable_sender() = Chief(5);
  pull.add_names("w");
  PullResponse pulled;
  EXPECT_EQ(ps->Pull(pull, &pulled).code(), kDenied);
  StatsRequest stats;
  *stats.mutable_sender() = Chief(5);
  StatsResponse st;
  EXPECT_EQ(ps->Stats(stats, &st).code(), kDenied);
  *stats.mutable_sender() = Chief();
  EXPECT_TRUE(ps->Stats(stats, &st).ok());
}

TEST(PsRolesTest, OnlyAnnouncedWorkersMayPushPullLeaveOrReadStats) {
  const ConfigureRequest config = Config("sync", 2, 2, 0, 10, {Worker(0, 7), Worker(1, 8)});
  std::unique_ptr<ParameterServer> ps = MakePs(&config);
  Create(ps.get(), "w", Tensor({4}, 0.0f));
  for (const Sender& who : {Worker(0, 9), Worker(2, 7), From("nobody", 0, 7)}) {
    SCOPED_TRACE(who.DebugString());
    absl::Status s = Push(ps.get(), who, "w", 1.0f, 0);
    EXPECT_EQ(s.code(), kDenied);
    EXPECT_THAT(s.message(), AllOf(HasSubstr("push from"),
                                   HasSubstr("which the chief does not "
                                             "know"),
                                   HasSubstr("ps task 0")));
    PullRequest pull;
    *pull.mutable_sender() = who;
    pull.add_names("w");
    PullResponse pulled;
    EXPECT_EQ(ps->Pull(pull, &pulled).code(), kDenied);
    EXPECT_EQ(Leave(ps.get(), who, /*pause=*/false).code(), kDenied);
    StatsRequest stats;
    *stats.mutable_sender() = who;
    StatsResponse st;
    EXPECT_EQ(ps->Stats(stats, &st).code(), kDenied);
  }
  // The refused leaves changed nothing: the step still needs both workers.
  ASSERT_TRUE(Push(ps.get(), Worker(0, 7), "w", 1.0f, 0).ok());
  EXPECT_EQ(Read(ps.get(), "w").version, 0u);
  ASSERT_TRUE(Push(ps.get(), Worker(1, 8), "w", 3.0f, 0).ok());
  EXPECT_EQ(Read(ps.get(), "w"), (State{1, -2.0f}));
}

// A task outside the cluster (worker:5 of 2) is denied on every method a worker calls, also
// when the job runs a generation the outsider does not name (it is not told to roll back).
TEST(PsRolesTest, ATaskOutsideTheClusterIsDeniedWhateverItsGeneration) {
  ConfigureRequest config = Config("async", 2, 0, 0, 10, {Worker(0, 7), Worker(1, 8)});
  config.set_generation(3);
  std::unique_ptr<ParameterServer> ps = MakePs(&config);
  Create(ps.get(), "w", Tensor({4}, 0.0f));
  ASSERT_TRUE(CreateTables(ps.get(), {TableOf("emb", 2)}).ok());
  for (uint64_t generation : {0, 3}) {
    Sender who = Worker(5, 7);
    who.set_generation(generation);
    SCOPED_TRACE(who.DebugString());
    EXPECT_EQ(Push(ps.get(), who, "w", 1.0f, 0).code(), kDenied);
    EXPECT_EQ(PushSparse(ps.get(), who, {Grad("emb", {1}, {1, 1}, 0)}).code(), kDenied);
    PullRequest pull;
    *pull.mutable_sender() = who;
    pull.add_names("w");
    PullResponse pulled;
    EXPECT_EQ(ps->Pull(pull, &pulled).code(), kDenied);
    LookupResponse looked_up;
    EXPECT_EQ(ps->Lookup(LookupReq(who, {{"emb", KeyBytes({1})}}), &looked_up).code(), kDenied);
    EXPECT_EQ(Leave(ps.get(), who, /*pause=*/false).code(), kDenied);
    StatsRequest stats;
    *stats.mutable_sender() = who;
    StatsResponse st;
    EXPECT_EQ(ps->Stats(stats, &st).code(), kDenied);
  }
  EXPECT_EQ(Read(ps.get(), "w").version, 0u);
}

TEST(PsRolesTest, AWorkerThatLeftMayNotPushAgain) {
  const ConfigureRequest config = Config("async", 2, 0, 0, 10, {Worker(0, 7), Worker(1, 8)});
  std::unique_ptr<ParameterServer> ps = MakePs(&config);
  Create(ps.get(), "w", Tensor({4}, 0.0f));
  ASSERT_TRUE(Leave(ps.get(), Worker(1, 8), /*pause=*/false).ok());
  absl::Status s = Push(ps.get(), Worker(1, 8), "w", 1.0f, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("push from worker:1 (incarnation 8), which left the job"));
  EXPECT_EQ(Read(ps.get(), "w").version, 0u);
}

TEST(PsDeleteTest, DeleteRemovesNamedVariablesAndIgnoresUnknownOnes) {
  std::unique_ptr<ParameterServer> ps = MakePs();
  Create(ps.get(), "a", Tensor({4}, 1.0f));
  Create(ps.get(), "b", Tensor({4}, 2.0f));
  DeleteVariablesRequest req;
  *req.mutable_sender() = Chief();
  req.add_names("a");
  req.add_names("unknown");
  DeleteVariablesResponse resp;
  ASSERT_TRUE(ps->DeleteVariables(req, &resp).ok());
  ASSERT_TRUE(ps->DeleteVariables(req, &resp).ok()) << "a retry is harmless";
  PullRequest pull;
  *pull.mutable_sender() = Chief();
  pull.add_names("a");
  PullResponse pulled;
  EXPECT_EQ(ps->Pull(pull, &pulled).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Push(ps.get(), Worker(0), "a", 1.0f, 0).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Read(ps.get(), "b"), (State{0, 2.0f}));
  Create(ps.get(), "a", Tensor({4}, 5.0f));  // the name is free again
  EXPECT_EQ(Read(ps.get(), "a"), (State{0, 5.0f}));

  for (int i = 0; i <= kMaxVariablesPerRequest; ++i) req.add_names("x");
  absl::Status s = ps->DeleteVariables(req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("limit of 65536"));
  EXPECT_EQ(Read(ps.get(), "a"), (State{0, 5.0f}));
}

TEST(PsDeleteTest, APullWaitingOnADeletedVariableEndsWithNotFound) {
  const ConfigureRequest config = Config("sync", 2, 2, 0, 60, {});
  std::unique_ptr<ParameterServer> ps = MakePs(&config);
  Create(ps.get(), "w", Tensor({4}, 0.0f));
  ASSERT_TRUE(Push(ps.get(), Worker(0), "w", 1.0f, 0).ok());
  AsyncPull waiting(ps.get(), Worker(0), "w", 1, 0);
  EXPECT_FALSE(waiting.done());
  DeleteVariablesRequest req;
  *req.mutable_sender() = Chief();
  req.add_names("w");
  DeleteVariablesResponse resp;
  ASSERT_TRUE(ps->DeleteVariables(req, &resp).ok());
  ASSERT_TRUE(Eventually([&] { return waiting.done(); }));
  EXPECT_EQ(waiting.status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(waiting.status.message(), HasSubstr("'w' was deleted from ps task 0"));
  EXPECT_EQ(waiting.resp.values_size(), 0);
  // A push validated before the delete would apply to the removed copy; one after is NotFound.
  EXPECT_EQ(Push(ps.get(), Worker(1), "w", 1.0f, 0).code(), absl::StatusCode::kNotFound);
}

TEST(PsWaitTest, WaitingPullsAreBounded) {
  const ConfigureRequest config = Config("sync", 2, 2, 0, 60, {});
  std::unique_ptr<ParameterServer> ps = MakePs(&config);
  Create(ps.get(), "w", Tensor({4}, 0.0f));
  std::vector<std::unique_ptr<AsyncPull>> pulls;
  for (int i = 0; i < kMaxWaitingPulls; ++i) {
    pulls.push_back(std::make_unique<AsyncPull>(ps.get(), Worker(0), "w", 1, 0));
  }
  AsyncPull refused(ps.get(), Worker(0), "w", 1, 0);
  ASSERT_TRUE(refused.done());
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status.message(), HasSubstr("16384 pulls are already waiting"));
  ps->Stop();
  for (const auto& p : pulls) ASSERT_TRUE(p->done());
}

}  // namespace
}  // namespace pstrain
