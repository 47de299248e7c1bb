// TableClient against real parameter servers serving gRPC in this process on 127.0.0.1: the same
// key reads the same first row whatever the number of PS, keys spread over the PS by their hash,
// rows come back in the caller's key order, repeated keys are summed before a push, batches past
// a request's limits are split, and errors name the table, the key and the PS.
#include <algorithm>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/table_client.h"
#include "common/keys.h"
#include "common/rpc.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "local_ps_testing.h"
#include "ps/ps.h"

namespace pstrain {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

using ps_testing::LocalPs;

TableDef Def(const std::string& name, int dim, const std::string& init = "normal") {
  TableDef d;
  d.set_name(name);
  d.set_dim(dim);
  d.mutable_initializer()->set_kind(init);
  d.mutable_initializer()->set_stddev(1.0);
  d.mutable_initializer()->set_low(-1.0);
  d.mutable_initializer()->set_high(1.0);
  d.mutable_initializer()->set_seed(7);
  d.mutable_optimizer()->set_name("sgd");
  d.mutable_optimizer()->set_learning_rate(1.0);
  return d;
}

class Cluster {
 public:
  explicit Cluster(int num_ps) {
    for (int t = 0; t < num_ps; ++t) {
      ps_.push_back(std::make_unique<LocalPs>(ps_testing::Consistency("async", 1, 1), t));
      EXPECT_TRUE(ps_.back()->status.ok()) << ps_.back()->status;
      addresses_.push_back(ps_.back()->address);
    }
  }
  // Creates the tables on every PS, as the chief does.
  void Create(const std::vector<TableDef>& defs) {
    CreateTablesRequest req;
    *req.mutable_sender() = MakeSender("chief", 0);
    for (const TableDef& d : defs) *req.add_tables() = d;
    for (const std::string& a : addresses_) {
      auto stub = ParameterServerService::NewStub(MakeChannel(a));
      std::unique_ptr<grpc::ClientContext> ctx = ContextWithTimeout(absl::Seconds(10), true);
      CreateTablesResponse resp;
      absl::Status s = FromGrpcStatus(stub->CreateTables(ctx.get(), req, &resp));
      ASSERT_TRUE(s.ok()) << s;
    }
  }
  std::unique_ptr<TableClient> Client(const std::vector<TableDef>& defs,
                                      TableRequestLimits limits = {},
                                      absl::Duration timeout = absl::Seconds(20)) const {
    std::vector<TableRef> refs;
    for (const TableDef& d : defs) refs.push_back({d.name(), d.dim()});
    return std::make_unique<TableClient>(addresses_, refs, MakeSender("worker", 0), timeout,
                                         limits);
  }
  // The stats of table `name` on PS `t` (a default TableStats if it has none).
  TableStats Stats(int t, const std::string& name) const {
    auto stub = ParameterServerService::NewStub(MakeChannel(addresses_[t]));
    std::unique_ptr<grpc::ClientContext> ctx = ContextWithTimeout(absl::Seconds(10), true);
    StatsRequest req;
    *req.mutable_sender() = MakeSender("chief", 0);
    StatsResponse resp;
    absl::Status s = FromGrpcStatus(stub->Stats(ctx.get(), req, &resp));
    EXPECT_TRUE(s.ok()) << s;
    for (const TableStats& ts : resp.tables()) {
      if (ts.name() == name) return ts;
    }
    return {};
  }
  LocalPs& ps(int t) { return *ps_[t]; }
  const std::vector<std::string>& addresses() const { return addresses_; }

 private:
  std::vector<std::unique_ptr<LocalPs>> ps_;
  std::vector<std::string> addresses_;
};

std::vector<uint64_t> SomeKeys(int n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> keys;
  for (int i = 0; i < n; ++i) keys.push_back(i % 2 == 0 ? rng() : static_cast<uint64_t>(i));
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  std::shuffle(keys.begin(), keys.end(), rng);
  return keys;
}

TEST(TableClient, SameKeyGetsTheSameFirstRowWithOneTwoOrThreePs) {
  const std::vector<TableDef> defs = {Def("emb", 8), Def("wide", 1, "uniform")};
  const std::vector<std::vector<uint64_t>> keys = {SomeKeys(500, 1), SomeKeys(300, 2)};
  std::vector<std::vector<std::vector<float>>> by_num_ps;
  for (int num_ps = 1; num_ps <= 3; ++num_ps) {
    SCOPED_TRACE(absl::StrCat(num_ps, " ps"));
    Cluster c(num_ps);
    c.Create(defs);
    std::unique_ptr<TableClient> client = c.Client(defs);
    std::vector<std::vector<float>> rows;
    absl::Status s = client->Lookup(keys, &rows);
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_EQ(rows.size(), 2u);
    ASSERT_EQ(rows[0].size(), keys[0].size() * 8);
    ASSERT_EQ(rows[1].size(), keys[1].size());
    by_num_ps.push_back(rows);
  }
  EXPECT_EQ(by_num_ps[0], by_num_ps[1]);
  EXPECT_EQ(by_num_ps[0], by_num_ps[2]);
  // The rows are drawn, not constant: two keys' rows differ.
  EXPECT_NE(std::vector<float>(by_num_ps[0][0].begin(), by_num_ps[0][0].begin() + 8),
            std::vector<float>(by_num_ps[0][0].begin() + 8, by_num_ps[0][0].begin() + 16));
}

TEST(TableClient, KeysLiveOnThePsTheirHashNames) {
  constexpr int kNumPs = 3;
  Cluster c(kNumPs);
  const std::vector<TableDef> defs = {Def("emb", 4)};
  c.Create(defs);
  const std::vector<uint64_t> keys = SomeKeys(3000, 3);
  std::vector<std::vector<float>> rows;
  ASSERT_TRUE(c.Client(defs)->Lookup({keys}, &rows).ok());
  for (int t = 0; t < kNumPs; ++t) {
    const int64_t expected = std::count_if(keys.begin(), keys.end(),
                                           [&](uint64_t k) { return PsOfKey(k, kNumPs) == t; });
    EXPECT_GT(expected, 800);
    const TableStats st = c.Stats(t, "emb");
    EXPECT_EQ(st.rows(), expected) << "ps:" << t;
    EXPECT_EQ(st.keys_looked_up(), expected) << "ps:" << t;
  }
}

// With zeros, SGD at rate 1 and a gradient of (key, -key) for each key, a row reads (-key,
// key): every row tells which key it belongs to.
TEST(TableClient, RowsComeBackInKeyOrderAndPushesReachTheirRows) {
  Cluster c(3);
  const std::vector<TableDef> defs = {Def("a", 2, "zeros"), Def("b", 3, "zeros")};
  c.Create(defs);
  std::unique_ptr<TableClient> client = c.Client(defs);
  std::vector<uint64_t> ka(400), kb(250);
  std::iota(ka.begin(), ka.end(), 1);
  std::iota(kb.begin(), kb.end(), 1000);
  std::vector<std::vector<float>> rows;
  ASSERT_TRUE(client->Lookup({ka, kb}, &rows).ok());
  std::vector<float> ga, gb;
  for (uint64_t k : ka) ga.insert(ga.end(), {float(k), -float(k)});
  for (uint64_t k : kb) gb.insert(gb.end(), {float(k), 0.f, 1.f});
  absl::Status s = client->Push({ka, kb}, {ga, gb});
  ASSERT_TRUE(s.ok()) << s;

  std::mt19937 rng(5);
  std::shuffle(ka.begin(), ka.end(), rng);
  std::shuffle(kb.begin(), kb.end(), rng);
  ASSERT_TRUE(client->Lookup({ka, kb}, &rows).ok());
  for (size_t i = 0; i < ka.size(); ++i) {
    ASSERT_EQ(rows[0][2 * i], -float(ka[i])) << "key " << ka[i];
    ASSERT_EQ(rows[0][2 * i + 1], float(ka[i])) << "key " << ka[i];
  }
  for (size_t i = 0; i < kb.size(); ++i) {
    ASSERT_EQ(rows[1][3 * i], -float(kb[i])) << "key " << kb[i];
    ASSERT_EQ(rows[1][3 * i + 2], -1.f) << "key " << kb[i];
  }
  EXPECT_EQ(client->min_version_read(), 1u);  // one update of each table on each PS
}

TEST(TableClient, RepeatedKeysAreSummedBeforeTheyAreSent) {
  Cluster c(2);
  const std::vector<TableDef> defs = {Def("emb", 1, "zeros")};
  c.Create(defs);
  std::unique_ptr<TableClient> client = c.Client(defs);
  std::vector<std::vector<float>> rows;
  ASSERT_TRUE(client->Lookup({{5, 9, 11}}, &rows).ok());
  // The PS refuses a repeated key, so this push goes through only if the client summed them.
  absl::Status s = client->Push({{5, 9, 5, 11, 5}}, {{1, 10, 2, 100, 4}});
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_TRUE(client->Lookup({{11, 5, 9}}, &rows).ok());
  EXPECT_EQ(rows[0], (std::vector<float>{-100, -7, -10}));
  EXPECT_EQ(c.Stats(0, "emb").gradient_rows_applied() + c.Stats(1, "emb").gradient_rows_applied(),
            3);
}

TEST(TableClient, ARepeatedKeyInALookupIsRefusedBeforeAnythingIsSent) {
  Cluster c(2);
  const std::vector<TableDef> defs = {Def("emb", 4)};
  c.Create(defs);
  std::vector<std::vector<float>> rows;
  absl::Status s = c.Client(defs)->Lookup({{3, 8, 77, 8}}, &rows);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr("\"emb\""), HasSubstr("key 8")));
  EXPECT_EQ(c.Stats(0, "emb").keys_looked_up() + c.Stats(1, "emb").keys_looked_up(), 0);
}

TEST(TableClient, WrongShapesAreRefusedNamingTheTable) {
  Cluster c(1);
  const std::vector<TableDef> defs = {Def("emb", 4)};
  c.Create(defs);
  std::unique_ptr<TableClient> client = c.Client(defs);
  std::vector<std::vector<float>> rows;
  EXPECT_TRUE(absl::IsInvalidArgument(client->Lookup({{1}, {2}}, &rows)));
  ASSERT_TRUE(client->Lookup({{1, 2}}, &rows).ok());
  absl::Status s = client->Push({{1, 2}}, {std::vector<float>(7)});
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr("\"emb\""), HasSubstr("dim 4")));
}

TEST(TableClient, ErrorsOfThePsNameTheTableTheKeyAndThePs) {
  Cluster c(2);
  const std::vector<TableDef> defs = {Def("emb", 4)};
  c.Create(defs);
  std::unique_ptr<TableClient> client = c.Client(defs);
  std::vector<std::vector<float>> rows;
  ASSERT_TRUE(client->Lookup({{1, 2, 3}}, &rows).ok());
  // A push for a key never looked up changes nothing on the PS that holds the key (each PS
  // applies its part of a push whole or not at all).
  const uint64_t never = 123456789;
  absl::Status s = client->Push({{1, never}}, {std::vector<float>(8, 1.f)});
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr("PushSparse at ps:" + std::to_string(PsOfKey(never, 2))),
                                 HasSubstr("'emb'"), HasSubstr("key 123456789")));
  EXPECT_EQ(c.Stats(PsOfKey(never, 2), "emb").version(), 0u);

  // A client that believes in another dim learns it from the rows.
  const std::vector<TableDef> wrong = {Def("emb", 8)};
  s = c.Client(wrong)->Lookup({{1, 2, 3}}, &rows);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr("\"emb\" has rows of 4 floats"), HasSubstr("dim 8")));
}

TEST(TableClient, ABatchPastTheRequestLimitsIsSplitNotRefused) {
  Cluster c(2);
  const std::vector<TableDef> defs = {Def("small", 1, "zeros"), Def("wide", 16, "zeros")};
  c.Create(defs);
  // At most 64 keys of one table, and 2 KB, per request: 1000 keys take many requests per PS.
  std::unique_ptr<TableClient> client = c.Client(defs, {.max_keys = 64, .max_payload_bytes = 2048});
  std::vector<uint64_t> keys(1000);
  std::iota(keys.begin(), keys.end(), 1);
  std::vector<std::vector<float>> rows;
  absl::Status s = client->Lookup({keys, keys}, &rows);
  ASSERT_TRUE(s.ok()) << s;
  std::vector<float> g1(keys.begin(), keys.end()), g16;
  for (uint64_t k : keys) g16.insert(g16.end(), 16, float(k));
  s = client->Push({keys, keys}, {g1, g16});
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_TRUE(client->Lookup({keys, keys}, &rows).ok());
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ(rows[0][i], -float(keys[i]));
    ASSERT_EQ(rows[1][16 * i + 15], -float(keys[i]));
  }
  for (int t = 0; t < 2; ++t) EXPECT_GT(c.Stats(t, "wide").version(), 1u) << "ps:" << t;
}

TEST(TableClient, APsThatIsDownIsNamed) {
  Cluster c(2);
  const std::vector<TableDef> defs = {Def("emb", 4)};
  c.Create(defs);
  std::unique_ptr<TableClient> client = c.Client(defs, {}, absl::Seconds(2));
  std::vector<std::vector<float>> rows;
  ASSERT_TRUE(client->Lookup({SomeKeys(100, 9)}, &rows).ok());
  const std::string gone = c.addresses()[1];
  c.ps(1).StopServing();
  absl::Status s = client->Lookup({SomeKeys(100, 9)}, &rows);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), AllOf(HasSubstr("Lookup"), HasSubstr("ps:1"), HasSubstr(gone)));
}

}  // namespace
}  // namespace pstrain
