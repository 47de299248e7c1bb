// Sparse lookup + push throughput of embedding tables, each measurement next to a baseline
// measured in the same run. See bench/README.md.
//
//   BM_SparseMapBaseline/D  the keys through a bare absl::flat_hash_map<uint64_t, row> in one
//                           thread (rows inline in the map's slots): find-or-insert and copy the
//                           row out, then Adagrad on it
//   BM_SparseLocal/D        the same keys through EmbeddingTable::Lookup + Apply in one thread
//                           (no RPC): the PS's own table code
//   BM_SparseRpc/D          the same keys through one PS over 127.0.0.1: a ParameterServer with
//                           its gRPC service in this process, 2 worker threads, each with its own
//                           TableClient doing Lookup + Push of its batches
//
// D is the row's dim (8, 16, 64); the optimizer is Adagrad (one slot per element). One
// iteration is one batch of kBatch distinct keys looked up and pushed; items/s counts keys.
// BM_SparseLocal also reports the table's memory: bytes_per_row (TableStats bytes / rows, the
// index and bookkeeping included) and payload_bytes_per_row (the row and its slots).
#include <benchmark/benchmark.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "client/table_client.h"
#include "common/keys.h"
#include "common/rpc.h"
#include "local_ps_testing.h"
#include "ps/embedding_table.h"
#include "ps/ps.h"

namespace pstrain {
namespace {

constexpr double kMinTime = 0.5;    // seconds per benchmark and repetition
constexpr int kBatch = 8192;        // distinct keys per lookup and push
constexpr int kBatches = 32;        // batches cycled through
constexpr int kKeySpace = 1 << 17;  // ids the batches draw from: the rows a table ends with
constexpr float kLr = 0.01f, kEps = 1e-10f;

TableDef Def(int dim) {
  TableDef d;
  d.set_name("emb");
  d.set_dim(dim);
  d.mutable_initializer()->set_kind("normal");
  d.mutable_initializer()->set_stddev(0.01);
  d.mutable_initializer()->set_seed(1);
  d.mutable_optimizer()->set_name("adagrad");
  d.mutable_optimizer()->set_learning_rate(kLr);
  return d;
}

// kBatches batches of kBatch distinct keys, hashed ids out of kKeySpace; `seed` by worker.
std::vector<std::vector<uint64_t>> Batches(uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint64_t> id(0, kKeySpace - 1);
  std::vector<std::vector<uint64_t>> batches(kBatches);
  for (std::vector<uint64_t>& b : batches) {
    absl::flat_hash_set<uint64_t> seen;
    while (b.size() < static_cast<size_t>(kBatch)) {
      const uint64_t k = MixKey(id(rng) + 1);
      if (seen.insert(k).second) b.push_back(k);
    }
  }
  return batches;
}

std::vector<float> Grads(int dim) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> g(static_cast<size_t>(kBatch) * dim);
  for (float& x : g) x = u(rng);
  return g;
}

void SetKeyCounters(benchmark::State& state) {
  state.SetItemsProcessed(state.iterations() * kBatch);  // keys looked up and pushed
}

// The bare map: rows of D weights followed by their D Adagrad sums, held inline in the map's
// slots. Lookup copies each row out; the push applies Adagrad to each, as the table does.
template <int D>
void RunMapBaseline(benchmark::State& state) {
  using Row = std::array<float, 2 * D>;
  const std::vector<std::vector<uint64_t>> batches = Batches(1);
  const std::vector<float> grads = Grads(D);
  std::vector<float> out(static_cast<size_t>(kBatch) * D);
  absl::flat_hash_map<uint64_t, Row> map;
  auto step = [&](const std::vector<uint64_t>& keys) {
    for (size_t i = 0; i < keys.size(); ++i) {
      std::memcpy(out.data() + i * D, map[keys[i]].data(), D * sizeof(float));  // new: zeros
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      float* w = map.find(keys[i])->second.data();
      float* sum = w + D;
      const float* g = grads.data() + i * D;
      for (int d = 0; d < D; ++d) {
        sum[d] += g[d] * g[d];
        w[d] -= kLr * g[d] / (std::sqrt(sum[d]) + kEps);
      }
    }
  };
  for (const auto& b : batches) step(b);  // warm: every row exists before the timed loop
  size_t next = 0;
  for (auto _ : state) {
    step(batches[next]);
    benchmark::DoNotOptimize(out.data());
    next = (next + 1) % batches.size();
  }
  SetKeyCounters(state);
  // A slot per capacity plus its control byte.
  state.counters["bytes_per_row"] =
      static_cast<double>(map.capacity() * (sizeof(std::pair<uint64_t, Row>) + 1)) /
      static_cast<double>(map.size());
  state.counters["payload_bytes_per_row"] = static_cast<double>(sizeof(Row));
}

void BM_SparseMapBaseline(benchmark::State& state) {
  switch (state.range(0)) {
    case 8:
      return RunMapBaseline<8>(state);
    case 16:
      return RunMapBaseline<16>(state);
    case 64:
      return RunMapBaseline<64>(state);
  }
  state.SkipWithError("the baseline is compiled for dims 8, 16 and 64");
}

void BM_SparseLocal(benchmark::State& state) {
  const int dim = static_cast<int>(state.range(0));
  absl::StatusOr<std::unique_ptr<EmbeddingTable>> table = EmbeddingTable::Create(Def(dim));
  if (!table.ok()) {
    state.SkipWithError(std::string(table.status().message()).c_str());
    return;
  }
  const std::vector<std::vector<uint64_t>> batches = Batches(1);
  const std::vector<float> grads = Grads(dim);
  std::vector<float> out(static_cast<size_t>(kBatch) * dim);
  for (const auto& b : batches) (*table)->Lookup(b.data(), kBatch, out.data());  // warm
  size_t next = 0;
  for (auto _ : state) {
    const std::vector<uint64_t>& b = batches[next];
    (*table)->Lookup(b.data(), kBatch, out.data());
    (void)(*table)->Apply(b.data(), kBatch, grads.data());
    benchmark::DoNotOptimize(out.data());
    next = (next + 1) % batches.size();
  }
  SetKeyCounters(state);
  const TableStats s = (*table)->Stats();
  state.counters["rows"] = static_cast<double>(s.rows());
  state.counters["bytes_per_row"] = static_cast<double>(s.bytes()) / std::max<int64_t>(1, s.rows());
  state.counters["payload_bytes_per_row"] = static_cast<double>(s.payload_bytes_per_row());
}

// One PS task serving on 127.0.0.1 at a port the kernel picked, async, with table "emb" of
// `dim` warmed by every worker's batches, so the timed loop updates rows that exist.
// One PS holding the table "emb" of `dim`, for two workers.
struct TablePs : ps_testing::LocalPs {
  explicit TablePs(int dim) : LocalPs(ps_testing::Consistency("async", 2, 2)) {
    CreateTablesRequest create;
    *create.mutable_sender() = MakeSender("chief", 0);
    *create.add_tables() = Def(dim);
    CreateTablesResponse create_resp;
    if (status.ok()) status = ps->CreateTables(create, &create_resp);
  }
};

// The server of each dim, shared by the benchmark's threads and kept until the process exits.
TablePs* PsFor(int dim) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<TablePs>>* servers =
      new std::map<int, std::unique_ptr<TablePs>>;
  std::lock_guard<std::mutex> lock(mu);
  std::unique_ptr<TablePs>& ps = (*servers)[dim];
  if (ps == nullptr) ps = std::make_unique<TablePs>(dim);
  return ps.get();
}

void BM_SparseRpc(benchmark::State& state) {
  const int dim = static_cast<int>(state.range(0));
  TablePs* ps = PsFor(dim);
  if (!ps->status.ok()) {
    state.SkipWithError(std::string(ps->status.message()).c_str());
    return;
  }
  const int task = state.thread_index();
  TableClient client({ps->address}, {{"emb", dim}}, MakeSender("worker", task), absl::Seconds(60));
  // Each batch as the keys of the client's one table.
  std::vector<std::vector<std::vector<uint64_t>>> batches;
  for (std::vector<uint64_t>& b : Batches(1 + task)) batches.push_back({std::move(b)});
  const std::vector<std::vector<float>> grads = {Grads(dim)};
  std::vector<std::vector<float>> rows;
  // Connects, and creates this worker's rows before the timed loop.
  for (const auto& b : batches) {
    if (absl::Status s = client.Lookup(b, &rows); !s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      return;
    }
  }
  size_t next = 0;
  for (auto _ : state) {
    absl::Status s = client.Lookup(batches[next], &rows);
    if (s.ok()) s = client.Push(batches[next], grads);
    if (!s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      break;
    }
    next = (next + 1) % batches.size();
  }
  SetKeyCounters(state);
}

BENCHMARK(BM_SparseMapBaseline)->Arg(8)->Arg(16)->Arg(64)->UseRealTime()->MinTime(kMinTime);
BENCHMARK(BM_SparseLocal)->Arg(8)->Arg(16)->Arg(64)->UseRealTime()->MinTime(kMinTime);
BENCHMARK(BM_SparseRpc)->Arg(8)->Arg(16)->Arg(64)->Threads(2)->UseRealTime()->MinTime(kMinTime);

}  // namespace
}  // namespace pstrain

BENCHMARK_MAIN();
