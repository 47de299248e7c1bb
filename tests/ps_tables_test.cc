// Embedding tables on a parameter server, in process: creating them (get-or-create, all or none),
// lookups and sparse pushes in async mode, every refused request leaving rows and counters as
// they were, and who may call what.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "common/limits.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps_tables_testing.h"

namespace pstrain {
namespace {

using namespace ps_testing;  // NOLINT
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
constexpr auto kDenied = absl::StatusCode::kPermissionDenied;

TEST(PsTablesTest, LookupCreatesRowsAndPushAppliesTheTablesOptimizer) {
  std::unique_ptr<ParameterServer> ps = MakePs();
  ASSERT_TRUE(
      CreateTables(ps.get(), {TableOf("emb", 4, 0.5f, 0.5), TableOf("bias", 1, 0.0f)}).ok());
  uint64_t version = 99;
  EXPECT_THAT(Rows(ps.get(), "emb", {7, 1ull << 63, 3}, &version),
              ElementsAreArray(std::vector<float>(12, 0.5f)));
  EXPECT_EQ(version, 0u);

  PushSparseResponse resp;
  ASSERT_TRUE(PushSparse(ps.get(), Worker(0),
                         {Grad("emb", {3, 7}, {1, 2, 0.25f, -1, 0, 0, 0, 0.5f}, 0),
                          Grad("bias", {}, {}, 0)},
                         &resp)
                  .ok());
  EXPECT_THAT(resp.versions(), ElementsAre(1, 1));
  EXPECT_EQ(resp.stale_dropped(), 0);
  // sgd with lr 0.5: w - 0.5 g, exact in float for these values.
  EXPECT_THAT(
      Rows(ps.get(), "emb", {7, 3, 1ull << 63}, &version),
      ElementsAre(0.5f, 0.5f, 0.5f, 0.25f, 0.0f, -0.5f, 0.375f, 1.0f, 0.5f, 0.5f, 0.5f, 0.5f));
  EXPECT_EQ(version, 1u);

  const StatsResponse stats = Stats(ps.get());
  EXPECT_EQ(stats.pushes_applied(), 2);  // one per table and push
  EXPECT_EQ(stats.updates_applied(), 2);
  EXPECT_THAT(stats.pushes_by_worker(), ElementsAre());  // unconfigured: no worker slots
  ASSERT_EQ(stats.tables_size(), 2);
  EXPECT_EQ(stats.tables(0).name(), "bias");  // sorted by name
  EXPECT_EQ(stats.tables(1).name(), "emb");
  EXPECT_EQ(stats.tables(1).dim(), 4);
  EXPECT_EQ(stats.tables(1).rows(), 3);
  EXPECT_EQ(stats.tables(1).version(), 1u);
  EXPECT_EQ(stats.tables(1).gradient_rows_applied(), 2);
  EXPECT_EQ(stats.tables(1).keys_looked_up(), 6);
}

TEST(PsTablesTest, ALookupOfSeveralTablesAnswersInRequestOrder) {
  std::unique_ptr<ParameterServer> ps = MakePs();
  ASSERT_TRUE(CreateTables(ps.get(), {TableOf("a", 2, 1.0f), TableOf("b", 3, 2.0f)}).ok());
  LookupResponse resp;
  ASSERT_TRUE(
      ps->Lookup(LookupReq(Worker(0), {{"b", KeyBytes({5})}, {"a", KeyBytes({5, 6})}, {"a2", ""}}),
                 &resp)
          .code() == absl::StatusCode::kNotFound);
  ASSERT_TRUE(
      ps->Lookup(LookupReq(Worker(0), {{"b", KeyBytes({5})}, {"a", KeyBytes({5, 6})}}), &resp)
          .ok());
  ASSERT_EQ(resp.tables_size(), 2);
  EXPECT_THAT(Floats(resp.tables(0).rows()), ElementsAre(2, 2, 2));
  EXPECT_THAT(Floats(resp.tables(1).rows()), ElementsAre(1, 1, 1, 1));
  ASSERT_TRUE(ps->Lookup(LookupReq(Worker(0), {}), &resp).ok());
  EXPECT_EQ(resp.tables_size(), 0);
}

TEST(PsTablesTest, ConcurrentSparsePushesAreNeverLost) {
  std::unique_ptr<ParameterServer> ps = MakePs();
  ASSERT_TRUE(CreateTables(ps.get(), {TableOf("emb", 8, 0.0f)}).ok());
  Rows(ps.get(), "emb", {1, 2});
  constexpr int kThreads = 4, kPushes = 200;
  std::vector<std::vector<uint64_t>> versions(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPushes; ++i) {
        PushSparseResponse resp;
        absl::Status s = PushSparse(ps.get(), Worker(t),
                                    {Grad("emb", {2, 1}, std::vector<float>(16, 1.0f), 0)}, &resp);
        ASSERT_TRUE(s.ok()) << s;
        versions[t].push_back(resp.versions(0));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<uint64_t> all;
  for (const auto& v : versions) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  std::vector<uint64_t> expected(kThreads * kPushes);
  std::iota(expected.begin(), expected.end(), 1);
  EXPECT_EQ(all, expected) << "every push is one update, with a version of its own";
  EXPECT_EQ(Rows(ps.get(), "emb", {1, 2}), std::vector<float>(16, -kThreads * kPushes));
}

TEST(PsTablesTest, GradientsOfKeysNotAdmittedYetAreDroppedAndCounted) {
  std::unique_ptr<ParameterServer> ps = MakePs();
  TableDef def = TableOf("emb", 2, 0.5f);
  def.set_admit_after(2);
  def.set_unadmitted_zeros(true);
  ASSERT_TRUE(CreateTables(ps.get(), {def}).ok());
  EXPECT_THAT(Rows(ps.get(), "emb", {1, 2}), ElementsAre(0, 0, 0, 0));
  EXPECT_THAT(Rows(ps.get(), "emb", {1}), ElementsAre(0.5f, 0.5f)) << "seen twice: admitted";
  ASSERT_TRUE(PushSparse(ps.get(), Worker(0), {Grad("emb", {1, 2}, {1, 1, 1, 1}, 0)}).ok());
  EXPECT_THAT(Rows(ps.get(), "emb", {1}), ElementsAre(-0.5f, -0.5f));
  const TableStats stats = Stats(ps.get()).tables(0);
  EXPECT_EQ(stats.admitted(), 1);
  EXPECT_EQ(stats.filtered_gradients(), 1);
  EXPECT_EQ(stats.gradient_rows_applied(), 1);
}

// Everything a refused request could have touched: rows, versions and counters. Taking it looks
// up 3 keys, after reading the counters.
struct Snapshot {
  std::vector<float> emb, other;
  std::string stats;      // but for keys_looked_up and nonfinite_rejected
  int64_t looked_up = 0;  // keys_looked_up of every table
};
Snapshot Take(ParameterServer* ps) {
  StatsResponse stats = Stats(ps);
  stats.clear_nonfinite_rejected();  // checked on its own
  Snapshot snap;
  for (TableStats& t : *stats.mutable_tables()) {
    snap.looked_up += t.keys_looked_up();
    t.clear_keys_looked_up();
  }
  snap.stats = stats.DebugString();
  snap.emb = Rows(ps, "emb", {1, 2});
  snap.other = Rows(ps, "other", {1});
  return snap;
}
void ExpectUnchanged(ParameterServer* ps, const Snapshot& before) {
  const Snapshot after = Take(ps);
  EXPECT_EQ(after.stats, before.stats);
  EXPECT_EQ(after.emb, before.emb);
  EXPECT_EQ(after.other, before.other);
  EXPECT_EQ(after.looked_up, before.looked_up + 3) << "only the snapshot's own lookups count";
}

struct BadCase {
  std::string what;
  absl::StatusCode code;
  std::vector<std::string> says;
};

void ExpectRefused(const absl::Status& s, const BadCase& c) {
  EXPECT_EQ(s.code(), c.code) << c.what << ": " << s;
  for (const std::string& part : c.says) EXPECT_THAT(s.message(), HasSubstr(part)) << c.what;
}

TEST(PsTablesTest, EveryRefusedPushChangesNoRowAndSaysWhatIsWrong) {
  std::unique_ptr<ParameterServer> ps = MakePs();
  ASSERT_TRUE(CreateTables(ps.get(), {TableOf("emb", 4), TableOf("other", 2)}).ok());
  Rows(ps.get(), "emb", {1, 2});
  Rows(ps.get(), "other", {1});
  const SparseGradient good = Grad("emb", {1, 2}, std::vector<float>(8, 1.0f), 0);
  const SparseGradient good_other = Grad("other", {1}, {1, 1}, 0);
  auto bytes = [](SparseGradient g, std::string keys, std::string rows) {
    g.set_keys(std::move(keys));
    g.set_rows(std::move(rows));
    return g;
  };
  std::vector<float> nan_rows(8, 1.0f);
  nan_rows[7] = std::nanf("");
  const std::string too_many_keys((kMaxKeysPerRequest + 1) * sizeof(uint64_t), '\0');
  const struct {
    BadCase c;
    std::vector<SparseGradient> grads;
    Sender from = Worker(0);
  } cases[] = {
      {{"unknown table", absl::StatusCode::kNotFound, {"table 'nope' not found on ps task 0"}},
       {good, Grad("nope", {1}, {1}, 0)}},
      {{"keys not whole uint64s", kInvalid, {"table 'emb' on ps task 0", "13 bytes"}},
       {good_other, bytes(good, std::string(13, '\0'), "")}},
      {{"rows not keys x dim",
        kInvalid,
        {"table 'emb' on ps task 0: 2 keys need 2 x 4 floats, got 7"}},
       {good_other, Grad("emb", {1, 2}, std::vector<float>(7, 1.0f), 0)}},
      {{"rows not whole floats", kInvalid, {"table 'emb' on ps task 0", "got 33 bytes"}},
       {bytes(good, KeyBytes({1, 2}), std::string(33, '\0'))}},
      {{"a key twice", kInvalid, {"table 'emb' on ps task 0: key 2 appears more than once"}},
       {good_other, Grad("emb", {2, 1, 2}, std::vector<float>(12, 1.0f), 0)}},
      {{"a NaN", kInvalid, {"table 'emb' on ps task 0", "key 2", "non-finite", "index 3"}},
       {good_other, Grad("emb", {1, 2}, nan_rows, 0)}},
      {{"a key never looked up",
        kInvalid,
        {"table 'emb' on ps task 0: key 99 was never looked up"}},
       {good_other, Grad("emb", {1, 99}, std::vector<float>(8, 1.0f), 0)}},
      {{"a read_version from the future",
        kInvalid,
        {"table 'emb' on ps task 0", "version 5", "at version 0"}},
       {good_other, Grad("emb", {1}, {1, 1, 1, 1}, 5)}},
      {{"a table twice", kInvalid, {"table 'emb' appears more than once in the sparse push"}},
       {good, good_other, good}},
      {{"too many keys", kInvalid, {"table 'emb' on ps task 0", "over the limit of 4194304 keys"}},
       {good_other, bytes(good, too_many_keys, "")}},
      {{"no gradient", kInvalid, {"carries no gradient"}}, {}},
      {{"no sender", kInvalid, {"no sender"}}, {good}, Sender()},
  };
  const Snapshot before = Take(ps.get());
  for (const auto& c : cases) {
    ExpectRefused(PushSparse(ps.get(), c.from, c.grads), c.c);
  }
  ExpectUnchanged(ps.get(), before);
  EXPECT_EQ(Stats(ps.get()).nonfinite_rejected(), 1);
  // The good gradients were valid all along.
  ASSERT_TRUE(PushSparse(ps.get(), Worker(0), {good, good_other}).ok());
  EXPECT_THAT(Rows(ps.get(), "other", {1}), ElementsAre(-0.5f, -0.5f));
}

TEST(PsTablesTest, EveryRefusedLookupSaysWhatIsWrongAndCreatesNoRow) {
  std::unique_ptr<ParameterServer> ps = MakePs();
  ASSERT_TRUE(CreateTables(ps.get(),
                           {TableOf("emb", 4), TableOf("other", 2), TableOf("wide", kMaxTableDim)})
                  .ok());
  Rows(ps.get(), "emb", {1, 2});
  Rows(ps.get(), "other", {1});
  const std::string too_many_keys((kMaxKeysPerRequest + 1) * sizeof(uint64_t), '\0');
  std::vector<uint64_t> many(2000);
  for (size_t i = 0; i < many.size(); ++i) many[i] = i;
  const struct {
    BadCase c;
    LookupRequest req;
  } cases[] = {
      {{"unknown table", absl::StatusCode::kNotFound, {"table 'nope' not found on ps task 0"}},
       LookupReq(Worker(0), {{"other", KeyBytes({3})}, {"nope", KeyBytes({1})}})},
      {{"keys not whole uint64s", kInvalid, {"table 'emb' on ps task 0", "9 bytes"}},
       LookupReq(Worker(0), {{"other", KeyBytes({3})}, {"emb", std::string(9, '\1')}})},
      {{"a key twice",
        kInvalid,
        {"table 'emb' on ps task 0: key 4 appears more than once in the lookup"}},
       LookupReq(Worker(0), {{"other", KeyBytes({3})}, {"emb", KeyBytes({4, 5, 4})}})},
      {{"a table twice", kInvalid, {"table 'other' appears more than once in the lookup"}},
       LookupReq(Worker(0), {{"other", KeyBytes({3})}, {"other", KeyBytes({4})}})},
      {{"too many keys", kInvalid, {"table 'emb' on ps task 0", "over the limit of 4194304 keys"}},
       LookupReq(Worker(0), {{"other", KeyBytes({3})}, {"emb", too_many_keys}})},
      {{"rows over the response limit",
        absl::StatusCode::kResourceExhausted,
        {"would return 524288008 bytes", "ps task 0", "split the lookup"}},
       LookupReq(Worker(0), {{"other", KeyBytes({3})}, {"wide", KeyBytes(many)}})},
      {{"a negative clock", kInvalid, {"clock -1"}},
       LookupReq(Worker(0), {{"other", KeyBytes({3})}}, 0, -1)},
      {{"no sender", kInvalid, {"no sender"}}, LookupReq(Sender(), {{"other", KeyBytes({3})}})},
  };
  const Snapshot before = Take(ps.get());
  for (const auto& c : cases) {
    LookupResponse resp;
    ExpectRefused(ps->Lookup(c.req, &resp), c.c);
    EXPECT_EQ(resp.tables_size(), 0) << c.c.what;
  }
  ExpectUnchanged(ps.get(), before);  // key 3 of "other" got no row
}

TEST(PsTablesTest, CreateTablesIsGetOrCreateAndAllOrNone) {
  std::unique_ptr<ParameterServer> ps = MakePs();
  ASSERT_TRUE(CreateTables(ps.get(), {TableOf("a", 4)}).ok());
  Rows(ps.get(), "a", {1});
  ASSERT_TRUE(PushSparse(ps.get(), Worker(0), {Grad("a", {1}, {1, 1, 1, 1}, 0)}).ok());
  // The chief's retry: the same definition is fine and keeps the table as it is.
  ASSERT_TRUE(CreateTables(ps.get(), {TableOf("a", 4), TableOf("b", 2)}).ok());
  EXPECT_THAT(Rows(ps.get(), "a", {1}), ElementsAre(-0.5f, -0.5f, -0.5f, -0.5f));

  struct {
    std::string what;
    std::vector<TableDef> defs;
    absl::StatusCode code;
    std::string says;
  } cases[] = {
      {"another dim under a taken name",
       {TableOf("c", 2), TableOf("a", 8)},
       absl::StatusCode::kAlreadyExists,
       "table 'a' on ps task 0 already exists with another definition (modified: dim: 4 -> 8)"},
      {"another optimizer under a taken name",
       {TableOf("c", 2), TableOf("b", 2, 0.5f, 0.1)},
       absl::StatusCode::kAlreadyExists,
       "table 'b' on ps task 0 already exists with another definition (modified: "
       "optimizer.learning_rate: 1 -> 0.1)"},
      {"a name twice",
       {TableOf("c", 2), TableOf("c", 2)},
       absl::StatusCode::kAlreadyExists,
       "table 'c' appears more than once"},
      {"dim 0",
       {TableOf("c", 2), TableOf("d", 0)},
       kInvalid,
       "table 'd' on ps task 0: dim 0 must be"},
      {"an empty name",
       {TableOf("c", 2), TableOf("", 2)},
       kInvalid,
       "table 1 of the table create has an empty name"},
  };
  for (const auto& c : cases) {
    absl::Status s = CreateTables(ps.get(), c.defs);
    EXPECT_EQ(s.code(), c.code) << c.what << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(c.says)) << c.what;
  }
  LookupResponse resp;
  absl::Status s = ps->Lookup(LookupReq(Chief(), {{"c", ""}}), &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << "all or none: 'c' was never created";
  EXPECT_EQ(Stats(ps.get()).tables_size(), 2);
  ConfigureResponse configured;
  s = ps->Configure(Config("sync", 1, 1, 0, 10, {}), &configured);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("configure after tables were created on ps task 0"));
}

TEST(PsTablesTest, APsHoldsAtMostkMaxTablesTables) {
  std::unique_ptr<ParameterServer> ps = MakePs();
  std::vector<TableDef> defs;
  for (int i = 0; i < kMaxTables; ++i) defs.push_back(TableOf("t" + std::to_string(i), 1));
  ASSERT_TRUE(CreateTables(ps.get(), {defs.begin(), defs.begin() + 10}).ok());
  ASSERT_TRUE(CreateTables(ps.get(), defs).ok()) << "the first 10 exist and count once";
  absl::Status s = CreateTables(ps.get(), {TableOf("t0", 1), TableOf("one-more", 1)});
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr("limit of 4096 tables per PS"), HasSubstr("ps task 0")));
  EXPECT_EQ(Stats(ps.get()).tables_size(), kMaxTables);
  defs.push_back(TableOf("one-more", 1));
  s = CreateTables(ps.get(), defs);
  EXPECT_EQ(s.code(), kInvalid) << "more than kMaxTables in one request: " << s;
}

TEST(PsTablesRolesTest, OnlyTheChiefCreatesTablesAndOnlyAnnouncedWorkersPushOrLookUp) {
  const ConfigureRequest config = Config("async", 2, 0, 0, 10, {Worker(0, 7), Worker(1, 8)});
  std::unique_ptr<ParameterServer> ps = MakePs(&config);
  for (const Sender& who : {Worker(0, 7), From("nobody", 0, 1), From("chief", 1, 100), Chief(5)}) {
    SCOPED_TRACE(who.DebugString());
    absl::Status s = CreateTables(ps.get(), {TableOf("emb", 2)}, who);
    EXPECT_EQ(s.code(), kDenied);
    EXPECT_THAT(s.message(), AllOf(HasSubstr("CreateTables from"), HasSubstr("ps task 0")));
  }
  EXPECT_EQ(Stats(ps.get()).tables_size(), 0);
  ASSERT_TRUE(CreateTables(ps.get(), {TableOf("emb", 2)}).ok());
  ASSERT_THAT(Rows(ps.get(), "emb", {1}), ElementsAre(0.5f, 0.5f));  // the chief may look up
  const SparseGradient g = Grad("emb", {1}, {1, 1}, 0);
  for (const Sender& who : {Worker(0, 9), Worker(2, 7), From("nobody", 0, 7), Chief()}) {
    SCOPED_TRACE(who.DebugString());
    absl::Status s = PushSparse(ps.get(), who, {g});
    EXPECT_EQ(s.code(), kDenied);
    EXPECT_THAT(s.message(),
                AllOf(HasSubstr("which the chief does not know"), HasSubstr("ps task 0")));
    if (who.job() == "chief") continue;
    LookupResponse resp;
    s = ps->Lookup(LookupReq(who, {{"emb", KeyBytes({2})}}), &resp);
    EXPECT_EQ(s.code(), kDenied);
    EXPECT_THAT(s.message(), HasSubstr("lookup from"));
  }
  LookupResponse resp;
  EXPECT_EQ(ps->Lookup(LookupReq(Chief(5), {{"emb", KeyBytes({2})}}), &resp).code(), kDenied);
  ASSERT_TRUE(Leave(ps.get(), Worker(1, 8), /*pause=*/false).ok());
  absl::Status s = PushSparse(ps.get(), Worker(1, 8), {g});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("which left the job"));
  EXPECT_THAT(Rows(ps.get(), "emb", {1}), ElementsAre(0.5f, 0.5f));
  EXPECT_EQ(Stats(ps.get()).tables(0).rows(), 1) << "the refused lookups made no row";
  ASSERT_TRUE(PushSparse(ps.get(), Worker(0, 7), {g}).ok());
  EXPECT_THAT(Rows(ps.get(), "emb", {1}), ElementsAre(-0.5f, -0.5f));
}

}  // namespace
}  // namespace pstrain
