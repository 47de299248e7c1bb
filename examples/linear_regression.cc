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
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "Eigen/Core"
#include "client/client.h"
#include "common/tensor.h"
#include "nlohmann/json.hpp"

namespace {

using Matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vec = Eigen::VectorXd;

struct Flags {
  int steps = 200, batch = 32, examples = 2000, dim = 10;
  std::string optimizer = "sgd", init = "glorot_uniform";
  double lr = 0.1, noise = 0.01, timeout = 60;
};

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "linear_regression: error: %s\n", what.c_str());
  std::exit(1);
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
    try {
      size_t used = 0;
      *out = static_cast<std::remove_pointer_t<decltype(out)>>(std::stod(it->second, &used));
      if (used != it->second.size()) throw std::invalid_argument(k);
    } catch (const std::exception&) {
      Fail("flag --" + k + ": \"" + it->second + "\" is not a number");
    }
    kv.erase(it);
  };
  num("steps", &f.steps);
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
  if (f.steps < 1 || f.batch < 1 || f.examples < 1 || f.dim < 1 || f.timeout <= 0) {
    Fail("--steps, --batch, --examples, --dim and --timeout must be positive");
  }
  if (f.init != "glorot_uniform" && f.init != "zeros") Fail("--init is glorot_uniform or zeros");
  return f;
}

// Task index and addresses from TF_CONFIG.
pstrain::ClientOptions FromTfConfig() {
  const char* env = std::getenv("TF_CONFIG");
  if (env == nullptr) Fail("TF_CONFIG is not set");
  pstrain::ClientOptions o;
  try {
    const nlohmann::json j = nlohmann::json::parse(env);
    const nlohmann::json& task = j.at("task");
    if (task.at("type").get<std::string>() != "worker") {
      Fail("TF_CONFIG's task.type is \"" + task.at("type").get<std::string>() +
           "\"; this program runs as a worker");
    }
    o.task = task.at("index").get<int>();
    o.chief = j.at("cluster").at("chief").at(0).get<std::string>();
    o.ps = j.at("cluster").at("ps").get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    Fail(std::string("TF_CONFIG: ") + e.what());
  }
  return o;
}

void Check(const absl::Status& s, const char* what) {
  if (!s.ok()) Fail(std::string(what) + ": " + std::string(s.message()));
}

}  // namespace

int main(int argc, char** argv) {
  const Flags flags = ParseFlags(argc, argv);
  pstrain::ClientOptions options = FromTfConfig();
  options.timeout = absl::Seconds(flags.timeout);
  const int d = flags.dim;

  // The true model is the same on every worker (seed 7); each worker draws its own examples.
  std::mt19937_64 truth_rng(7);
  std::normal_distribution<double> normal(0.0, 1.0);
  Vec w_star(d);
  for (int i = 0; i < d; ++i) w_star(i) = normal(truth_rng);
  const double b_star = 0.5;
  std::mt19937_64 rng(1000 + options.task);
  Matrix x(flags.examples, d);
  Vec y(flags.examples);
  for (int r = 0; r < flags.examples; ++r) {
    for (int c = 0; c < d; ++c) x(r, c) = normal(rng);
    y(r) = x.row(r).dot(w_star) + b_star + flags.noise * normal(rng);
  }

  absl::StatusOr<std::unique_ptr<pstrain::Client>> connected = pstrain::Client::Connect(options);
  Check(connected.status(), "connect");
  pstrain::Client& client = **connected;
  // From here on a failure is also reported to the chief, so the job ends instead of waiting.
  auto check = [&](const absl::Status& s, const char* what) {
    if (s.ok()) return;
    client.Done(s).IgnoreError();
    Check(s, what);
  };

  pstrain::VariableOptions w{.name = "w", .shape = {d, 1}};
  w.initializer.set_kind(flags.init);
  w.initializer.set_seed(1);
  w.optimizer.set_name(flags.optimizer);
  w.optimizer.set_learning_rate(flags.lr);
  pstrain::VariableOptions b{.name = "b", .shape = {1}};
  b.initializer.set_kind("zeros");
  b.optimizer = w.optimizer;
  absl::StatusOr<int> wi = client.CreateVariable(w);
  check(wi.status(), "create w");
  absl::StatusOr<int> bi = client.CreateVariable(b);
  check(bi.status(), "create b");

  // Loss 0.5 * mean((x w + b - y)^2); gradients dw = x^T err / n, db = mean(err).
  std::vector<const float*> values;
  std::vector<pstrain::Tensor> grads(2);
  grads[*wi] = pstrain::Tensor({d, 1});
  grads[*bi] = pstrain::Tensor({1});
  std::uniform_int_distribution<int> pick(0, flags.examples - 1);
  Matrix xb(flags.batch, d);
  Vec yb(flags.batch);
  for (int step = 0; step < flags.steps; ++step) {
    for (int r = 0; r < flags.batch; ++r) {
      const int i = pick(rng);
      xb.row(r) = x.row(i);
      yb(r) = y(i);
    }
    check(client.Pull(&values), "pull");
    const Vec wv = Eigen::Map<const Eigen::VectorXf>(values[*wi], d).cast<double>();
    const Vec err = (xb * wv).array() + static_cast<double>(values[*bi][0]) - yb.array();
    const Vec dw = xb.transpose() * err / flags.batch;
    for (int c = 0; c < d; ++c) grads[*wi].values[c] = static_cast<float>(dw(c));
    grads[*bi].values[0] = static_cast<float>(err.mean());
    check(client.Push(grads, flags.batch, 0.5 * err.squaredNorm() / flags.batch), "push");
  }

  check(client.Barrier("trained"), "barrier \"trained\"");
  check(client.Pull(&values), "final pull");
  const Vec wv = Eigen::Map<const Eigen::VectorXf>(values[*wi], d).cast<double>();
  const double bv = values[*bi][0];
  const double mse = ((x * wv).array() + bv - y.array()).square().mean();
  nlohmann::json out = {{"task", options.task},
                        {"mode", client.mode()},
                        {"steps", flags.steps},
                        {"global_step", client.global_step()},
                        {"mse", mse},
                        {"w_error", (wv - w_star).norm()},
                        {"b_error", std::abs(bv - b_star)}};
  check(client.Done(), "done");
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
