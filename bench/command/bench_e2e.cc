// `pstrain bench`, end-to-end section: MNIST MLP (784-256-128-10, batch 256, SGD) examples/s
// through a 1 PS + 1 worker cluster (`pstrain launch`, its result line), against the same model
// trained in this process without a PS (Mlp::ForwardBackward and the PS's own SGD optimizer
// applied locally), and PyTorch on one thread (bench/torch_mlp.py) as a second reference.
// Repetitions interleave the three.
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/command/bench_internal.h"
#include "data/data.h"
#include "model/model.h"
#include "ps/optimizer.h"

namespace pstrain::bench {
namespace {

constexpr int kBatch = 256;
const std::vector<int> kWidths = {784, 256, 128, 10};

// examples/s, and examples per second of CPU time.
struct Speed {
  double per_sec = 0, per_cpu = 0;
};

// The number after "key": in the last line of `text` that has it; NaN if none.
double Number(const std::string& text, const std::string& key) {
  const std::string quoted = absl::StrCat("\"", key, "\":");
  const size_t at = text.rfind(quoted);
  if (at == std::string::npos) return std::nan("");
  return std::strtod(text.c_str() + at + quoted.size(), nullptr);
}

double ChildrenCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_CHILDREN, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// Runs `binary args`, output to `log`; its examples_per_sec, and its examples over the CPU time
// it reports as cpu_seconds or, without one, that of it and every process it waited for.
absl::StatusOr<Speed> RunAndRead(const std::string& binary, const std::vector<std::string>& args,
                                 const std::string& log, const std::string& what) {
  const double cpu_before = ChildrenCpuSeconds();
  absl::StatusOr<std::unique_ptr<Process>> p = Process::Start(binary, args, {}, log);
  if (!p.ok()) return p.status();
  absl::StatusOr<int> code = (*p)->Wait(absl::Seconds(300));
  if (!code.ok()) return code.status();
  const double cpu = ChildrenCpuSeconds() - cpu_before;
  const std::string out = ReadFile(log);
  if (*code != 0) {
    return absl::UnavailableError(absl::StrCat(what, " exited with ", *code, ": ", LastLine(out)));
  }
  Speed speed{Number(out, "examples_per_sec"), 0};
  if (std::isnan(speed.per_sec)) {
    return absl::UnavailableError(
        absl::StrCat(what, " printed no examples_per_sec: ", LastLine(out)));
  }
  const double reported = Number(out, "cpu_seconds");
  speed.per_cpu = Number(out, "examples") / (std::isnan(reported) ? cpu : reported);
  return speed;
}

double ThreadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

struct Local {
  Examples data;
  std::vector<int32_t> labels;
};

// One epoch (or `max_batches`) of the MLP in this process: pull-free, push-free training.
Speed TrainLocally(const Local& d, int max_batches) {
  Mlp model(kWidths);
  std::vector<Tensor> params = model.Initialize(7);
  std::vector<std::unique_ptr<Optimizer>> opts;
  OptimizerConfig config;
  config.set_name("sgd");
  config.set_learning_rate(0.01);
  for (const Tensor& p : params) {
    opts.push_back(*CreateOptimizer(config, static_cast<int64_t>(p.values.size())));
  }
  std::vector<const float*> ptrs;
  for (const Tensor& p : params) ptrs.push_back(p.values.data());
  std::vector<Tensor> grads;
  const int64_t rows = static_cast<int64_t>(d.labels.size());
  int64_t examples = 0;
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = ThreadCpuSeconds();
  for (int64_t b = 0; b + kBatch <= rows && b / kBatch < max_batches; b += kBatch) {
    const ConstMatrixMap x(d.data.dense.data() + b * d.data.dense_dim, kBatch, d.data.dense_dim);
    model.ForwardBackward(ptrs, x, d.labels.data() + b, &grads);
    for (size_t i = 0; i < params.size(); ++i) {
      opts[i]->Apply(params[i].values.data(), grads[i].values.data(),
                     static_cast<int64_t>(params[i].values.size()), b / kBatch);
    }
    examples += kBatch;
  }
  const std::chrono::duration<double> s = std::chrono::steady_clock::now() - start;
  return {examples / s.count(), examples / (ThreadCpuSeconds() - cpu_start)};
}

}  // namespace

std::vector<Table> EndToEndTables(const BenchOptions& o) {
  Table t{"End to end: MNIST MLP 784-256-128-10, batch 256, SGD (examples/s)",
          {"what", "pstrain", "baseline", "baseline is", "ratio", "target", "met"}};
  Local local;
  absl::StatusOr<Examples> loaded = LoadMnist(o.data_dir, "train");
  if (!loaded.ok()) {
    t.rows.push_back({"all", absl::StrCat("unavailable: ", loaded.status().message())});
    return {t};
  }
  local.data = *std::move(loaded);
  for (float l : local.data.labels) local.labels.push_back(static_cast<int32_t>(l));

  char dir_template[] = "/tmp/pstrain-bench-e2e-XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (dir == nullptr) {
    t.rows.push_back({"all", "unavailable: mkdtemp failed"});
    return {t};
  }
  const int reps = o.quick ? 1 : 3, max_batches = o.quick ? 40 : 1 << 30;
  std::vector<std::string> launch = {"launch",
                                     "--ps",
                                     "1",
                                     "--workers",
                                     "1",
                                     "--hidden",
                                     "256,128",
                                     "--optimizer",
                                     "sgd",
                                     "--lr",
                                     "0.01",
                                     "--batch",
                                     std::to_string(kBatch),
                                     "--epochs",
                                     "1",
                                     "--mode",
                                     "async",
                                     "--data",
                                     o.data_dir,
                                     "--log_level",
                                     "warn"};
  // Training flags the cluster runs with on top of these (space-separated), to compare its
  // options, e.g. PSTRAIN_BENCH_E2E_FLAGS="--overlap_pull --pipeline_push".
  if (const char* extra = std::getenv("PSTRAIN_BENCH_E2E_FLAGS"); extra != nullptr) {
    for (absl::string_view f : absl::StrSplit(extra, ' ', absl::SkipEmpty())) {
      launch.emplace_back(f);
    }
  }
  std::vector<std::string> torch = {o.torch_script, "--data", o.data_dir, "--batch",
                                    std::to_string(kBatch)};
  if (o.quick) torch.insert(torch.end(), {"--max_batches", std::to_string(max_batches)});
  const bool has_torch =
      access(o.python.c_str(), X_OK) == 0 && access(o.torch_script.c_str(), R_OK) == 0;
  std::vector<Speed> cluster, single, reference;
  absl::Status cluster_error,
      torch_error =
          has_torch ? absl::OkStatus()
                    : absl::UnavailableError(absl::StrCat("no ", o.python, " or ", o.torch_script));
  for (int r = 0; r < reps; ++r) {
    for (int k = 0; k < 3; ++k) {
      const int which = (k + r) % 3;
      if (which == 0 && cluster_error.ok()) {
        absl::StatusOr<Speed> x =
            RunAndRead(o.self, launch, absl::StrCat(dir, "/launch.log"), "pstrain launch");
        if (x.ok()) cluster.push_back(*x);
        cluster_error = x.status();
      } else if (which == 1) {
        single.push_back(TrainLocally(local, max_batches));
      } else if (which == 2 && torch_error.ok()) {
        absl::StatusOr<Speed> x =
            RunAndRead(o.python, torch, absl::StrCat(dir, "/torch.log"), "torch_mlp.py");
        if (x.ok()) reference.push_back(*x);
        torch_error = x.status();
      }
    }
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  Table cpu{"End to end per CPU-second: the same runs (examples per second of CPU time)", t.header};
  for (const bool per_cpu : {false, true}) {
    const auto median = [per_cpu](const std::vector<Speed>& v) {
      std::vector<double> x;
      for (const Speed& s : v) x.push_back(per_cpu ? s.per_cpu : s.per_sec);
      return Median(x);
    };
    const double c = median(cluster), s = median(single), p = median(reference);
    Table& into = per_cpu ? cpu : t;
    if (cluster_error.ok()) {
      into.rows.push_back({"1 PS + 1 worker (pstrain launch)", Fixed(c, 0), Fixed(s, 0),
                           "single process", Ratio(c, s), ">= 0.9x", Met(c / s, 0.9, true)});
    } else {
      into.rows.push_back({"1 PS + 1 worker (pstrain launch)",
                           absl::StrCat("unavailable: ", cluster_error.message()), Fixed(s, 0)});
    }
    if (torch_error.ok()) {
      into.rows.push_back({"single process (Mlp + local SGD)", Fixed(s, 0), Fixed(p, 0),
                           "PyTorch, 1 thread", Ratio(s, p), ">= 1.0x", Met(s / p, 1.0, true)});
    } else {
      into.rows.push_back({"single process (Mlp + local SGD)", Fixed(s, 0),
                           absl::StrCat("unavailable: ", torch_error.message())});
    }
  }
  cpu.notes.push_back(
      "The CPU time of the cluster is that of every process of `pstrain launch` (chief, PS, "
      "worker, the launcher), start-up and data loading included; of the single process, its "
      "training loop's thread; of PyTorch, its training loop (time.process_time). On a machine "
      "shared with other work, the scheduler gives a job of three processes more of the cores "
      "than one of one process, which moves examples/s but not examples per CPU-second.");
  t.notes.push_back(absl::StrCat(
      "Medians of ", reps,
      " interleaved repetitions. The cluster's examples/s is its chief's result line (one epoch "
      "of MNIST's 60,000 training examples, async); the single process trains on the same "
      "examples, already in memory, with the PS's SGD kernel applied locally",
      o.quick ? absl::StrCat(" (", max_batches, " batches with --quick)") : std::string(),
      "; PyTorch (torch.set_num_threads(1)) trains the same MLP the same way.",
      std::getenv("PSTRAIN_BENCH_E2E_FLAGS") != nullptr
          ? absl::StrCat(" The cluster ran with ", std::getenv("PSTRAIN_BENCH_E2E_FLAGS"), ".")
          : std::string()));
  return {t, cpu};
}

}  // namespace pstrain::bench
