// The parameter server's optimizers against torch.optim: the same initial weights and five
// pseudo-random gradients go through CreateOptimizer(config) here and through the matching
// torch.optim optimizer in tests/torch_optim_reference.py (float32), and the weights and every
// slot must agree after each step to 1e-5 relative, with an absolute floor near zero (see
// ExpectClose). Needs /usr/bin/python3 with torch (Debian's python3-torch); without it these
// tests fail rather than skip.

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "ps/optimizer.h"

namespace pstrain {
namespace {

constexpr int kN = 20;
constexpr int kSteps = 5;
constexpr double kRelTol = 1e-5;
constexpr double kAbsTol = 1e-7;
constexpr const char* kPython = "/usr/bin/python3";

// Deterministic values in [-scale, scale) (splitmix64), the same on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  float Uniform(float scale) {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    const double unit = static_cast<double>(z >> 11) / 9007199254740992.0;  // [0, 1)
    return static_cast<float>((2.0 * unit - 1.0) * scale);
  }

 private:
  uint64_t state_;
};

// Rows of the reference output: (step, tensor name) -> values.
using Reference = std::map<std::pair<int, std::string>, std::vector<double>>;

std::string ConfigJson(const OptimizerConfig& config) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  const auto status = google::protobuf::util::MessageToJsonString(config, &json, options);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return json;
}

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs the torch reference; on failure records why and returns false.
bool RunTorch(const std::string& in_path, const std::string& out_path,
              const OptimizerConfig& config) {
  const std::string script = std::string(PSTRAIN_SOURCE_DIR) + "/tests/torch_optim_reference.py";
  const std::string cmd =
      absl::StrCat(kPython, " ", ShellQuote(script), " ", ShellQuote(in_path), " ",
                   ShellQuote(out_path), " ", ShellQuote(ConfigJson(config)), " 2>&1");
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "cannot run " << cmd;
    return false;
  }
  std::string output;
  char buf[4096];
  while (size_t got = fread(buf, 1, sizeof(buf), pipe)) output.append(buf, got);
  const int status = pclose(pipe);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code == 0) return true;
  if (code == 3 || code == 127 || access(kPython, X_OK) != 0) {
    ADD_FAILURE() << "python3-torch is missing: " << kPython
                  << " cannot import torch (install Debian's python3-torch); output:\n"
                  << output;
  } else {
    ADD_FAILURE() << "torch reference failed (exit " << code << "): " << cmd << "\n" << output;
  }
  return false;
}

Reference ReadReference(const std::string& path) {
  Reference ref;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    int step;
    std::string name;
    if (!(fields >> step >> name)) continue;
    std::vector<double>& values = ref[{step, name}];
    for (double v; fields >> v;) values.push_back(v);
  }
  return ref;
}

// Compares n values; returns the largest |got - want| / tolerance seen (<= 1 when all pass). The
// tolerance is 1e-5 relative, but at least 1e-7, and at least 4 float32 ulps of the tensor's
// largest element: a slot such as a momentum buffer can be a near-cancelling sum of terms that
// large, which no float32 implementation gets closer than a few of their ulps.
double ExpectClose(const std::vector<double>& want, const float* got, const std::string& what) {
  EXPECT_EQ(want.size(), static_cast<size_t>(kN)) << what;
  if (want.size() != static_cast<size_t>(kN)) return 0;
  double largest = 0;
  for (double x : want) largest = std::max(largest, std::abs(x));
  const double floor = std::max(kAbsTol, 4 * std::numeric_limits<float>::epsilon() * largest);
  double worst = 0;
  for (int i = 0; i < kN; ++i) {
    const double tol = std::max(kRelTol * std::abs(want[i]), floor);
    EXPECT_NEAR(got[i], want[i], tol) << what << " element " << i;
    worst = std::max(worst, std::abs(got[i] - want[i]) / tol);
  }
  return worst;
}

// Applies kSteps pseudo-random gradients with both implementations and compares after each.
void ExpectMatchesTorch(const OptimizerConfig& config, uint64_t seed = 1, float grad_scale = 1.0f) {
  Rng rng(seed);
  std::vector<float> weights(kN);
  for (float& w : weights) w = rng.Uniform(1.0f);
  std::vector<std::vector<float>> grads(kSteps, std::vector<float>(kN));
  for (std::vector<float>& g : grads) {
    for (float& x : g) x = rng.Uniform(grad_scale);
  }

  const std::string base =
      absl::StrCat(::testing::TempDir(), "/torch_optim_",
                   ::testing::UnitTest::GetInstance()->current_test_info()->name(), "_", getpid());
  const std::string in_path = base + ".in", out_path = base + ".out";
  {
    std::ofstream in(in_path);
    auto write_row = [&in](const std::vector<float>& row) {
      char num[32];
      for (float x : row) {
        std::snprintf(num, sizeof(num), "%.9g ", x);  // round-trips a float
        in << num;
      }
      in << "\n";
    };
    in << kN << " " << kSteps << "\n";
    write_row(weights);
    for (const std::vector<float>& g : grads) write_row(g);
    ASSERT_TRUE(in.good()) << in_path;
  }
  const bool ran = RunTorch(in_path, out_path, config);
  std::remove(in_path.c_str());
  if (!ran) return;
  const Reference ref = ReadReference(out_path);
  std::remove(out_path.c_str());

  absl::StatusOr<std::unique_ptr<Optimizer>> opt = CreateOptimizer(config, kN);
  ASSERT_TRUE(opt.ok()) << opt.status();
  double worst = 0;  // largest error as a fraction of its tolerance
  for (int step = 0; step < kSteps; ++step) {
    (*opt)->Apply(weights.data(), grads[step].data(), kN, step);
    const std::string at = absl::StrCat(config.name(), " after step ", step, ": ");

    std::set<std::string> torch_slots, our_slots;
    for (const auto& [key, values] : ref) {
      if (key.first == step && key.second != "weights") torch_slots.insert(key.second);
    }
    for (const auto& [slot, values] : (*opt)->slots()) our_slots.insert(slot);
    EXPECT_EQ(our_slots, torch_slots) << at << "slot names";

    auto it = ref.find({step, "weights"});
    ASSERT_NE(it, ref.end()) << at << "no weights in the torch output";
    worst = std::max(worst, ExpectClose(it->second, weights.data(), at + "weights"));
    for (const auto& [slot, values] : (*opt)->slots()) {
      if (auto s = ref.find({step, slot}); s != ref.end()) {
        worst = std::max(worst, ExpectClose(s->second, values, at + slot));
      }
    }
  }
  std::printf("largest difference from torch: %.3g of the tolerance\n", worst);
}

OptimizerConfig Config(const std::string& name, double lr) {
  OptimizerConfig c;
  c.set_name(name);
  c.set_learning_rate(lr);
  return c;
}

TEST(TorchOptimTest, Sgd) { ExpectMatchesTorch(Config("sgd", 0.1)); }

TEST(TorchOptimTest, Momentum) {
  OptimizerConfig c = Config("momentum", 0.05);
  c.set_momentum(0.9);
  ExpectMatchesTorch(c);
}

TEST(TorchOptimTest, MomentumNesterov) {
  OptimizerConfig c = Config("momentum", 0.05);
  c.set_momentum(0.8);
  c.set_nesterov(true);
  ExpectMatchesTorch(c, 2);
}

TEST(TorchOptimTest, MomentumZeroIsPlainSgd) { ExpectMatchesTorch(Config("momentum", 0.1), 3); }

TEST(TorchOptimTest, AdagradDefaults) { ExpectMatchesTorch(Config("adagrad", 0.1), 4); }

TEST(TorchOptimTest, AdagradInitialAccumulatorAndEpsilon) {
  OptimizerConfig c = Config("adagrad", 0.2);
  c.set_initial_accumulator_value(0.5);
  c.set_epsilon(1e-3);
  ExpectMatchesTorch(c, 5);
}

TEST(TorchOptimTest, AdamDefaults) { ExpectMatchesTorch(Config("adam", 0.01), 6); }

TEST(TorchOptimTest, AdamCustomBetas) {
  OptimizerConfig c = Config("adam", 0.05);
  c.set_beta1(0.5);
  c.set_beta2(0.75);
  c.set_epsilon(1e-3);
  ExpectMatchesTorch(c, 7);
}

TEST(TorchOptimTest, AdamZeroBeta1) {  // an explicit 0 is a valid beta, not "use the default"
  OptimizerConfig c = Config("adam", 0.01);
  c.set_beta1(0.0);
  c.set_beta2(0.9);
  ExpectMatchesTorch(c, 8);
}

TEST(TorchOptimTest, RmsPropDefaults) { ExpectMatchesTorch(Config("rmsprop", 0.01), 9); }

TEST(TorchOptimTest, RmsPropWithMomentum) {
  OptimizerConfig c = Config("rmsprop", 0.01);
  c.set_momentum(0.9);
  c.set_rho(0.9);
  c.set_epsilon(0.01);  // large enough to show where eps enters
  ExpectMatchesTorch(c, 10);
}

TEST(TorchOptimTest, ClipNormWithMomentum) {
  // Gradients in [-2, 2) over 20 elements have norms around 5: 4 clips most steps, not all.
  OptimizerConfig c = Config("momentum", 0.05);
  c.set_momentum(0.9);
  c.set_clip_norm(4.0);
  ExpectMatchesTorch(c, 11, 2.0f);
}

TEST(TorchOptimTest, ClipNormWithAdagrad) {
  OptimizerConfig c = Config("adagrad", 0.1);
  c.set_clip_norm(1.5);
  ExpectMatchesTorch(c, 12, 2.0f);
}

TEST(TorchOptimTest, StepScheduleWithMomentum) {  // torch.optim.lr_scheduler.StepLR
  OptimizerConfig c = Config("momentum", 0.1);
  c.set_momentum(0.5);
  c.mutable_schedule()->set_kind("step");
  c.mutable_schedule()->set_step_size(2);
  c.mutable_schedule()->set_decay_rate(0.5);
  ExpectMatchesTorch(c, 13);
}

TEST(TorchOptimTest, StepScheduleWithAdam) {
  OptimizerConfig c = Config("adam", 0.02);
  c.mutable_schedule()->set_kind("step");
  c.mutable_schedule()->set_step_size(1);
  c.mutable_schedule()->set_decay_rate(0.7);
  ExpectMatchesTorch(c, 14);
}

TEST(TorchOptimTest, CosineScheduleWithWarmupAndAdam) {
  // Steps 0, 1 warm up; 2..4 decay to min_lr at total_steps 4 (step 4 stays at min_lr).
  OptimizerConfig c = Config("adam", 0.05);
  c.mutable_schedule()->set_kind("cosine");
  c.mutable_schedule()->set_warmup_steps(2);
  c.mutable_schedule()->set_total_steps(4);
  c.mutable_schedule()->set_min_lr(0.005);
  ExpectMatchesTorch(c, 15);
}

TEST(TorchOptimTest, CosineScheduleWithRmsPropAndClipping) {
  OptimizerConfig c = Config("rmsprop", 0.02);
  c.set_momentum(0.5);
  c.set_clip_norm(3.0);
  c.mutable_schedule()->set_kind("cosine");
  c.mutable_schedule()->set_total_steps(3);
  ExpectMatchesTorch(c, 16, 2.0f);
}

}  // namespace
}  // namespace pstrain
