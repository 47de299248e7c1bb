// Embedding tables through the client API against a real chief (--model external) and two real
// PS processes, the clients running in this process's threads: sync training with sparse
// gradients does not depend on how a step's batch is split over workers, and CreateTable is
// get-or-create on the chief, refusing a second definition that differs.
#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "client/client.h"
#include "external_cluster.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing.h"

namespace pstrain {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using namespace pstrain::testing;

constexpr int kDim = 4;
constexpr int kIds = 60;  // keys 0 .. kIds-1, two per example

// Example e of the data set: two keys (repeating within a batch) and a label.
uint64_t FirstKey(int64_t e) { return e % 37; }
uint64_t SecondKey(int64_t e) { return 37 + (e * 7) % 23; }
float Label(int64_t e) { return (e * 13) % 5 < 2 ? 1.f : 0.f; }

struct Model {
  float bias = 0;
  std::vector<float> rows;  // of keys 0 .. kIds-1
};

// Trains z = bias + <emb[k1], emb[k2]> with log loss as worker `task` of `workers`, each step
// on examples [step * workers * batch + task * batch, + batch), then reads the model after a
// barrier. Gradients go to PushSparse once per example and key: the client sums repeats.
absl::StatusOr<Model> Train(const std::string& chief, int task, int workers, int batch, int steps) {
  absl::StatusOr<std::unique_ptr<Client>> c =
      Client::Connect({.chief = chief, .task = task, .timeout = absl::Seconds(60)});
  if (!c.ok()) return c.status();
  Client& client = **c;
  absl::StatusOr<int> b = client.CreateVariable(
      {.name = "bias", .shape = {1}, .optimizer = OptimizerOptions{.learning_rate = 0.5}});
  if (!b.ok()) return b.status();
  absl::StatusOr<int> t =
      client.CreateTable({.name = "emb",
                          .dim = kDim,
                          .initializer = {.kind = "normal", .stddev = 0.5, .seed = 11},
                          .optimizer = OptimizerOptions{.name = "adagrad", .learning_rate = 0.3}});
  if (!t.ok()) return t.status();
  std::vector<const float*> values, rows;
  std::vector<Tensor> grads = {Tensor({1})};
  for (int s = 0; s < steps; ++s) {
    const int64_t first = (int64_t{s} * workers + task) * batch;
    std::vector<uint64_t> distinct, keys;
    for (int64_t e = first; e < first + batch; ++e) {
      for (uint64_t k : {FirstKey(e), SecondKey(e)}) {
        if (std::find(distinct.begin(), distinct.end(), k) == distinct.end()) {
          distinct.push_back(k);
        }
      }
    }
    if (absl::Status st = client.Pull(&values); !st.ok()) return st;
    if (absl::Status st = client.Lookup({distinct}, &rows); !st.ok()) return st;
    auto row = [&](uint64_t k) {
      return rows[0] + kDim * (std::find(distinct.begin(), distinct.end(), k) - distinct.begin());
    };
    std::vector<float> sparse;
    grads[0].data()[0] = 0;
    for (int64_t e = first; e < first + batch; ++e) {
      const float *u = row(FirstKey(e)), *v = row(SecondKey(e));
      double z = values[0][0];
      for (int d = 0; d < kDim; ++d) z += u[d] * v[d];
      const float g = static_cast<float>((1 / (1 + std::exp(-z)) - Label(e)) / batch);
      grads[0].data()[0] += g;
      keys.push_back(FirstKey(e));
      for (int d = 0; d < kDim; ++d) sparse.push_back(g * v[d]);
      keys.push_back(SecondKey(e));
      for (int d = 0; d < kDim; ++d) sparse.push_back(g * u[d]);
    }
    if (absl::Status st = client.Push(grads, batch); !st.ok()) return st;
    if (absl::Status st = client.PushSparse({keys}, {sparse}); !st.ok()) return st;
  }
  if (absl::Status st = client.Barrier("trained"); !st.ok()) return st;
  std::vector<uint64_t> all(kIds);
  for (int k = 0; k < kIds; ++k) all[k] = k;
  if (absl::Status st = client.Pull(&values); !st.ok()) return st;
  if (absl::Status st = client.Lookup({all}, &rows); !st.ok()) return st;
  Model m{values[0][0], std::vector<float>(rows[0], rows[0] + kIds * kDim)};
  if (absl::Status st = client.Done(); !st.ok()) return st;
  return m;
}

// Runs a sync job of `workers` client threads; the model worker 0 read at the end.
Model SyncJob(const std::string& tag, int workers, int batch, int steps) {
  ExternalCluster cluster(tag, 2, workers);
  cluster.Start({"--mode", "sync"});
  std::vector<absl::StatusOr<Model>> models(workers);
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] { models[w] = Train(cluster.chief(), w, workers, batch, steps); });
  }
  for (std::thread& t : threads) t.join();
  for (int w = 0; w < workers; ++w) EXPECT_TRUE(models[w].ok()) << models[w].status();
  const Result r = cluster.Finish();
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(cluster.AllEnded());
  return models[0].ok() ? *models[0] : Model{};
}

TEST(TablesCluster, SyncWithTwoWorkersOfBatchBEqualsOneWorkerOfBatchTwoB) {
  constexpr int kBatch = 8, kSteps = 25;
  const Model two = SyncJob(std::to_string(getpid()) + "-two", 2, kBatch, kSteps);
  const Model one = SyncJob(std::to_string(getpid()) + "-one", 1, 2 * kBatch, kSteps);
  ASSERT_EQ(two.rows.size(), static_cast<size_t>(kIds * kDim));
  ASSERT_EQ(one.rows.size(), two.rows.size());
  EXPECT_NEAR(two.bias, one.bias, 1e-5);
  EXPECT_NE(one.bias, 0.f);  // it trained
  for (size_t i = 0; i < one.rows.size(); ++i) {
    ASSERT_NEAR(two.rows[i], one.rows[i], 1e-5) << "key " << i / kDim << " element " << i % kDim;
  }
}

// Sync mode: a step of a table applies once every worker's sparse gradient arrived on every PS,
// so a worker whose batches touch no key still pushes (no keys) and the steps go on.
TEST(TablesCluster, SyncStepsGoOnWhenAWorkerTouchesNoKey) {
  constexpr int kSteps = 10;
  ExternalCluster cluster(std::to_string(getpid()) + "-nokeys", 2, 2);
  cluster.Start({"--mode", "sync"});
  std::vector<absl::Status> results(2);
  std::vector<float> row_after(kDim);
  auto work = [&](int task) -> absl::Status {
    absl::StatusOr<std::unique_ptr<Client>> c =
        Client::Connect({.chief = cluster.chief(), .task = task, .timeout = absl::Seconds(60)});
    if (!c.ok()) return c.status();
    Client& client = **c;
    absl::StatusOr<int> t = client.CreateTable(
        {.name = "emb", .dim = kDim, .optimizer = OptimizerOptions{.learning_rate = 1}});
    if (!t.ok()) return t.status();
    // Worker 0 pushes a gradient of 2 for key 7 each step, worker 1 none: the average is 1.
    const std::vector<uint64_t> keys =
        task == 0 ? std::vector<uint64_t>{7} : std::vector<uint64_t>{};
    const std::vector<float> grads(keys.size() * kDim, 2.f);
    std::vector<const float*> rows;
    for (int s = 0; s < kSteps; ++s) {
      if (absl::Status st = client.Lookup({keys}, &rows); !st.ok()) return st;
      if (absl::Status st = client.PushSparse({keys}, {grads}); !st.ok()) return st;
    }
    if (absl::Status st = client.Barrier("trained"); !st.ok()) return st;
    if (absl::Status st = client.Lookup({{7}}, &rows); !st.ok()) return st;
    if (task == 0) row_after.assign(rows[0], rows[0] + kDim);
    return client.Done();
  };
  std::thread other([&] { results[1] = work(1); });
  results[0] = work(0);
  other.join();
  for (int w = 0; w < 2; ++w) EXPECT_TRUE(results[w].ok()) << "worker " << w << ": " << results[w];
  // Zeros, then kSteps steps of SGD at rate 1 on the average gradient 1.
  EXPECT_THAT(row_after, ::testing::Each(-float(kSteps)));
  EXPECT_EQ(cluster.Finish().exit_code, 0);
}

TEST(TablesCluster, CreateTableIsGetOrCreateAndNamesAFieldThatDiffers) {
  ExternalCluster cluster(std::to_string(getpid()) + "-create", 2, 2);
  cluster.Start({});
  absl::StatusOr<std::unique_ptr<Client>> late;
  std::thread connect_late([&] { late = Client::Connect({.chief = cluster.chief(), .task = 1}); });
  absl::StatusOr<std::unique_ptr<Client>> first =
      Client::Connect({.chief = cluster.chief(), .task = 0});
  connect_late.join();
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(late.ok()) << late.status();
  Client& a = **first;
  Client& b = **late;

  const TableOptions emb = {
      .name = "emb", .dim = 8, .initializer = {.kind = "normal", .stddev = 1, .seed = 5}};
  EXPECT_EQ(a.CreateTable(emb).value_or(-1), 0);
  EXPECT_EQ(a.CreateTable({.name = "wide", .dim = 1}).value_or(-1), 1);
  EXPECT_EQ(a.CreateTable(emb).value_or(-1), 0);
  // Another worker gets the same table; its own indices follow its own creation order.
  EXPECT_EQ(b.CreateTable(emb).value_or(-1), 0);

  TableOptions other_dim = emb;
  other_dim.dim = 16;
  absl::Status s = b.CreateTable(other_dim).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr("\"emb\""), HasSubstr("dim: 8 -> 16"))) << s;
  TableOptions other_lr = emb;
  other_lr.optimizer = OptimizerOptions{.name = "adagrad", .learning_rate = 0.1};
  s = b.CreateTable(other_lr).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("optimizer.learning_rate: 0.05 -> 0.1")) << s;
  // A definition the PS refuse names the PS and the field.
  s = b.CreateTable({.name = "bad", .dim = 4, .initializer = {.kind = "glorot_uniform"}}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr("ps:0"), HasSubstr("glorot_uniform"))) << s;
  EXPECT_EQ(b.CreateTable({.name = "", .dim = 4}).status().code(),
            absl::StatusCode::kInvalidArgument);

  // Both see the one table: a row b looks up is the row a reads.
  std::vector<const float*> ra, rb;
  ASSERT_TRUE(a.Lookup({{42}, {}}, &ra).ok());
  ASSERT_TRUE(b.Lookup({{42}}, &rb).ok());
  EXPECT_EQ(std::vector<float>(ra[0], ra[0] + 8), std::vector<float>(rb[0], rb[0] + 8));
  EXPECT_TRUE(a.Done().ok());
  EXPECT_TRUE(b.Done().ok());
  EXPECT_EQ(cluster.Finish().exit_code, 0);
}

}  // namespace
}  // namespace pstrain
