// The embedding table's row optimizers against torch's sparse ones and against per-row rules.
//
// A table of kRows keys takes several steps of gradients, each for a different subset of its
// keys. The same initial rows and steps go through nn.Embedding(sparse=True) with
// torch.optim.Adagrad or torch.optim.SparseAdam (tests/torch_sparse_reference.py, float32), and
// every row and slot must agree after each step to 1e-5 relative (absolute floor 1e-7).
// SparseAdam keeps one step count per parameter, the table one per row (lazy Adam), so the two
// agree only while every row that was ever updated is updated at every step: that case is checked
// against torch, rows skipping steps against Adam's rule evaluated per row in double. FTRL, which
// torch lacks, is checked against the dense FtrlOptimizer run on each row with that row's
// gradients (the dense one is checked against McMahan's rule in ps_optimizer_test).
// Needs /usr/bin/python3 with torch (Debian's python3-torch); without it these tests fail rather
// than skip.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/keys.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "ps/embedding_table.h"
#include "ps/optimizer.h"

namespace pstrain {
namespace {

constexpr int kRows = 12;
constexpr int kDim = 5;
constexpr int kSteps = 6;
constexpr const char* kPython = "/usr/bin/python3";

struct Step {
  std::vector<int> rows;     // distinct row indices
  std::vector<float> grads;  // kDim per row
};

// (step, tensor) -> kRows * kDim values.
using Reference = std::map<std::pair<int, std::string>, std::vector<double>>;

uint64_t KeyOf(int row) { return MixKey(row + 1); }

TableDef Def(OptimizerConfig optimizer) {
  TableDef def;
  def.set_name("emb");
  def.set_dim(kDim);
  def.mutable_initializer()->set_kind("uniform");
  def.mutable_initializer()->set_low(-1);
  def.mutable_initializer()->set_high(1);
  def.mutable_initializer()->set_seed(3);
  *def.mutable_optimizer() = std::move(optimizer);
  return def;
}

OptimizerConfig Config(const std::string& name, double lr) {
  OptimizerConfig o;
  o.set_name(name);
  o.set_learning_rate(lr);
  return o;
}

// Steps whose rows are chosen by `touched(step, row)`; gradient values are drawn per (step, row)
// with magnitudes in [0.1, 1), so no element sits where Adam's eps dominates.
std::vector<Step> MakeSteps(const std::function<bool(int, int)>& touched) {
  InitializerDef draw;
  draw.set_kind("uniform");
  draw.set_low(-1);
  draw.set_high(1);
  std::vector<Step> steps(kSteps);
  for (int k = 0; k < kSteps; ++k) {
    for (int r = kRows - 1; r >= 0; --r) {  // not in key order
      if (!touched(k, r)) continue;
      steps[k].rows.push_back(r);
      float g[kDim];
      InitialRow(draw, uint64_t(k) * 1000 + r, kDim, g);
      for (float x : g) steps[k].grads.push_back(std::copysign(0.1f + 0.9f * std::abs(x), x));
    }
  }
  return steps;
}

void ApplyStep(EmbeddingTable& t, const Step& s) {
  std::vector<uint64_t> keys;
  for (int r : s.rows) keys.push_back(KeyOf(r));
  ASSERT_TRUE(t.Apply(keys.data(), static_cast<int64_t>(keys.size()), s.grads.data()).ok());
}

std::unique_ptr<EmbeddingTable> MakeTable(const TableDef& def, std::vector<float>* initial) {
  absl::StatusOr<std::unique_ptr<EmbeddingTable>> t = EmbeddingTable::Create(def);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return nullptr;
  std::vector<uint64_t> keys;
  for (int r = 0; r < kRows; ++r) keys.push_back(KeyOf(r));
  initial->assign(kRows * kDim, 0.0f);
  (*t)->Lookup(keys.data(), kRows, initial->data());
  return std::move(*t);
}

std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs the torch reference over `initial` and `steps`; on failure records why and returns an
// empty reference.
Reference RunTorch(const OptimizerConfig& config, const std::vector<float>& initial,
                   const std::vector<Step>& steps) {
  const std::string base =
      absl::StrCat(::testing::TempDir(), "/torch_sparse_",
                   ::testing::UnitTest::GetInstance()->current_test_info()->name(), "_", getpid());
  const std::string in_path = base + ".in", out_path = base + ".out";
  {
    std::ofstream in(in_path);
    char num[32];
    auto write = [&](const std::vector<float>& v) {
      for (float x : v) {
        std::snprintf(num, sizeof(num), "%.9g ", x);  // round-trips a float
        in << num;
      }
      in << "\n";
    };
    in << kRows << " " << kDim << " " << steps.size() << "\n";
    write(initial);
    for (const Step& s : steps) {
      in << s.rows.size();
      for (int r : s.rows) in << " " << r;
      in << "\n";
      write(s.grads);
    }
  }
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  EXPECT_TRUE(google::protobuf::util::MessageToJsonString(config, &json, options).ok());
  const std::string cmd = absl::StrCat(
      kPython, " ", Quote(std::string(PSTRAIN_SOURCE_DIR) + "/tests/torch_sparse_reference.py"),
      " ", Quote(in_path), " ", Quote(out_path), " ", Quote(json), " 2>&1");
  std::string output;
  int code = -1;
  if (FILE* pipe = popen(cmd.c_str(), "r")) {
    char buf[4096];
    while (size_t got = fread(buf, 1, sizeof(buf), pipe)) output.append(buf, got);
    const int status = pclose(pipe);
    code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::remove(in_path.c_str());
  Reference ref;
  if (code != 0) {
    if (code == 3 || code == 127 || access(kPython, X_OK) != 0) {
      ADD_FAILURE() << "python3-torch is missing: " << kPython
                    << " cannot import torch (install Debian's python3-torch); output:\n"
                    << output;
    } else {
      ADD_FAILURE() << "torch reference failed (exit " << code << "): " << cmd << "\n" << output;
    }
    return ref;
  }
  std::ifstream out(out_path);
  for (std::string line; std::getline(out, line);) {
    std::istringstream fields(line);
    int step;
    std::string name;
    if (!(fields >> step >> name)) continue;
    std::vector<double>& values = ref[{step, name}];
    for (double v; fields >> v;) values.push_back(v);
  }
  std::remove(out_path.c_str());
  return ref;
}

void ExpectClose(double want, float got, const std::string& what) {
  EXPECT_NEAR(got, want, std::max(1e-5 * std::abs(want), 1e-7)) << what;
}

// Row `r` of the table and its slots against the reference's values at `step`.
void ExpectRowMatches(const EmbeddingTable& t, int r, int step, const Reference& ref) {
  const auto row = t.Row(KeyOf(r));
  ASSERT_TRUE(row.has_value()) << "row " << r;
  std::vector<std::pair<std::string, const std::vector<float>*>> tensors = {{"weights", &row->row}};
  for (const auto& [name, values] : row->slots) {
    if (name != "step") tensors.emplace_back(name, &values);
  }
  for (const auto& [name, values] : tensors) {
    auto it = ref.find({step, name});
    ASSERT_NE(it, ref.end()) << name << " missing from the reference at step " << step;
    ASSERT_EQ(it->second.size(), size_t{kRows * kDim}) << name;
    for (int j = 0; j < kDim; ++j) {
      ExpectClose(it->second[r * kDim + j], (*values)[j],
                  absl::StrCat(name, " row ", r, " element ", j, " after step ", step));
    }
  }
}

void ExpectMatchesTorch(const OptimizerConfig& config, const std::vector<Step>& steps) {
  std::vector<float> initial;
  auto table = MakeTable(Def(config), &initial);
  ASSERT_NE(table, nullptr);
  const Reference ref = RunTorch(config, initial, steps);
  if (ref.empty()) return;
  for (int k = 0; k < kSteps; ++k) {
    ApplyStep(*table, steps[k]);
    for (int r = 0; r < kRows; ++r) ExpectRowMatches(*table, r, k, ref);
  }
}

// Every row a different pattern: row r is touched at step k unless (k + r) % 3 == 0, and rows
// 10 and 11 never.
bool Skipping(int k, int r) { return r < 10 && (k + r) % 3 != 0; }

TEST(SparseTorchTest, AdagradMatchesTorchWithDifferentKeysEachStep) {
  ExpectMatchesTorch(Config("adagrad", 0.1), MakeSteps(Skipping));
}

TEST(SparseTorchTest, AdagradWithInitialAccumulatorAndEpsilonMatchesTorch) {
  OptimizerConfig c = Config("adagrad", 0.3);
  c.set_initial_accumulator_value(0.25);
  c.set_epsilon(1e-3);
  ExpectMatchesTorch(c, MakeSteps(Skipping));
}

// SparseAdam's single step count equals every row's own count when the rows updated are the
// same at every step (rows 0..7 here; 8..11 never). SparseAdam adds eps after the bias
// correction (eps * sqrt(1 - beta2^t) in Adam's terms); with gradients of at least 0.1 the
// difference is far below the tolerance.
TEST(SparseTorchTest, AdamMatchesSparseAdamWhileTheSameRowsAreUpdatedEveryStep) {
  ExpectMatchesTorch(Config("adam", 0.05), MakeSteps([](int, int r) { return r < 8; }));
}

TEST(SparseTorchTest, AdamWithCustomBetasMatchesSparseAdam) {
  OptimizerConfig c = Config("adam", 0.02);
  c.set_beta1(0.5);
  c.set_beta2(0.75);
  ExpectMatchesTorch(c, MakeSteps([](int, int r) { return r % 2 == 0; }));
}

// Rows that skip steps: each row's moments and step count move only when it has a gradient.
TEST(SparseTorchTest, AdamFollowsThePerRowRuleWhenRowsSkipSteps) {
  const double lr = 0.05, b1 = 0.8, b2 = 0.95, eps = 1e-6;
  OptimizerConfig c = Config("adam", lr);
  c.set_beta1(b1);
  c.set_beta2(b2);
  c.set_epsilon(eps);
  std::vector<float> initial;
  auto table = MakeTable(Def(c), &initial);
  ASSERT_NE(table, nullptr);
  const std::vector<Step> steps = MakeSteps(Skipping);
  std::vector<double> w(initial.begin(), initial.end()), m(w.size(), 0.0), v(w.size(), 0.0);
  std::vector<int> t(kRows, 0);
  for (int k = 0; k < kSteps; ++k) {
    ApplyStep(*table, steps[k]);
    for (size_t j = 0; j < steps[k].rows.size(); ++j) {
      const int r = steps[k].rows[j];
      ++t[r];
      const double bc1 = 1 - std::pow(b1, t[r]), bc2 = 1 - std::pow(b2, t[r]);
      for (int e = 0; e < kDim; ++e) {
        const double g = steps[k].grads[j * kDim + e];
        double& mi = m[r * kDim + e];
        double& vi = v[r * kDim + e];
        mi = b1 * mi + (1 - b1) * g;
        vi = b2 * vi + (1 - b2) * g * g;
        w[r * kDim + e] -= lr * (mi / bc1) / (std::sqrt(vi / bc2) + eps);
      }
    }
    for (int r = 0; r < kRows; ++r) {
      const auto row = table->Row(KeyOf(r));
      ASSERT_TRUE(row.has_value());
      ASSERT_EQ(row->slots.size(), 3u);
      EXPECT_EQ(row->slots[2].first, "step");
      EXPECT_EQ(row->slots[2].second, std::vector<float>{static_cast<float>(t[r])}) << r;
      for (int e = 0; e < kDim; ++e) {
        const std::string at = absl::StrCat(" row ", r, " element ", e, " after step ", k);
        ExpectClose(w[r * kDim + e], row->row[e], "weights" + at);
        ExpectClose(m[r * kDim + e], row->slots[0].second[e], "exp_avg" + at);
        ExpectClose(v[r * kDim + e], row->slots[1].second[e], "exp_avg_sq" + at);
      }
    }
  }
}

// FTRL per row: each row follows the dense FtrlOptimizer given only that row's gradients.
TEST(SparseTorchTest, FtrlFollowsTheDenseRuleOnEachRow) {
  for (double power : {-0.5, -0.3}) {
    OptimizerConfig c = Config("ftrl", 0.2);
    c.set_l1(0.05);
    c.set_l2(0.1);
    c.set_learning_rate_power(power);
    std::vector<float> initial;
    auto table = MakeTable(Def(c), &initial);
    ASSERT_NE(table, nullptr);
    std::vector<std::unique_ptr<Optimizer>> dense;
    for (int r = 0; r < kRows; ++r) {
      absl::StatusOr<std::unique_ptr<Optimizer>> o = CreateOptimizer(c, kDim);
      ASSERT_TRUE(o.ok()) << o.status();
      dense.push_back(std::move(*o));
    }
    const std::vector<Step> steps = MakeSteps(Skipping);
    for (int k = 0; k < kSteps; ++k) {
      ApplyStep(*table, steps[k]);
      for (size_t j = 0; j < steps[k].rows.size(); ++j) {
        const int r = steps[k].rows[j];
        dense[r]->Apply(initial.data() + r * kDim, steps[k].grads.data() + j * kDim, kDim, k);
      }
      for (int r = 0; r < kRows; ++r) {
        const auto row = table->Row(KeyOf(r));
        ASSERT_TRUE(row.has_value());
        const auto slots = dense[r]->slots();
        ASSERT_EQ(row->slots.size(), slots.size());
        for (int e = 0; e < kDim; ++e) {
          const std::string at = absl::StrCat(" row ", r, " element ", e, " step ", k);
          ExpectClose(initial[r * kDim + e], row->row[e], "weights" + at);
          for (size_t s = 0; s < slots.size(); ++s) {
            EXPECT_EQ(row->slots[s].first, slots[s].first);
            ExpectClose(slots[s].second[e], row->slots[s].second[e], slots[s].first + at);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace pstrain
