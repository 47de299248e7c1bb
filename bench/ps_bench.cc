// Benchmarks of pstrain's hot paths, each next to a baseline measured in the same run so that a
// ratio, not an absolute time, is what a change should move. See bench/README.md.
//
//   BM_Optimizer/<name>/N     Optimizer::Apply on N floats (CreateOptimizer outside the loop)
//   BM_OptimizerChecked/<name>/N  the same, each update checked first (FirstNonFiniteUpdate) as
//                             the PS does before it applies a push
//   BM_StreamBaseline/N       w[i] += a * g[i] on N floats: the memory traffic of a fused update
//                             (read w and g, write w), same loop shape and flags
//   BM_RpcStep/<layout>       PsClient Pull + Push of the MNIST MLP's variables, 2 PS on
//                             127.0.0.1 over gRPC, async mode
//   BM_SerializeBaseline      the same bytes through the same protos without the network
//   BM_MlpForwardBackward/64  one step's compute: forward + backward of 784-256-128-10, batch 64
//
// Every benchmark reports wall time (UseRealTime): the RPC benchmarks spend most of their time in
// gRPC's threads, whose CPU time the calling thread's clock would not see.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "client/ps_client.h"
#include "common/rpc.h"
#include "common/tensor.h"
#include "common/tensor_codec.h"
#include "local_ps_testing.h"
#include "model/model.h"
#include "ps/optimizer.h"
#include "ps/ps.h"

namespace pstrain {
namespace {

constexpr int64_t kOptimizerElements = 1 << 20;
constexpr double kMinTime = 0.5;  // seconds per benchmark and repetition
const std::vector<int> kMlpWidths = {784, 256, 128, 10};
constexpr int kBatch = 64;

std::vector<float> RandomFloats(int64_t n, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// ---- 1. Optimizer apply vs. a stream of the same shape --------------------------------------

// Bytes an update moves per element, at the least: read w, g and every slot; write w and every
// slot. (Adam and FTRL have two slots, momentum, adagrad and rmsprop without momentum one.)
int64_t BytesPerElement(const std::string& name) {
  const int slots = name == "sgd" ? 0 : (name == "adam" || name == "ftrl") ? 2 : 1;
  return static_cast<int64_t>(sizeof(float)) * (3 + 2 * slots);
}

// `checked`: each update is first checked (Optimizer::FirstNonFiniteUpdate), as an async push
// is on the PS, so BM_OptimizerChecked / BM_Optimizer is what the check costs the apply.
void RunOptimizer(benchmark::State& state, const std::string& name, bool checked) {
  const int64_t n = state.range(0);
  OptimizerConfig config;
  config.set_name(name);
  config.set_learning_rate(0.01);
  if (name == "momentum") config.set_momentum(0.9);
  absl::StatusOr<std::unique_ptr<Optimizer>> opt = CreateOptimizer(config, n);
  if (!opt.ok()) {
    state.SkipWithError(std::string(opt.status().message()).c_str());
    return;
  }
  std::vector<float> w = RandomFloats(n, 0.1f, 1);
  const std::vector<float> g = RandomFloats(n, 1.0f, 2);
  int64_t step = 0;
  const float* gp = g.data();
  for (auto _ : state) {
    if (checked) {
      const int64_t bad = (*opt)->FirstNonFiniteUpdate(
          w.data(), [gp, n](Optimizer::ChunkSink fn) { fn(0, gp, n); }, n, step);
      benchmark::DoNotOptimize(bad);
    }
    (*opt)->Apply(w.data(), gp, n, step++);
    benchmark::ClobberMemory();
  }
  benchmark::DoNotOptimize(w.data());
  state.SetItemsProcessed(state.iterations() * n);
  state.SetBytesProcessed(state.iterations() * n * BytesPerElement(name));
}

void BM_Optimizer(benchmark::State& state, const std::string& name) {
  RunOptimizer(state, name, false);
}
void BM_OptimizerChecked(benchmark::State& state, const std::string& name) {
  RunOptimizer(state, name, true);
}

// The loop shape of the SGD kernel (src/ps/optimizer_kernels.cc): __restrict pointers and a trip
// count known only at run time, compiled with the project's flags. noinline, and n comes from
// state.range, so the compiler cannot specialise it for a constant size.
__attribute__((noinline)) void StreamUpdate(float* __restrict w, const float* __restrict g,
                                            int64_t n, float a) {
  for (int64_t i = 0; i < n; ++i) w[i] += a * g[i];
}

void BM_StreamBaseline(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> w = RandomFloats(n, 0.1f, 1);
  const std::vector<float> g = RandomFloats(n, 1.0f, 2);
  for (auto _ : state) {
    StreamUpdate(w.data(), g.data(), n, -0.01f);
    benchmark::ClobberMemory();
  }
  benchmark::DoNotOptimize(w.data());
  state.SetItemsProcessed(state.iterations() * n);
  state.SetBytesProcessed(state.iterations() * n * 3 * static_cast<int64_t>(sizeof(float)));
}

BENCHMARK(BM_StreamBaseline)->Arg(kOptimizerElements)->UseRealTime()->MinTime(kMinTime);
BENCHMARK_CAPTURE(BM_Optimizer, sgd, std::string("sgd"))
    ->Arg(kOptimizerElements)
    ->UseRealTime()
    ->MinTime(kMinTime);
BENCHMARK_CAPTURE(BM_Optimizer, momentum, std::string("momentum"))
    ->Arg(kOptimizerElements)
    ->UseRealTime()
    ->MinTime(kMinTime);
BENCHMARK_CAPTURE(BM_Optimizer, adagrad, std::string("adagrad"))
    ->Arg(kOptimizerElements)
    ->UseRealTime()
    ->MinTime(kMinTime);
BENCHMARK_CAPTURE(BM_Optimizer, adam, std::string("adam"))
    ->Arg(kOptimizerElements)
    ->UseRealTime()
    ->MinTime(kMinTime);
BENCHMARK_CAPTURE(BM_Optimizer, rmsprop, std::string("rmsprop"))
    ->Arg(kOptimizerElements)
    ->UseRealTime()
    ->MinTime(kMinTime);
BENCHMARK_CAPTURE(BM_Optimizer, ftrl, std::string("ftrl"))
    ->Arg(kOptimizerElements)
    ->UseRealTime()
    ->MinTime(kMinTime);
BENCHMARK_CAPTURE(BM_OptimizerChecked, sgd, std::string("sgd"))
    ->Arg(kOptimizerElements)
    ->UseRealTime()
    ->MinTime(kMinTime);
BENCHMARK_CAPTURE(BM_OptimizerChecked, adam, std::string("adam"))
    ->Arg(kOptimizerElements)
    ->UseRealTime()
    ->MinTime(kMinTime);

// ---- 2. One step's communication vs. the proto path without the network ---------------------

// The MLP's variables placed on `num_ps` tasks round-robin; with `split_first`, the first kernel
// is split into two row shards, one on each of the first two tasks.
std::vector<VariableRef> MlpVariables(int num_ps, bool split_first) {
  const Mlp model(kMlpWidths);
  std::vector<VariableRef> vars;
  for (size_t i = 0; i < model.params().size(); ++i) {
    const ParamSpec& p = model.params()[i];
    VariableRef v{p.name, p.shape, {}};
    if (i == 0 && split_first) {
      const int64_t half = p.shape[0] / 2;
      v.shards = {{p.name + "/part_0", 0, 0, half}, {p.name + "/part_1", 1, half, p.shape[0]}};
    } else {
      v.shards = {{p.name, static_cast<int>(i % num_ps), 0, p.shape[0]}};
    }
    vars.push_back(std::move(v));
  }
  return vars;
}

int64_t RowSize(const std::vector<int64_t>& shape) {
  return NumElements(shape) / (shape.empty() ? 1 : shape[0]);
}

std::vector<int64_t> ShardShape(const VariableRef& v, const ShardRef& s) {
  std::vector<int64_t> shape = v.shape;
  shape[0] = s.row_end - s.row_begin;
  return shape;
}

// Gradients of the MLP's shapes with small values, so that pushing them for many steps keeps the
// parameters finite.
std::vector<Tensor> MlpGradients() {
  const Mlp model(kMlpWidths);
  std::vector<Tensor> grads;
  for (size_t i = 0; i < model.params().size(); ++i) {
    Tensor t(model.params()[i].shape);
    t.values = RandomFloats(t.size(), 1e-4f, 10 + i);
    grads.push_back(std::move(t));
  }
  return grads;
}

// Floats of one pull (or one push) of every variable.
int64_t MlpFloats() {
  int64_t n = 0;
  const Mlp model(kMlpWidths);
  for (const ParamSpec& p : model.params()) n += NumElements(p.shape);
  return n;
}

// One PS task serving on 127.0.0.1 at a port the kernel picked, async mode.
using ps_testing::LocalPs;

// Creates the variables of `vars` (Glorot values, SGD) on their tasks.
absl::Status CreateVariables(const std::vector<LocalPs*>& ps,
                             const std::vector<VariableRef>& vars) {
  const std::vector<Tensor> init = Mlp(kMlpWidths).Initialize(7);
  std::vector<CreateVariablesRequest> reqs(ps.size());
  for (size_t i = 0; i < vars.size(); ++i) {
    for (const ShardRef& s : vars[i].shards) {
      VariableDef* def = reqs[s.ps_task].add_variables();
      def->set_name(s.name);
      EncodeTensor(ShardShape(vars[i], s), init[i].data() + s.row_begin * RowSize(vars[i].shape),
                   def->mutable_initial_value());
      def->mutable_optimizer()->set_name("sgd");
      def->mutable_optimizer()->set_learning_rate(0.01);
    }
  }
  for (size_t t = 0; t < ps.size(); ++t) {
    *reqs[t].mutable_sender() = MakeSender("chief", 0);
    CreateVariablesResponse resp;
    if (absl::Status s = ps[t]->ps->CreateVariables(reqs[t], &resp); !s.ok()) return s;
  }
  return absl::OkStatus();
}

void BM_RpcStep(benchmark::State& state, bool split_first) {
  LocalPs ps0, ps1;
  for (const LocalPs* ps : {&ps0, &ps1}) {
    if (!ps->status.ok()) {
      state.SkipWithError(std::string(ps->status.message()).c_str());
      return;
    }
  }
  const std::vector<VariableRef> vars = MlpVariables(2, split_first);
  if (absl::Status s = CreateVariables({&ps0, &ps1}, vars); !s.ok()) {
    state.SkipWithError(std::string(s.message()).c_str());
    return;
  }
  PsClient client({ps0.address, ps1.address}, vars, MakeSender("worker", 0), absl::Seconds(30));
  const std::vector<Tensor> grads = MlpGradients();
  std::vector<const float*> values;
  // Connect both channels before timing.
  if (absl::Status s = client.Pull(&values); !s.ok()) {
    state.SkipWithError(std::string(s.message()).c_str());
    return;
  }
  for (auto _ : state) {
    absl::Status s = client.Pull(&values);
    if (s.ok()) s = client.Push(grads);
    if (!s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      break;
    }
  }
  state.SetItemsProcessed(state.iterations());  // steps
  state.SetBytesProcessed(state.iterations() * 2 * MlpFloats() *
                          static_cast<int64_t>(sizeof(float)));
}

// What BM_RpcStep's bytes cost without the network, through the same messages and the same
// encode/decode functions, for each PS task as PsClient splits them:
//   push: EncodeTensor each gradient into a PushRequest, SerializeToString, ParseFromString,
//         TensorData (the check and view the PS uses before applying);
//   pull: EncodeTensor each value into a PullResponse (as the PS serves it), SerializeToString,
//         ParseFromString, TensorData (what PsClient::Pull returns a view of).
// The messages and strings are reused across iterations, so no allocation is counted either:
// a floor for any RPC carrying these bytes.
void BM_SerializeBaseline(benchmark::State& state) {
  const std::vector<VariableRef> vars = MlpVariables(2, false);
  const std::vector<Tensor> grads = MlpGradients();
  const std::vector<Tensor> values = Mlp(kMlpWidths).Initialize(7);
  const Sender sender = MakeSender("worker", 0);
  struct Task {
    std::vector<size_t> vars;  // unsharded: variable i is shard 0
    PushRequest push_out, push_in;
    PullResponse pull_out, pull_in;
    std::string push_wire, pull_wire;
  };
  std::vector<Task> tasks(2);
  for (size_t i = 0; i < vars.size(); ++i) tasks[vars[i].shards[0].ps_task].vars.push_back(i);
  for (Task& t : tasks) {
    *t.push_out.mutable_sender() = sender;
    for (size_t i : t.vars) t.push_out.add_gradients()->set_name(vars[i].shards[0].name);
  }
  for (auto _ : state) {
    for (Task& t : tasks) {
      for (size_t k = 0; k < t.vars.size(); ++k) {
        const size_t i = t.vars[k];
        Gradient* g = t.push_out.mutable_gradients(k);
        g->set_read_version(1);
        EncodeTensor(grads[i], g->mutable_gradient());
      }
      t.push_out.SerializeToString(&t.push_wire);
      t.push_in.ParseFromString(t.push_wire);
      for (size_t k = 0; k < t.vars.size(); ++k) {
        const size_t i = t.vars[k];
        absl::StatusOr<const float*> d =
            TensorData(t.push_in.gradients(k).gradient(), vars[i].shape, vars[i].name);
        benchmark::DoNotOptimize(d);
      }

      t.pull_out.Clear();
      for (size_t i : t.vars) {
        VariableValue* v = t.pull_out.add_values();
        v->set_name(vars[i].shards[0].name);
        v->set_version(1);
        EncodeTensor(values[i], v->mutable_value());
      }
      t.pull_out.SerializeToString(&t.pull_wire);
      t.pull_in.ParseFromString(t.pull_wire);
      for (size_t k = 0; k < t.vars.size(); ++k) {
        const size_t i = t.vars[k];
        absl::StatusOr<const float*> d =
            TensorData(t.pull_in.values(k).value(), vars[i].shape, vars[i].name);
        benchmark::DoNotOptimize(d);
      }
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());  // steps
  state.SetBytesProcessed(state.iterations() * 2 * MlpFloats() *
                          static_cast<int64_t>(sizeof(float)));
}

BENCHMARK(BM_SerializeBaseline)->UseRealTime()->MinTime(kMinTime);
BENCHMARK_CAPTURE(BM_RpcStep, unsharded, false)->UseRealTime()->MinTime(kMinTime);
BENCHMARK_CAPTURE(BM_RpcStep, kernel0_2shards, true)->UseRealTime()->MinTime(kMinTime);

// ---- 3. One step's compute -------------------------------------------------------------------

void BM_MlpForwardBackward(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0));
  Mlp model(kMlpWidths);
  const std::vector<Tensor> params = model.Initialize(7);
  std::vector<const float*> ptrs;
  for (const Tensor& p : params) ptrs.push_back(p.data());
  Matrix x(batch, kMlpWidths.front());
  const std::vector<float> xs = RandomFloats(x.size(), 1.0f, 3);
  std::copy(xs.begin(), xs.end(), x.data());
  std::vector<int32_t> labels(batch);
  for (int i = 0; i < batch; ++i) labels[i] = i % kMlpWidths.back();
  std::vector<Tensor> grads;
  for (auto _ : state) {
    float loss = model.ForwardBackward(ptrs, x, labels.data(), &grads);
    benchmark::DoNotOptimize(loss);
  }
  state.SetItemsProcessed(state.iterations());  // steps
  state.counters["examples/s"] = benchmark::Counter(static_cast<double>(state.iterations()) * batch,
                                                    benchmark::Counter::kIsRate);
}

BENCHMARK(BM_MlpForwardBackward)->Arg(kBatch)->UseRealTime()->MinTime(kMinTime);

}  // namespace
}  // namespace pstrain

BENCHMARK_MAIN();
