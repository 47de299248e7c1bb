// Sync training with n workers of batch b gives the parameters of one worker with batch n*b over
// the same examples: real PS servers on 127.0.0.1, sharded variables, the fan-out client.
#include <random>
#include <thread>

#include "client/ps_client.h"
#include "common/rpc.h"
#include "common/tensor_codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "local_ps_testing.h"
#include "model/model.h"
#include "ps/ps.h"

namespace pstrain {
namespace {

using ps_testing::Consistency;
using ps_testing::LocalPs;

Sender Worker(int task) {
  Sender s = MakeSender("worker", task);
  return s;
}

// The MLP's variables, the first kernel split in two row shards over the two PS.
std::vector<VariableRef> Variables(const Mlp& model) {
  std::vector<VariableRef> vars;
  for (size_t i = 0; i < model.params().size(); ++i) {
    const ParamSpec& p = model.params()[i];
    VariableRef v{p.name, p.shape, {}};
    if (i == 0) {
      const int64_t half = p.shape[0] / 2;
      v.shards = {{p.name + "/part_0", 0, 0, half}, {p.name + "/part_1", 1, half, p.shape[0]}};
    } else {
      v.shards = {{p.name, static_cast<int>(i % 2), 0, p.shape.empty() ? 1 : p.shape[0]}};
    }
    vars.push_back(std::move(v));
  }
  return vars;
}

void CreateOn(std::vector<LocalPs*> ps, const Mlp& model, const OptimizerConfig& opt) {
  const std::vector<Tensor> init = model.Initialize(7);
  const std::vector<VariableRef> vars = Variables(model);
  std::vector<CreateVariablesRequest> reqs(ps.size());
  for (size_t i = 0; i < vars.size(); ++i) {
    const int64_t row = NumElements(vars[i].shape) / vars[i].shape[0];
    for (const ShardRef& s : vars[i].shards) {
      VariableDef* def = reqs[s.ps_task].add_variables();
      def->set_name(s.name);
      std::vector<int64_t> shape = vars[i].shape;
      shape[0] = s.row_end - s.row_begin;
      EncodeTensor(shape, init[i].data() + s.row_begin * row, def->mutable_initial_value());
      *def->mutable_optimizer() = opt;
    }
  }
  for (size_t t = 0; t < ps.size(); ++t) {
    ASSERT_TRUE(ps[t]->status.ok()) << ps[t]->status;
    *reqs[t].mutable_sender() = MakeSender("chief", 0);
    CreateVariablesResponse resp;
    ASSERT_TRUE(ps[t]->ps->CreateVariables(reqs[t], &resp).ok());
  }
}

std::vector<std::vector<float>> Values(PsClient* client, const Mlp& model) {
  std::vector<const float*> v;
  EXPECT_TRUE(client->Pull(&v).ok());
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < v.size(); ++i) {
    out.emplace_back(v[i], v[i] + NumElements(model.params()[i].shape));
  }
  return out;
}

class SyncEquivalenceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SyncEquivalenceTest, TwoWorkersOfBatchBEqualOneWorkerOfBatch2B) {
  constexpr int kWorkers = 2, kBatch = 8, kSteps = 6;
  const std::vector<int> widths = {12, 10, 4};
  OptimizerConfig opt;
  opt.set_name(GetParam());
  opt.set_learning_rate(0.05);
  if (GetParam() == "momentum") opt.set_momentum(0.9);

  // Data: kSteps batches of kWorkers * kBatch examples.
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  Matrix x(kSteps * kWorkers * kBatch, widths[0]);
  for (int i = 0; i < x.size(); ++i) x.data()[i] = normal(rng);
  std::vector<int32_t> labels(x.rows());
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(rng() % widths[2]);

  // Sync cluster: two PS, two workers each taking its half of every batch.
  LocalPs s0(Consistency("sync", kWorkers, kWorkers)), s1(Consistency("sync", kWorkers, kWorkers));
  Mlp model(widths);
  CreateOn({&s0, &s1}, model, opt);
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      Mlp local(widths);
      PsClient client({s0.address, s1.address}, Variables(local), Worker(w), absl::Seconds(20));
      std::vector<const float*> values;
      std::vector<Tensor> grads;
      for (int step = 0; step < kSteps; ++step) {
        ASSERT_TRUE(client.Pull(&values, step).ok());
        ASSERT_EQ(client.min_version_read(), static_cast<uint64_t>(step));
        const int64_t first = (step * kWorkers + w) * kBatch;
        local.ForwardBackward(values, x.middleRows(first, kBatch), labels.data() + first, &grads);
        ASSERT_TRUE(client.Push(grads).ok());
      }
    });
  }
  for (auto& t : workers) t.join();

  // Reference: async PS, one worker with the whole batch.
  LocalPs r0(Consistency("async", 1, 1)), r1(Consistency("async", 1, 1));
  CreateOn({&r0, &r1}, model, opt);
  PsClient ref({r0.address, r1.address}, Variables(model), Worker(0), absl::Seconds(20));
  std::vector<const float*> values;
  std::vector<Tensor> grads;
  for (int step = 0; step < kSteps; ++step) {
    ASSERT_TRUE(ref.Pull(&values).ok());
    const int64_t first = step * kWorkers * kBatch;
    model.ForwardBackward(values, x.middleRows(first, kWorkers * kBatch), labels.data() + first,
                          &grads);
    ASSERT_TRUE(ref.Push(grads).ok());
  }

  PsClient sync_reader({s0.address, s1.address}, Variables(model), Worker(0), absl::Seconds(20));
  const auto got = Values(&sync_reader, model);
  const auto want = Values(&ref, model);
  ASSERT_EQ(sync_reader.min_version_read(), static_cast<uint64_t>(kSteps));
  for (size_t i = 0; i < got.size(); ++i) {
    for (size_t j = 0; j < got[i].size(); ++j) {
      ASSERT_NEAR(got[i][j], want[i][j], 1e-5 * std::max(1.0f, std::fabs(want[i][j])))
          << model.params()[i].name << "[" << j << "]";
    }
  }
  // The parameters did move: the comparison is not between two initial states.
  const std::vector<Tensor> init = model.Initialize(7);
  EXPECT_GT(std::fabs(got[0][0] - init[0].values[0]) + std::fabs(got[1][0] - init[1].values[0]),
            1e-4);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, SyncEquivalenceTest,
                         ::testing::Values("sgd", "momentum", "adam"));

}  // namespace
}  // namespace pstrain
