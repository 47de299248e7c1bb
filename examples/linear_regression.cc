// Linear regression trained through pstrain's client API: a user's own model, with its gradient
// written by hand, its variables on the parameter servers.
//
// Runs as one worker task of a cluster described by TF_CONFIG (TensorFlow's format):
//   TF_CONFIG='{"cluster": {"chief": ["h:p"], "ps": [...], "worker": [...]},
//               "task": {"type": "worker", "index": 0}}'
// with a chief started as `pstrain server --job chief --model external`. Each worker draws its
// own examples of y = X w* + b* + noise (w*, b* are the same everywhere), trains w [dim, 1] and
// b [1] by minibatch SGD on the PS, waits for the others, and prints one JSON line:
//   {"task": 0, "mse": ..., "w_error": ..., ...}
// Flags (--name=value or --name value): --steps 200 --batch 32 --examples 2000 --dim 10
// --optimizer sgd --lr 0.1 --init glorot_uniform|zeros --noise 0.01 --timeout 60.
// When the chief hands out tasks (`pstrain launch --rows 2000 -- linear_regression`), every worker
// draws the same examples (--examples must be the chief's --rows) and trains on the batches of
// the tasks it is given instead of --steps random batches: a worker that dies is started again
// and its task handed out again, each batch applied once.
// --steps may list one count per worker task (--steps 150,200: worker 0 takes 150 steps, worker
// 1 and any later ones 200), to see that workers taking different numbers of steps still meet at
// the final barrier in every consistency mode.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "Eigen/Core"
#include "client/client.h"
#include "nlohmann/json.hpp"

namespace {

using Matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vec = Eigen::VectorXd;

struct Flags {
  std::vector<int> steps = {200};  // by worker task; the last one for the tasks after
  int batch = 32, examples = 2000, dim = 10;
  std::string optimizer = "sgd", init = "glorot_uniform";
  double lr = 0.1, noise = 0.01, timeout = 60;
};

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "linear_regression: error: %s\n", what.c_str());
  std::exit(1);
}

template <typename T>
void ParseNumber(const std::string& flag, const std::string& text, T* out) {
  try {
    size_t used = 0;
    *out = static_cast<T>(std::stod(text, &used));
    if (used != text.size()) throw std::invalid_argument(flag);
  } catch (const std::exception&) {
    Fail("flag --" + flag + ": \"" + text + "\" is not a number");
  }
}

Flags ParseFlags(int argc, char** argv) {
  std::map<std::string, std::string> kv;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) Fail("unexpected argument \"" + a + "\"");
    a = a.substr(2);
    if (const size_t eq = a.find('='); eq != std::string::npos) {
      kv[a.substr(0, eq)] = a.substr(eq + 1);
    } else if (i + 1 < argc) {
      kv[a] = argv[++i];
    } else {
      Fail("flag --" + a + " needs a value");
    }
  }
  Flags f;
  auto num = [&](const std::string& k, auto* out) {
    auto it = kv.find(k);
    if (it == kv.end()) return;
    ParseNumber(k, it->second, out);
    kv.erase(it);
  };
  if (auto it = kv.find("steps"); it != kv.end()) {
    f.steps.clear();
    std::stringstream list(it->second);
    for (std::string item; std::getline(list, item, ',');) {
      ParseNumber("steps", item, &f.steps.emplace_back());
    }
    if (f.steps.empty()) Fail("flag --steps needs a count");
    kv.erase(it);
  }
  num("batch", &f.batch);
  num("examples", &f.examples);
  num("dim", &f.dim);
  num("lr", &f.lr);
  num("noise", &f.noise);
  num("timeout", &f.timeout);
  auto str = [&](const std::string& k, std::string* out) {
    if (auto it = kv.find(k); it != kv.end()) {
      *out = it->second;
      kv.erase(it);
    }
  };
  str("optimizer", &f.optimizer);
  str("init", &f.init);
  if (!kv.empty()) Fail("unknown flag --" + kv.begin()->first);
  for (int steps : f.steps) {
    if (steps < 1) Fail("--steps must be positive");
  }
  if (f.batch < 1 || f.examples < 1 || f.dim < 1 || f.timeout <= 0) {
    Fail("--batch, --examples, --dim and --timeout must be positive");
  }
  if (f.init != "glorot_uniform" && f.init != "zeros") Fail("--init is glorot_uniform or zeros");
  return f;
}

void Check(const absl::Status& s, const char* what) {
  if (!s.ok()) Fail(std::string(what) + ": " + std::string(s.message()));
}

}  // namespace

int main(int argc, char** argv) {
  const Flags flags = ParseFlags(argc, argv);
  absl::StatusOr<pstrain::ClientOptions> from_env = pstrain::ClientOptions::FromTfConfig();
  if (!from_env.ok()) Fail(std::string(from_env.status().message()));
  pstrain::ClientOptions options = *from_env;
  options.timeout = absl::Seconds(flags.timeout);
  const int d = flags.dim;
  const int steps = flags.steps[std::min<size_t>(options.task, flags.steps.size() - 1)];

  absl::StatusOr<std::unique_ptr<pstrain::Client>> connected = pstrain::Client::Connect(options);
  Check(connected.status(), "connect");
  pstrain::Client& client = **connected;

  // The true model is the same on every worker (seed 7); each worker draws its own examples,
  // or with tasks every worker the same ones (a task's rows are the same whoever trains it).
  std::mt19937_64 truth_rng(7);
  std::normal_distribution<double> normal(0.0, 1.0);
  Vec w_star(d);
  for (int i = 0; i < d; ++i) w_star(i) = normal(truth_rng);
  const double b_star = 0.5;
  std::mt19937_64 rng(1000 + (client.has_tasks() ? 0 : options.task));
  Matrix x(flags.examples, d);
  Vec y(flags.examples);
  for (int r = 0; r < flags.examples; ++r) {
    for (int c = 0; c < d; ++c) x(r, c) = normal(rng);
    y(r) = x.row(r).dot(w_star) + b_star + flags.noise * normal(rng);
  }
  // From here on a failure is also reported to the chief, so the job ends instead of waiting.
  auto check = [&](const absl::Status& s, const char* what) {
    if (s.ok()) return;
    client.Done(s).IgnoreError();
    Check(s, what);
  };

  const pstrain::OptimizerOptions optimizer{.name = flags.optimizer, .learning_rate = flags.lr};
  const pstrain::VariableOptions w{.name = "w",
                                   .shape = {d, 1},
                                   .initializer = {.kind = flags.init, .seed = 1},
                                   .optimizer = optimizer};
  const pstrain::VariableOptions b{.name = "b", .shape = {1}, .optimizer = optimizer};
  absl::StatusOr<int> wi = client.CreateVariable(w);
  check(wi.status(), "create w");
  absl::StatusOr<int> bi = client.CreateVariable(b);
  check(bi.status(), "create b");

  // Loss 0.5 * mean((x w + b - y)^2); gradients dw = x^T err / n, db = mean(err).
  std::vector<const float*> values;
  std::vector<pstrain::Tensor> grads(2);
  grads[*wi] = pstrain::Tensor({d, 1});
  grads[*bi] = pstrain::Tensor({1});
  // One step on the examples `rows`.
  auto step = [&](const std::vector<int64_t>& rows) {
    const int n = static_cast<int>(rows.size());
    Matrix xb(n, d);
    Vec yb(n);
    for (int r = 0; r < n; ++r) {
      if (rows[r] < 0 || rows[r] >= flags.examples) {
        check(absl::InvalidArgumentError("the chief handed out row " + std::to_string(rows[r]) +
                                         " of " + std::to_string(flags.examples) +
                                         " examples: give --examples the chief's --rows"),
              "task");
      }
      xb.row(r) = x.row(rows[r]);
      yb(r) = y(rows[r]);
    }
    check(client.Pull(&values), "pull");
    const Vec wv = Eigen::Map<const Eigen::VectorXf>(values[*wi], d).cast<double>();
    const Vec err = (xb * wv).array() + static_cast<double>(values[*bi][0]) - yb.array();
    const Vec dw = xb.transpose() * err / n;
    for (int c = 0; c < d; ++c) grads[*wi].values[c] = static_cast<float>(dw(c));
    grads[*bi].values[0] = static_cast<float>(err.mean());
    check(client.Push(grads, n, 0.5 * err.squaredNorm() / n), "push");
  };
  int64_t taken = 0;
  if (client.has_tasks()) {
    while (true) {
      absl::StatusOr<std::optional<pstrain::Task>> task = client.NextTask(flags.batch);
      check(task.status(), "next task");
      if (!task->has_value()) break;
      // A task the job abandoned (it rolled back) is left at once: its pushes would be dropped.
      for (int64_t k = 0; k < (*task)->num_batches() && !client.task_abandoned(); ++k, ++taken) {
        step((*task)->Batch(k));
      }
      check(client.TaskDone(), "task done");
    }
  } else {
    std::uniform_int_distribution<int> pick(0, flags.examples - 1);
    std::vector<int64_t> rows(flags.batch);
    for (; taken < steps; ++taken) {
      for (int64_t& r : rows) r = pick(rng);
      step(rows);
    }
  }

  check(client.Barrier("trained"), "barrier \"trained\"");
  check(client.Pull(&values), "final pull");
  const Vec wv = Eigen::Map<const Eigen::VectorXf>(values[*wi], d).cast<double>();
  const double bv = values[*bi][0];
  const double mse = ((x * wv).array() + bv - y.array()).square().mean();
  nlohmann::json out = {{"task", options.task},
                        {"mode", client.mode()},
                        {"steps", taken},
                        {"global_step", client.global_step()},
                        {"mse", mse},
                        {"w_error", (wv - w_star).norm()},
                        {"b_error", std::abs(bv - b_star)}};
  check(client.Done(), "done");
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
