// EmbeddingTable (src/ps/embedding_table.h): validation, initial rows, lookups and updates, the
// sync accumulator, CheckPush and concurrent use (admission, eviction and memory are in
// ps_embedding_eviction_test.cc). Behaviour is checked from rows and from Stats().
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "common/keys.h"
#include "embedding_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/embedding_table.h"

namespace pstrain {
namespace {

using namespace embedding_testing;
using ::testing::HasSubstr;

// ---- Create ---------------------------------------------------------------------------------

TEST(EmbeddingTableCreate, RefusesEachBadFieldNamingIt) {
  struct Case {
    const char* what;
    void (*change)(TableDef*);
    const char* message;
  };
  const Case cases[] = {
      {"empty name", [](TableDef* d) { d->set_name(""); }, "name is empty"},
      {"long name", [](TableDef* d) { d->set_name(std::string(2000, 'x')); }, "name of 2000"},
      {"dim 0", [](TableDef* d) { d->set_dim(0); }, "dim 0 must be in [1, 65536]"},
      {"dim too big", [](TableDef* d) { d->set_dim(65537); }, "dim 65537"},
      {"unknown init", [](TableDef* d) { d->mutable_initializer()->set_kind("xavier"); },
       "initializer.kind 'xavier' is unknown"},
      {"glorot", [](TableDef* d) { d->mutable_initializer()->set_kind("glorot_uniform"); },
       "initializer.kind 'glorot_uniform'"},
      {"uniform low >= high", [](TableDef* d) { d->mutable_initializer()->set_low(0.5); },
       "initializer.low 0.5 must be below initializer.high 0.5"},
      {"uniform nan", [](TableDef* d) { d->mutable_initializer()->set_high(std::nan("")); },
       "initializer.high nan must be finite"},
      {"normal stddev",
       [](TableDef* d) {
         d->mutable_initializer()->set_kind("normal");
         d->mutable_initializer()->set_stddev(0);
       },
       "initializer.stddev 0 must be > 0"},
      {"constant inf",
       [](TableDef* d) {
         d->mutable_initializer()->set_kind("constant");
         d->mutable_initializer()->set_value(INFINITY);
       },
       "initializer.value inf"},
      {"momentum", [](TableDef* d) { d->mutable_optimizer()->set_name("momentum"); },
       "optimizer.name 'momentum' is not supported for tables"},
      {"rmsprop", [](TableDef* d) { d->mutable_optimizer()->set_name("rmsprop"); },
       "optimizer.name 'rmsprop' is not supported"},
      {"unknown optimizer", [](TableDef* d) { d->mutable_optimizer()->set_name("lion"); },
       "optimizer.name"},
      {"lr", [](TableDef* d) { d->mutable_optimizer()->set_learning_rate(-1); },
       "optimizer.learning_rate"},
      {"beta1", [](TableDef* d) { d->mutable_optimizer()->set_beta1(1.5); }, "optimizer.beta1"},
      {"admit_after", [](TableDef* d) { d->set_admit_after(-1); }, "admit_after -1 must be >= 0"},
      {"evict_after_steps", [](TableDef* d) { d->set_evict_after_steps(-2); },
       "evict_after_steps -2 must be >= 0"},
      {"max_rows", [](TableDef* d) { d->set_max_rows(-3); }, "max_rows -3 must be >= 0"},
      {"max_bytes", [](TableDef* d) { d->set_max_bytes(-4); }, "max_bytes -4 must be >= 0"},
      {"max_bytes too small", [](TableDef* d) { d->set_max_bytes(100); },
       "max_bytes 100 cannot hold one row"},
  };
  for (const Case& c : cases) {
    TableDef def = Def("emb", 8);
    c.change(&def);
    absl::StatusOr<std::unique_ptr<EmbeddingTable>> t = EmbeddingTable::Create(def);
    ASSERT_FALSE(t.ok()) << c.what;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_THAT(std::string(t.status().message()), HasSubstr(c.message)) << c.what;
    if (!def.name().empty() && def.name().size() < 100) {
      EXPECT_THAT(std::string(t.status().message()), HasSubstr("table 'emb'")) << c.what;
    }
  }
}

TEST(EmbeddingTableCreate, AcceptsEveryRowInitializerAndOptimizer) {
  for (const char* opt : {"sgd", "adagrad", "adam", "ftrl"}) {
    for (const char* kind : {"", "zeros", "constant", "uniform", "normal", "truncated_normal"}) {
      TableDef def = Def("t", 4, opt, 0.1);
      def.mutable_initializer()->set_kind(kind);
      def.mutable_initializer()->set_stddev(0.1);
      absl::StatusOr<std::unique_ptr<EmbeddingTable>> t = EmbeddingTable::Create(def);
      EXPECT_TRUE(t.ok()) << opt << " " << kind << ": " << t.status();
    }
  }
  TableDef huge_caps = Def("t", 4);
  huge_caps.set_max_rows(std::numeric_limits<int64_t>::max());
  huge_caps.set_max_bytes(std::numeric_limits<int64_t>::max());
  huge_caps.set_evict_after_steps(std::numeric_limits<int64_t>::max());
  auto huge = Make(huge_caps);
  Lookup(*huge, {1, 2, 3});
  Apply(*huge, {1, 2, 3}, 1.0f);
  EXPECT_EQ(huge->Stats().rows(), 3);
  EXPECT_EQ(huge->Stats().gradient_rows_applied(), 3);
  EXPECT_EQ(Make(Def("t", 16, "sgd"))->floats_per_row(), 16);
  EXPECT_EQ(Make(Def("t", 16, "adagrad"))->floats_per_row(), 32);
  EXPECT_EQ(Make(Def("t", 16, "adam"))->floats_per_row(), 48);
  EXPECT_EQ(Make(Def("t", 16, "ftrl"))->floats_per_row(), 48);
}

// ---- Initial rows ---------------------------------------------------------------------------

TEST(EmbeddingTableInit, InitialRowsAreDeterministicAndFollowTheInitializer) {
  InitializerDef init;
  init.set_seed(42);
  std::vector<float> a(1000), b(1000);
  for (const char* kind : {"uniform", "normal", "truncated_normal"}) {
    init.set_kind(kind);
    init.set_low(-0.25);
    init.set_high(0.75);
    init.set_mean(1.0);
    init.set_stddev(0.5);
    InitialRow(init, 12345, 1000, a.data());
    InitialRow(init, 12345, 1000, b.data());
    EXPECT_EQ(a, b) << kind;
    InitialRow(init, 12346, 1000, b.data());
    EXPECT_NE(a, b) << kind << ": another key, another row";
    const double mean = std::accumulate(a.begin(), a.end(), 0.0) / 1000;
    double var = 0;
    for (float x : a) var += (x - mean) * (x - mean);
    const double sd = std::sqrt(var / 1000);
    if (std::string(kind) == "uniform") {
      for (float x : a) ASSERT_TRUE(x >= -0.25f && x < 0.75f) << x;
      EXPECT_NEAR(mean, 0.25, 0.03);
      EXPECT_NEAR(sd, 1.0 / std::sqrt(12.0), 0.03);
    } else if (std::string(kind) == "normal") {
      EXPECT_NEAR(mean, 1.0, 0.05);
      EXPECT_NEAR(sd, 0.5, 0.04);
    } else {
      for (float x : a) ASSERT_TRUE(x >= 0.0f && x <= 2.0f) << x;  // mean +- 2 stddev
      EXPECT_NEAR(mean, 1.0, 0.05);
      EXPECT_NEAR(sd, 0.5 * 0.8796, 0.04);  // the stddev of a normal truncated at 2 sigma
    }
  }
  init.set_kind("constant");
  init.set_value(0.5);
  InitialRow(init, 1, 3, a.data());
  EXPECT_EQ(std::vector<float>(a.begin(), a.begin() + 3), std::vector<float>(3, 0.5f));
  init.set_kind("zeros");
  InitialRow(init, 1, 3, a.data());
  EXPECT_EQ(std::vector<float>(a.begin(), a.begin() + 3), std::vector<float>(3, 0.0f));
}

TEST(EmbeddingTableInit, TheSameKeyGetsTheSameRowWhateverTheShardingAndOrder) {
  // One table holding all keys, versus 2 and 3 tables holding the keys PsOfKey gives them and
  // touched in another order: the rows agree.
  const TableDef def = Def("emb", 8);
  std::vector<uint64_t> keys(300);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = MixKey(i) >> (i % 40);
  auto one = Make(def);
  const std::vector<float> all = Lookup(*one, keys);
  for (int num_ps : {2, 3}) {
    std::vector<std::unique_ptr<EmbeddingTable>> shards;
    std::vector<std::vector<uint64_t>> by_ps(num_ps);
    for (int p = 0; p < num_ps; ++p) shards.push_back(Make(def));
    for (auto it = keys.rbegin(); it != keys.rend(); ++it)
      by_ps[PsOfKey(*it, num_ps)].push_back(*it);
    for (int p = 0; p < num_ps; ++p) {
      const std::vector<float> rows = Lookup(*shards[p], by_ps[p]);
      for (size_t i = 0; i < by_ps[p].size(); ++i) {
        const size_t at = std::find(keys.begin(), keys.end(), by_ps[p][i]) - keys.begin();
        ASSERT_EQ(Slice(rows, i, 8), Slice(all, at, 8)) << "key " << by_ps[p][i] << " " << num_ps;
      }
    }
  }
  EXPECT_EQ(Slice(all, 0, 8), Initial(def, keys[0]));
}

// ---- Lookup and Apply -----------------------------------------------------------------------

TEST(EmbeddingTable, LookupCreatesRowsAndSgdUpdatesThem) {
  const TableDef def = Def("emb", 4, "sgd", 0.5);
  auto t = Make(def);
  const std::vector<float> rows = Lookup(*t, {10, 20});
  EXPECT_EQ(Slice(rows, 0, 4), Initial(def, 10));
  EXPECT_EQ(Slice(rows, 1, 4), Initial(def, 20));
  TableStats s = t->Stats();
  EXPECT_EQ(s.rows(), 2);
  EXPECT_EQ(s.admitted(), 2);
  EXPECT_EQ(s.keys_looked_up(), 2);
  EXPECT_EQ(s.version(), 0u);

  const std::vector<uint64_t> keys = {20};
  const std::vector<float> g = {1, 2, 3, 4};
  EXPECT_EQ(t->Apply(keys.data(), 1, g.data()).value(), 1u);
  std::vector<float> want = Initial(def, 20);
  for (int i = 0; i < 4; ++i) want[i] += -0.5f * g[i];
  EXPECT_EQ(t->Row(20)->row, want);
  EXPECT_EQ(t->Row(10)->row, Initial(def, 10));
  EXPECT_EQ(Slice(Lookup(*t, {20}), 0, 4), want);
  EXPECT_FALSE(t->Row(30).has_value());

  s = t->Stats();
  EXPECT_EQ(s.name(), "emb");
  EXPECT_EQ(s.dim(), 4);
  EXPECT_EQ(s.version(), 1u);
  EXPECT_EQ(s.rows(), 2);
  EXPECT_EQ(s.keys_looked_up(), 3);
  EXPECT_EQ(s.gradient_rows_applied(), 1);
  EXPECT_EQ(s.payload_bytes_per_row(), 16);
  EXPECT_GT(s.bytes(), 2 * 16);
  EXPECT_EQ(t->version(), 1u);

  // A batch of held and new keys (served again from the start once a new key shows up).
  const std::vector<float> mixed = Lookup(*t, {20, 10, 30, 40});
  EXPECT_EQ(Slice(mixed, 0, 4), want);
  EXPECT_EQ(Slice(mixed, 1, 4), Initial(def, 10));
  EXPECT_EQ(Slice(mixed, 2, 4), Initial(def, 30));
  EXPECT_EQ(Slice(mixed, 3, 4), Initial(def, 40));
  s = t->Stats();
  EXPECT_EQ(s.keys_looked_up(), 7);
  EXPECT_EQ(s.admitted(), 4);
  EXPECT_EQ(s.rows(), 4);
}

TEST(EmbeddingTable, AdagradFollowsTorchsRuleWithInitialAccumulator) {
  TableDef def = Def("emb", 3, "adagrad", 0.1);
  def.mutable_optimizer()->set_initial_accumulator_value(0.5);
  auto t = Make(def);
  Lookup(*t, {5});
  std::vector<float> w = Initial(def, 5), sum(3, 0.5f);
  const std::vector<uint64_t> keys = {5};
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> g = {0.5f * step + 0.1f, -1.0f, 2.0f};
    ASSERT_TRUE(t->Apply(keys.data(), 1, g.data()).ok());
    for (int i = 0; i < 3; ++i) {
      sum[i] += g[i] * g[i];
      w[i] += -0.1f * (g[i] / (std::sqrt(sum[i]) + 1e-10f));
    }
  }
  const auto row = t->Row(5);
  ASSERT_TRUE(row.has_value());
  for (int i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(row->row[i], w[i]);
  ASSERT_EQ(row->slots.size(), 1u);
  EXPECT_EQ(row->slots[0].first, "sum");
  for (int i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(row->slots[0].second[i], sum[i]);
}

TEST(EmbeddingTable, SlotsStartAsTheirOptimizerSays) {
  using Slots = std::vector<std::pair<std::string, std::vector<float>>>;
  struct Case {
    const char* optimizer;
    double initial_accumulator_value;
    Slots want;
  };
  const std::vector<float> z(2, 0.0f);
  const Case cases[] = {
      {"sgd", 0.5, {}},
      {"adagrad", 0.0, {{"sum", z}}},
      {"adagrad", 0.5, {{"sum", {0.5f, 0.5f}}}},
      // initial_accumulator_value is not Adam's: its moments start at zero.
      {"adam", 0.5, {{"exp_avg", z}, {"exp_avg_sq", z}, {"step", {0.0f}}}},
      {"ftrl", 0.0, {{"accumulator", {0.1f, 0.1f}}, {"linear", z}}},  // the default 0.1
      {"ftrl", 0.3, {{"accumulator", {0.3f, 0.3f}}, {"linear", z}}},
  };
  for (const Case& c : cases) {
    TableDef def = Def("emb", 2, c.optimizer, 0.1);
    def.mutable_optimizer()->set_initial_accumulator_value(c.initial_accumulator_value);
    auto t = Make(def);
    Lookup(*t, {4});
    const auto row = t->Row(4);
    ASSERT_TRUE(row.has_value());
    EXPECT_EQ(row->row, Initial(def, 4)) << c.optimizer;
    EXPECT_EQ(row->slots, c.want) << c.optimizer << " " << c.initial_accumulator_value;
  }
}

TEST(EmbeddingTable, ClipNormScalesTheWholePush) {
  TableDef def = Def("emb", 2, "sgd", 1.0);
  def.mutable_initializer()->set_kind("zeros");
  def.mutable_optimizer()->set_clip_norm(1.0);
  auto t = Make(def);
  Lookup(*t, {1, 2});
  const std::vector<uint64_t> keys = {1, 2};
  const std::vector<float> g = {3, 0, 0, 4};  // norm 5 over both rows
  ASSERT_TRUE(t->Apply(keys.data(), 2, g.data()).ok());
  EXPECT_EQ(t->Row(1)->row, (std::vector<float>{-0.6f, 0}));
  EXPECT_EQ(t->Row(2)->row, (std::vector<float>{0, -0.8f}));
}

TEST(EmbeddingTable, LearningRateFollowsTheScheduleOnTheTablesVersion) {
  TableDef def = Def("emb", 1, "sgd", 1.0);
  def.mutable_initializer()->set_kind("zeros");
  def.mutable_optimizer()->mutable_schedule()->set_kind("step");
  def.mutable_optimizer()->mutable_schedule()->set_step_size(1);
  def.mutable_optimizer()->mutable_schedule()->set_decay_rate(0.5);
  auto t = Make(def);
  Lookup(*t, {1});
  for (int i = 0; i < 3; ++i) Apply(*t, {1}, 1.0f);  // lr 1, 0.5, 0.25
  EXPECT_FLOAT_EQ(t->Row(1)->row[0], -1.75f);
}

TEST(EmbeddingTable, CheckPushNamesTableAndKeyOfARowNeverLookedUp) {
  auto t = Make(Def("clicks", 2));
  Lookup(*t, {1, 2});
  const std::vector<uint64_t> good = {1, 2}, bad = {1, 77};
  EXPECT_TRUE(t->CheckPush(good.data(), 2).ok());
  const absl::Status s = t->CheckPush(bad.data(), 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("table 'clicks': key 77 was never looked up"));
  EXPECT_EQ(t->version(), 0u);  // changes nothing

  // With admission or eviction a missing row is expected: the push is accepted and dropped.
  TableDef def = Def("clicks", 2);
  def.set_admit_after(3);
  auto admitting = Make(def);
  EXPECT_TRUE(admitting->CheckPush(bad.data(), 2).ok());
  def = Def("clicks", 2);
  def.set_max_rows(10);
  EXPECT_TRUE(Make(def)->CheckPush(bad.data(), 2).ok());
}

// ---- Sync accumulator -----------------------------------------------------------------------

TEST(EmbeddingTable, ApplyAccumulatedEqualsApplyOfTheMean) {
  for (const char* opt : {"sgd", "adagrad", "adam", "ftrl"}) {
    const TableDef def = Def("emb", 3, opt, 0.1);
    auto acc = Make(def), direct = Make(def);
    const std::vector<uint64_t> all = {1, 2, 3};
    Lookup(*acc, all);
    Lookup(*direct, all);
    // Three workers: key 1 from all, key 2 from two, key 3 from one.
    const std::vector<uint64_t> k0 = {1, 2}, k1 = {2, 1, 3}, k2 = {1};
    const std::vector<float> g0 = {1, 2, 3, 4, 5, 6}, g1 = {-1, 0.5f, 2, 7, 8, 9, 1, 1, 1},
                             g2 = {0.25f, 0.5f, 0.75f};
    acc->Accumulate(k0.data(), 2, g0.data());
    acc->Accumulate(k1.data(), 3, g1.data());
    acc->Accumulate(k2.data(), 1, g2.data());
    EXPECT_EQ(acc->version(), 0u);
    EXPECT_EQ(acc->ApplyAccumulated(3), 1u);
    std::vector<float> mean(9);
    for (int i = 0; i < 3; ++i) {
      mean[i] = (g0[i] + g1[3 + i] + g2[i]) / 3.0f;  // key 1, summed in arrival order
      mean[3 + i] = (g0[3 + i] + g1[i]) / 3.0f;      // key 2
      mean[6 + i] = g1[6 + i] / 3.0f;                // key 3
    }
    ASSERT_TRUE(direct->Apply(all.data(), 3, mean.data()).ok());
    for (uint64_t k : all) {
      EXPECT_EQ(acc->Row(k)->row, direct->Row(k)->row) << opt << " key " << k;
      EXPECT_EQ(acc->Row(k)->slots, direct->Row(k)->slots) << opt << " key " << k;
    }
    EXPECT_EQ(acc->ApplyAccumulated(3), 2u) << "an empty step still counts";
    EXPECT_EQ(acc->Row(1)->row, direct->Row(1)->row);
  }
}

// ---- Concurrency ----------------------------------------------------------------------------

TEST(EmbeddingTableConcurrency, ConcurrentLookupsAndUpdatesLoseNothing) {
  TableDef def = Def("emb", 4, "sgd", 1.0);
  def.mutable_initializer()->set_kind("constant");
  def.mutable_initializer()->set_value(0.0);
  auto t = Make(def);
  constexpr int kThreads = 4, kRounds = 2000;
  std::vector<std::thread> threads;
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&t, th] {
      std::vector<uint64_t> keys(8);
      std::vector<float> out(8 * 4), grads(8 * 4, 1.0f);
      for (int r = 0; r < kRounds; ++r) {
        // Keys 0..15, each thread a sliding window of 8: heavy overlap.
        for (int i = 0; i < 8; ++i) keys[i] = (th + r + i) % 16;
        t->Lookup(keys.data(), 8, out.data());
        EXPECT_TRUE(t->Apply(keys.data(), 8, grads.data()).ok());
      }
    });
  }
  for (std::thread& th : threads) th.join();
  float total = 0;
  for (uint64_t k = 0; k < 16; ++k) {
    const auto row = t->Row(k);
    ASSERT_TRUE(row.has_value());
    for (float x : row->row) EXPECT_EQ(x, row->row[0]) << k;
    total += -row->row[0];
  }
  EXPECT_EQ(total, kThreads * kRounds * 8.0f);
  EXPECT_EQ(t->version(), uint64_t{kThreads * kRounds});
  EXPECT_EQ(t->Stats().gradient_rows_applied(), kThreads * kRounds * 8);
}

// A lookup never sees half an update: every update moves all rows of the batch together, so a
// concurrent lookup of the batch reads one value everywhere, matching the version it returns.
TEST(EmbeddingTableConcurrency, ALookupSeesWholeUpdates) {
  TableDef def = Def("emb", 4, "sgd", 1.0);
  def.mutable_initializer()->set_kind("zeros");
  auto t = Make(def);
  std::vector<uint64_t> keys(2000);
  std::iota(keys.begin(), keys.end(), 1);
  Lookup(*t, keys);
  constexpr int kUpdates = 300;
  std::thread writer([&] {
    for (int u = 0; u < kUpdates; ++u) Apply(*t, keys, 1.0f);
  });
  std::vector<float> out(keys.size() * 4);
  int torn = 0, mismatched = 0;
  for (uint64_t seen = 0; seen < kUpdates;) {
    seen = t->Lookup(keys.data(), static_cast<int64_t>(keys.size()), out.data());
    for (float x : out) torn += x != out[0];
    mismatched += out[0] != -static_cast<float>(seen);
  }
  writer.join();
  EXPECT_EQ(torn, 0);
  EXPECT_EQ(mismatched, 0);
}

TEST(EmbeddingTableConcurrency, ConcurrentAccumulatesSumEveryGradient) {
  TableDef def = Def("emb", 2, "sgd", 1.0);
  def.mutable_initializer()->set_kind("zeros");
  auto t = Make(def);
  const std::vector<uint64_t> keys = {1, 2, 3};
  Lookup(*t, keys);
  constexpr int kThreads = 4, kRounds = 500;
  std::vector<std::thread> threads;
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&t, &keys] {
      const std::vector<float> grads(6, 1.0f);
      for (int r = 0; r < kRounds; ++r) t->Accumulate(keys.data(), 3, grads.data());
    });
  }
  for (std::thread& th : threads) th.join();
  t->ApplyAccumulated(kThreads);  // the mean: kRounds per element
  for (uint64_t k : keys) EXPECT_EQ(t->Row(k)->row, std::vector<float>(2, -kRounds)) << k;
}

}  // namespace
}  // namespace pstrain
