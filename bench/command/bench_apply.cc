// `pstrain bench`, apply section: how fast the PS's optimizers consume gradient bytes, dense
// (Optimizer::Apply on one variable) and sparse (EmbeddingTable::Apply on rows that exist),
// against a stream of the same gradient bytes: w[i] += a * g[i], the memory traffic of the
// least fused update, with the loop shape of the SGD kernel (bench/ps_bench.cc's
// BM_StreamBaseline). Repetitions interleave each optimizer with the stream.
#include <chrono>
#include <functional>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "bench/command/bench_internal.h"
#include "ps/embedding_table.h"
#include "ps/optimizer.h"

namespace pstrain::bench {
namespace {

// noinline with a run-time trip count, so the compiler cannot specialise it for a constant size
// (as the optimizers' kernels cannot be).
__attribute__((noinline)) void StreamUpdate(float* __restrict w, const float* __restrict g,
                                            int64_t n, float a) {
  for (int64_t i = 0; i < n; ++i) w[i] += a * g[i];
}

std::vector<float> RandomFloats(int64_t n, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

OptimizerConfig Config(const std::string& name) {
  OptimizerConfig c;
  c.set_name(name);
  c.set_learning_rate(0.01);
  if (name == "momentum") c.set_momentum(0.9);
  return c;
}

// GB/s of gradient: `iters` calls of `f`, each consuming `grad_bytes`.
double Gbs(const std::function<void()>& f, int iters, double grad_bytes) {
  const auto start = std::chrono::steady_clock::now();
  for (int k = 0; k < iters; ++k) f();
  const std::chrono::duration<double> d = std::chrono::steady_clock::now() - start;
  return grad_bytes * iters / d.count() / 1e9;
}

// Interleaved repetitions of `f` and the stream over `floats` gradient floats; a table row.
std::vector<std::string> Row(const std::string& what, const std::function<void()>& f,
                             int64_t floats, int iters, int reps) {
  std::vector<float> w = RandomFloats(floats, 0.1f, 1);
  const std::vector<float> g = RandomFloats(floats, 1.0f, 2);
  const auto stream = [&] { StreamUpdate(w.data(), g.data(), floats, -0.01f); };
  const double bytes = 4.0 * static_cast<double>(floats);
  f();  // first touch of the slots, not timed
  std::vector<double> mine, base;
  for (int r = 0; r < reps; ++r) {
    if (r % 2 == 0) mine.push_back(Gbs(f, iters, bytes));
    base.push_back(Gbs(stream, iters, bytes));
    if (r % 2 == 1) mine.push_back(Gbs(f, iters, bytes));
  }
  if (w[0] == 12345.f) w[1] = 0;  // the stream's result is used
  const double m = Median(mine), b = Median(base);
  return {what, Fixed(m, 2), Fixed(b, 2), Ratio(m, b), "-"};
}

}  // namespace

std::vector<Table> ApplyTables(const BenchOptions& o) {
  const int reps = o.quick ? 1 : 7, iters = o.quick ? 2 : 20;
  const int64_t n = o.quick ? (1 << 16) : (1 << 20);
  Table dense{absl::StrCat("PS apply throughput, dense (GB/s of gradient, ", n, " floats)"),
              {"optimizer", "pstrain", "stream w += a g", "ratio", "target"}};
  for (const std::string name : {"sgd", "momentum", "adagrad", "adam", "rmsprop", "ftrl"}) {
    absl::StatusOr<std::unique_ptr<Optimizer>> opt = CreateOptimizer(Config(name), n);
    if (!opt.ok()) {
      dense.rows.push_back({name, absl::StrCat("unavailable: ", opt.status().message())});
      continue;
    }
    std::vector<float> w = RandomFloats(n, 0.1f, 3);
    const std::vector<float> g = RandomFloats(n, 1.0f, 4);
    int64_t step = 0;
    dense.rows.push_back(Row(
        name, [&] { (*opt)->Apply(w.data(), g.data(), n, step++); }, n, iters, reps));
  }
  dense.notes.push_back(
      "The stream reads w and g and writes w: 12 bytes per element. An optimizer with slots "
      "moves more (20 bytes with one slot, 28 with two), so a memory-bound optimizer sits near "
      "12 / its bytes of the stream; well below that it is compute-bound (sqrt, divide, pow).");

  const int dim = 64;
  const int64_t keys_n = o.quick ? 1024 : 16384;
  Table sparse{absl::StrCat("PS apply throughput, sparse (GB/s of gradient, ", keys_n, " rows of ",
                            dim, " floats)"),
               {"optimizer", "pstrain", "stream w += a g", "ratio", "target"}};
  std::vector<uint64_t> keys(keys_n);
  std::iota(keys.begin(), keys.end(), uint64_t{1000});
  std::shuffle(keys.begin(), keys.end(), std::mt19937_64(5));
  const std::vector<float> grads = RandomFloats(keys_n * dim, 1.0f, 6);
  std::vector<float> rows(keys_n * dim);
  for (const std::string name : {"sgd", "adagrad", "adam", "ftrl"}) {
    TableDef def;
    def.set_name("bench");
    def.set_dim(dim);
    def.mutable_initializer()->set_kind("uniform");
    def.mutable_initializer()->set_low(-0.05);
    def.mutable_initializer()->set_high(0.05);
    *def.mutable_optimizer() = Config(name);
    def.set_admit_after(0);
    absl::StatusOr<std::unique_ptr<EmbeddingTable>> table = EmbeddingTable::Create(def);
    if (!table.ok()) {
      sparse.rows.push_back({name, absl::StrCat("unavailable: ", table.status().message())});
      continue;
    }
    (*table)->Lookup(keys.data(), keys_n, rows.data());  // creates every row
    sparse.rows.push_back(Row(
        name, [&] { (void)(*table)->Apply(keys.data(), keys_n, grads.data()); }, keys_n * dim,
        iters, reps));
  }
  sparse.notes.push_back(
      "Rows exist before timing (looked up once, admitted at once); keys are shuffled, so rows "
      "are visited in hash order. The stream is dense over as many floats.");
  return {dense, sparse};
}

}  // namespace pstrain::bench
