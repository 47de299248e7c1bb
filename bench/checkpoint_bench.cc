// checkpoint_bench: how long pushes pause per checkpoint of a 100 MB model (the in-memory copy,
// from the first freeze to the last release), and the part file's write throughput against a
// plain write() of the same number of bytes, with and without fsync. One PS in this process,
// served over gRPC on 127.0.0.1; the chief's CheckpointManager saves it.
//
//   checkpoint_bench [optimizer (adam)] [saves (5)] [directory (a fresh one under $TMPDIR)]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "common/tensor_codec.h"
#include "local_ps_testing.h"
#include "master/checkpoints.h"
#include "master/variables.h"

namespace pstrain {
namespace {

constexpr int kVariables = 4;
constexpr int64_t kRows = 1600, kCols = 4096;  // 4 x 26.2 MB = 104.9 MB of weights

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Seconds to write `bytes` with write() in 4 MiB blocks, then (with `sync`) fsync.
double PlainWrite(const std::string& path, int64_t bytes, bool sync) {
  std::vector<char> block(size_t{4} << 20, 1);
  const auto start = std::chrono::steady_clock::now();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  for (int64_t left = bytes; left > 0;) {
    const ssize_t w = ::write(fd, block.data(), std::min<int64_t>(left, block.size()));
    if (w <= 0) break;
    left -= w;
  }
  if (sync) ::fsync(fd);
  ::close(fd);
  const double s = Seconds(std::chrono::steady_clock::now() - start);
  std::filesystem::remove(path);
  return s;
}

int Main(int argc, char** argv) {
  const std::string optimizer = argc > 1 ? argv[1] : "adam";
  const int saves = argc > 2 ? std::atoi(argv[2]) : 5;
  const std::string dir = argc > 3 ? argv[3]
                                   : (std::filesystem::temp_directory_path() /
                                      ("checkpoint_bench-" + std::to_string(::getpid())))
                                         .string();
  ps_testing::LocalPs ps;
  if (!ps.status.ok()) return std::fprintf(stderr, "%s\n", ps.status.ToString().c_str()), 1;
  auto placer = *VariablePlacer::Create({ps.address}, "auto", "greedy", absl::Seconds(60));
  OptimizerConfig o;
  o.set_name(optimizer);
  o.set_learning_rate(0.001);
  std::vector<NewVariable> vars;
  ModelSignature sig;
  for (int i = 0; i <= kVariables; ++i) {
    // The last variable is one float, pushed between saves so each save has a new state.
    const std::vector<int64_t> shape =
        i < kVariables ? std::vector<int64_t>{kRows, kCols} : std::vector<int64_t>{1};
    const std::string name = i < kVariables ? "w" + std::to_string(i) : "step";
    vars.push_back(
        {name, shape, o, [shape]() -> absl::StatusOr<Tensor> { return Tensor(shape, 0.5f); }});
    sig.variables.push_back({name, shape});
  }
  absl::StatusOr<std::vector<Placement>> placement = placer->CreateAll(vars);
  if (!placement.ok())
    return std::fprintf(stderr, "%s\n", placement.status().ToString().c_str()), 1;
  CheckpointOptions opts;
  opts.dir = dir;
  opts.keep = 1;
  auto manager = *CheckpointManager::Create(opts, {ps.address});
  manager->SetModel(*placement, sig);

  std::printf("model: %d x [%lld, %lld] floats + 1 = %.1f MB of weights, optimizer %s\n",
              kVariables, static_cast<long long>(kRows), static_cast<long long>(kCols),
              kVariables * kRows * kCols * 4 / 1e6, optimizer.c_str());
  std::printf("%-6s %12s %14s %12s %12s %14s %14s\n", "save", "pause_ms", "snapshot_MB", "write_s",
              "write_MB/s", "write()_MB/s", "write+fsync");
  std::vector<double> pauses;
  for (int i = 0; i < saves; ++i) {
    PushRequest push;
    *push.mutable_sender() = MakeSender("worker", 0);
    Gradient* g = push.add_gradients();
    g->set_name("step");
    const float one = 1.0f;
    EncodeTensor({1}, &one, g->mutable_gradient());
    PushResponse presp;
    if (absl::Status s = ps.ps->Push(push, &presp); !s.ok()) {
      return std::fprintf(stderr, "%s\n", s.ToString().c_str()), 1;
    }
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::string> saved = manager->SaveAndWait();
    const double total = Seconds(std::chrono::steady_clock::now() - start);
    if (!saved.ok()) return std::fprintf(stderr, "%s\n", saved.status().ToString().c_str()), 1;
    const double pause = absl::ToDoubleMilliseconds(manager->last_pause());
    const int64_t bytes = std::filesystem::file_size(*saved + "/ps-0.ckpt");
    const double write_s = total - pause / 1e3;
    const double plain = PlainWrite(dir + "/plain", bytes, false);
    const double plain_sync = PlainWrite(dir + "/plain", bytes, true);
    pauses.push_back(pause);
    std::printf("%-6d %12.1f %14.1f %12.3f %12.0f %14.0f %14.0f\n", i + 1, pause,
                manager->last_snapshot_bytes() / 1e6, write_s, bytes / 1e6 / write_s,
                bytes / 1e6 / plain, bytes / 1e6 / plain_sync);
  }
  std::sort(pauses.begin(), pauses.end());
  std::printf("median pause %.1f ms over %d saves\n", pauses[pauses.size() / 2], saves);
  manager.reset();
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) { return pstrain::Main(argc, argv); }
