// A click-through-rate model trained through pstrain's client API: a factorization machine over
// categorical features, its rows in embedding tables on the parameter servers.
//
// Runs as one worker task of a cluster described by TF_CONFIG (TensorFlow's format), with a
// chief started as `pstrain server --job chief --model external` (see linear_regression.cc).
// Every worker draws its own clicks from the same hidden model: `--fields` categorical fields,
// each taking one of `--ids` values (Zipf-distributed, as ids of real logs are), and a label
// from a logistic model with a weight per value and pairwise interactions between fields. Each
// (field, value) is hashed to a uint64 key. The model, trained by the workers together:
//   logit = bias + sum_f w[key_f] + sum_{f<g} <v[key_f], v[key_g]>
// with w a table of dim 1 ("wide"), v a table of dim --dim ("fm") and bias a dense variable.
// After training the workers meet at a barrier and each scores the same held-out clicks; it
// prints one JSON line:
//   {"task": 0, "mode": "sync", "steps": 400, "auc": 0.83, "truth_auc": 0.85,
//    "logloss": 0.52, "initial_logloss": 0.69, "rows": 16000, ...}
// where truth_auc is the hidden model's own AUC on those clicks, the best any model can reach.
// Flags (--name=value): --steps 400 --batch 256 --fields 8 --ids 200 --dim 8 --lr 0.1
// --test 5000 --timeout 60.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "client/client.h"
#include "nlohmann/json.hpp"

namespace {

struct Flags {
  int steps = 400, batch = 256, fields = 8, ids = 200, dim = 8, test = 5000;
  double lr = 0.1, timeout = 60;
};

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "ctr_embeddings: error: %s\n", what.c_str());
  std::exit(1);
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  const std::map<std::string, double*> reals = {{"lr", &f.lr}, {"timeout", &f.timeout}};
  const std::map<std::string, int*> ints = {{"steps", &f.steps},   {"batch", &f.batch},
                                            {"fields", &f.fields}, {"ids", &f.ids},
                                            {"dim", &f.dim},       {"test", &f.test}};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('=');
    if (a.rfind("--", 0) != 0 || eq == std::string::npos) Fail("expected --name=value: " + a);
    const std::string name = a.substr(2, eq - 2), text = a.substr(eq + 1);
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0') Fail("flag --" + name + ": \"" + text + "\" is no number");
    if (auto it = reals.find(name); it != reals.end()) {
      *it->second = v;
    } else if (auto jt = ints.find(name); jt != ints.end() && v == std::floor(v)) {
      *jt->second = static_cast<int>(v);
    } else {
      Fail("unknown flag, or not a whole number: --" + name);
    }
  }
  if (f.steps < 1 || f.batch < 1 || f.fields < 2 || f.ids < 1 || f.dim < 1 || f.test < 2 ||
      f.lr <= 0 || f.timeout <= 0) {
    Fail("every flag must be positive, and --fields at least 2");
  }
  return f;
}

void Check(const absl::Status& s, const char* what) {
  if (!s.ok()) Fail(std::string(what) + ": " + std::string(s.message()));
}

// The feature id of value `value` of field `field`, hashed as CTR pipelines hash theirs.
uint64_t Key(int field, int value) {
  uint64_t k = (static_cast<uint64_t>(field) << 32 | static_cast<uint32_t>(value)) + 1;
  k ^= k >> 31;
  k *= 0x7fb5d329728ea185ULL;
  k ^= k >> 27;
  return k;
}

// The hidden model the clicks come from, the same in every worker (seed 7).
struct Truth {
  int fields, ids;
  double bias = -0.5;
  std::vector<double> w;                 // [field][value]
  std::vector<std::array<double, 4>> u;  // [field][value], interaction factors
  Truth(int fields, int ids) : fields(fields), ids(ids), w(fields * ids), u(fields * ids) {
    std::mt19937_64 rng(7);
    std::normal_distribution<double> n(0, 1);
    for (double& x : w) x = 0.6 * n(rng);
    for (auto& f : u) {
      for (double& x : f) x = 0.35 * n(rng);
    }
  }
  double Logit(const int* values) const {
    double z = bias;
    for (int f = 0; f < fields; ++f) z += w[f * ids + values[f]];
    for (int f = 0; f < fields; ++f) {
      for (int g = f + 1; g < fields; ++g) {
        const auto &a = u[f * ids + values[f]], &b = u[g * ids + values[g]];
        for (int d = 0; d < 4; ++d) z += a[d] * b[d];
      }
    }
    return z;
  }
};

struct Clicks {
  std::vector<int> values;  // [example][field]
  std::vector<float> labels;
  std::vector<double> truth_logits;
};

Clicks Draw(const Truth& truth, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  // Zipf(1.1) over the values of a field: a few are frequent, most are rare.
  std::vector<double> weights(truth.ids);
  for (int i = 0; i < truth.ids; ++i) weights[i] = 1.0 / std::pow(i + 1.0, 1.1);
  std::discrete_distribution<int> zipf(weights.begin(), weights.end());
  std::uniform_real_distribution<double> uniform(0, 1);
  Clicks c;
  c.values.resize(static_cast<size_t>(n) * truth.fields);
  for (int e = 0; e < n; ++e) {
    int* v = &c.values[static_cast<size_t>(e) * truth.fields];
    for (int f = 0; f < truth.fields; ++f) v[f] = zipf(rng);
    const double z = truth.Logit(v);
    c.truth_logits.push_back(z);
    c.labels.push_back(uniform(rng) < 1 / (1 + std::exp(-z)) ? 1.f : 0.f);
  }
  return c;
}

// Area under the ROC curve of `scores` for `labels` (rank statistic, ties counted half).
double Auc(const std::vector<double>& scores, const std::vector<float>& labels) {
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  double rank_sum = 0, positives = 0;
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j < order.size() && scores[order[j]] == scores[order[i]]) ++j;
    const double rank = (i + j + 1) / 2.0;  // average 1-based rank of the tie group
    for (size_t k = i; k < j; ++k) {
      if (labels[order[k]] > 0.5f) {
        rank_sum += rank;
        ++positives;
      }
    }
    i = j;
  }
  const double negatives = static_cast<double>(scores.size()) - positives;
  if (positives == 0 || negatives == 0) return 0.5;
  return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives);
}

// The distinct keys of a batch and, per example and field, the index of its key among them.
struct BatchKeys {
  std::vector<uint64_t> keys;
  std::vector<int> slot;  // [example][field]
  std::unordered_map<uint64_t, int> index;
  void Build(const Clicks& c, int begin, int n, int fields) {
    keys.clear();
    slot.clear();
    index.clear();
    for (int e = begin; e < begin + n; ++e) {
      for (int f = 0; f < fields; ++f) {
        const uint64_t k = Key(f, c.values[static_cast<size_t>(e) * fields + f]);
        auto [it, added] = index.try_emplace(k, static_cast<int>(keys.size()));
        if (added) keys.push_back(k);
        slot.push_back(it->second);
      }
    }
  }
};

// The model's logits for examples [begin, begin + n) of `c`, from the rows of `keys`; with
// `grad_w`/`grad_v`/`grad_bias` set, also the gradients of the mean log loss, and it returns
// that loss.
struct Fm {
  int fields, dim;
  double Run(const Clicks& c, int begin, int n, const BatchKeys& keys, float bias, const float* w,
             const float* v, std::vector<double>* logits, std::vector<float>* grad_w,
             std::vector<float>* grad_v, float* grad_bias) const {
    std::vector<double> sum(dim);
    double loss = 0;
    if (grad_w != nullptr) {
      grad_w->assign(keys.keys.size(), 0.f);
      grad_v->assign(keys.keys.size() * dim, 0.f);
      *grad_bias = 0;
    }
    logits->clear();
    for (int e = 0; e < n; ++e) {
      const int* s = &keys.slot[static_cast<size_t>(e) * fields];
      double z = bias, squares = 0;
      std::fill(sum.begin(), sum.end(), 0.0);
      for (int f = 0; f < fields; ++f) {
        z += w[s[f]];
        for (int d = 0; d < dim; ++d) {
          const double x = v[static_cast<size_t>(s[f]) * dim + d];
          sum[d] += x;
          squares += x * x;
        }
      }
      for (int d = 0; d < dim; ++d) z += 0.5 * sum[d] * sum[d];
      z -= 0.5 * squares;
      logits->push_back(z);
      const float y = c.labels[begin + e];
      loss += std::max(z, 0.0) - z * y + std::log1p(std::exp(-std::abs(z)));
      if (grad_w == nullptr) continue;
      const float g = static_cast<float>((1 / (1 + std::exp(-z)) - y) / n);
      *grad_bias += g;
      for (int f = 0; f < fields; ++f) {
        (*grad_w)[s[f]] += g;
        for (int d = 0; d < dim; ++d) {
          const size_t i = static_cast<size_t>(s[f]) * dim + d;
          (*grad_v)[i] += static_cast<float>(g * (sum[d] - v[i]));
        }
      }
    }
    return loss / n;
  }
};

}  // namespace

int main(int argc, char** argv) {
  const Flags flags = ParseFlags(argc, argv);
  absl::StatusOr<pstrain::ClientOptions> from_env = pstrain::ClientOptions::FromTfConfig();
  if (!from_env.ok()) Fail(std::string(from_env.status().message()));
  pstrain::ClientOptions options = *from_env;
  options.timeout = absl::Seconds(flags.timeout);

  const Truth truth(flags.fields, flags.ids);
  const Clicks train = Draw(truth, flags.steps * flags.batch, 1000 + options.task);
  const Clicks test = Draw(truth, flags.test, 99);  // the same held-out clicks everywhere

  absl::StatusOr<std::unique_ptr<pstrain::Client>> connected = pstrain::Client::Connect(options);
  Check(connected.status(), "connect");
  pstrain::Client& client = **connected;
  // From here on a failure is also reported to the chief, so the job ends instead of waiting.
  auto check = [&](const absl::Status& s, const char* what) {
    if (s.ok()) return;
    client.Done(s).IgnoreError();
    Check(s, what);
  };
  const pstrain::OptimizerOptions adagrad = {.name = "adagrad", .learning_rate = flags.lr};
  absl::StatusOr<int> bias =
      client.CreateVariable({.name = "bias", .shape = {1}, .optimizer = adagrad});
  check(bias.status(), "create bias");
  absl::StatusOr<int> wide = client.CreateTable({.name = "wide", .dim = 1, .optimizer = adagrad});
  check(wide.status(), "create table wide");
  absl::StatusOr<int> fm =
      client.CreateTable({.name = "fm",
                          .dim = flags.dim,
                          .initializer = {.kind = "normal", .stddev = 0.1, .seed = 3},
                          .optimizer = adagrad});
  check(fm.status(), "create table fm");

  const Fm model{flags.fields, flags.dim};
  BatchKeys keys;
  std::vector<const float*> values, rows;
  std::vector<double> logits;
  std::vector<float> grad_w, grad_v;
  std::vector<pstrain::Tensor> grads = {pstrain::Tensor({1})};
  double first_loss = 0, last_loss = 0;
  for (int step = 0; step < flags.steps; ++step) {
    const int begin = step * flags.batch;
    keys.Build(train, begin, flags.batch, flags.fields);
    check(client.Pull(&values), "pull");
    check(client.Lookup({keys.keys, keys.keys}, &rows), "lookup");
    const double loss = model.Run(train, begin, flags.batch, keys, values[*bias][0], rows[*wide],
                                  rows[*fm], &logits, &grad_w, &grad_v, grads[0].data());
    if (step == 0) first_loss = loss;
    last_loss = loss;
    check(client.Push(grads, flags.batch, loss), "push");
    check(client.PushSparse({keys.keys, keys.keys}, {grad_w, grad_v}), "push sparse");
  }
  const int64_t steps = client.pushes();

  // Every worker's updates are in once all arrived here; then each scores the held-out clicks.
  check(client.Barrier("trained"), "barrier");
  keys.Build(test, 0, flags.test, flags.fields);
  check(client.Pull(&values), "final pull");
  check(client.Lookup({keys.keys, keys.keys}, &rows), "final lookup");
  const double test_loss = model.Run(test, 0, flags.test, keys, values[*bias][0], rows[*wide],
                                     rows[*fm], &logits, nullptr, nullptr, nullptr);
  nlohmann::json out = {{"task", options.task},
                        {"mode", client.mode()},
                        {"steps", steps},
                        {"auc", Auc(logits, test.labels)},
                        {"truth_auc", Auc(test.truth_logits, test.labels)},
                        {"logloss", test_loss},
                        {"initial_logloss", first_loss},
                        {"last_batch_logloss", last_loss},
                        {"test_keys", keys.keys.size()}};
  check(client.Done(), "done");
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
