// The model interface: Create's checks, the keys a batch touches, gradients of the linear and
// Wide & Deep models against finite differences and a hand-computed case, the MLP through the
// interface, and the metrics against hand-computed values.
#include <cmath>
#include <limits>
#include <map>
#include <random>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/model.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A batch of `rows` rows, each with `dense` random features and one feature per field with a key
// drawn from a small vocabulary (so keys repeat within the batch).
Examples RandomBatch(int rows, int dense, int fields, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  Examples e;
  e.dense_dim = dense;
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < dense; ++c) e.dense.push_back(u(rng));
    for (int f = 0; f < fields; ++f) {
      e.sparse_keys.push_back(100 * f + rng() % 4);
      e.sparse_values.push_back(f == 0 ? 1.0f : 0.5f + 0.5f * std::abs(u(rng)));
      e.sparse_fields.push_back(f);
    }
    e.sparse_offsets.push_back(static_cast<int64_t>(e.sparse_keys.size()));
    e.labels.push_back(rng() % 2);
  }
  return e;
}

// Parameters and table rows a model reads, filled with random values.
struct State {
  std::vector<Tensor> params;
  std::vector<std::vector<float>> rows;
  ModelInputs Inputs() const {
    ModelInputs in;
    for (const Tensor& t : params) in.params.push_back(t.data());
    for (const auto& r : rows) in.rows.push_back(r.data());
    return in;
  }
};

State RandomState(Model& m, const Examples& batch, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-0.5, 0.5);
  State s;
  for (const ParamSpec& p : m.params()) {
    s.params.emplace_back(p.shape, 0.0f);
    for (float& v : s.params.back().values) v = u(rng);
  }
  const auto& keys = m.TouchedKeys(batch);
  for (size_t t = 0; t < keys.size(); ++t) {
    s.rows.emplace_back(keys[t].size() * m.tables()[t].dim);
    for (float& v : s.rows.back()) v = u(rng);
  }
  return s;
}

float Loss(Model& m, const State& s, const Examples& batch) {
  ModelGrads unused;
  m.TouchedKeys(batch);
  return m.ForwardBackward(s.Inputs(), batch, &unused);
}

// Every analytic derivative (parameters and table rows) against a central difference.
void CheckGradients(Model& m, const Examples& batch) {
  State s = RandomState(m, batch, 7);
  ModelGrads g;
  m.TouchedKeys(batch);
  m.ForwardBackward(s.Inputs(), batch, &g);
  ASSERT_EQ(g.params.size(), s.params.size());
  ASSERT_EQ(g.rows.size(), s.rows.size());
  constexpr float kEps = 1e-2f;
  auto check = [&](float* value, float analytic, const std::string& what) {
    const float saved = *value;
    *value = saved + kEps;
    const double up = Loss(m, s, batch);
    *value = saved - kEps;
    const double down = Loss(m, s, batch);
    *value = saved;
    const double numeric = (up - down) / (2 * kEps);
    EXPECT_NEAR(analytic, numeric, 2e-4 + 1e-2 * std::abs(numeric)) << what;
  };
  for (size_t k = 0; k < s.params.size(); ++k) {
    for (int64_t i = 0; i < s.params[k].size(); ++i) {
      check(&s.params[k].values[i], g.params[k].values[i],
            m.params()[k].name + "[" + std::to_string(i) + "]");
    }
  }
  for (size_t t = 0; t < s.rows.size(); ++t) {
    ASSERT_EQ(g.rows[t].size(), s.rows[t].size()) << m.tables()[t].name;
    for (size_t i = 0; i < s.rows[t].size(); ++i) {
      check(&s.rows[t][i], g.rows[t][i], m.tables()[t].name + " row value " + std::to_string(i));
    }
  }
}

TEST(ModelCreateTest, RefusesBadConfigs) {
  ModelConfig c;
  c.kind = "xgboost";
  EXPECT_THAT(std::string(Model::Create(c).status().message()),
              HasSubstr("unknown model \"xgboost\" (known: mlp, linear, wide_deep)"));
  c.kind = "mlp";
  c.dense_features = 0;
  EXPECT_THAT(std::string(Model::Create(c).status().message()), HasSubstr("needs dense features"));
  c.dense_features = 4;
  c.hidden = {8, 0};
  EXPECT_THAT(std::string(Model::Create(c).status().message()), HasSubstr("hidden width 0"));
  c.kind = "wide_deep";
  c.hidden = {8};
  c.categorical_fields = 2;
  c.embedding_dim = 0;
  EXPECT_THAT(std::string(Model::Create(c).status().message()), HasSubstr("embedding_dim 0"));
  c.embedding_dim = 4;
  EXPECT_TRUE(Model::Create(c).ok());
}

TEST(ModelKeysTest, DistinctSortedKeysPerTable) {
  ModelConfig c;
  c.kind = "wide_deep";
  c.dense_features = 1;
  c.categorical_fields = 2;
  c.embedding_dim = 3;
  c.hidden = {4};
  std::unique_ptr<Model> m = *Model::Create(c);
  Examples b;
  b.dense_dim = 1;
  // Row 0: field 0 key 9, field 1 key 5. Row 1: field 0 key 9, field 1 key 2, field 7 key 1
  // (outside the categorical fields: wide only).
  b.dense = {0.5f, -0.5f};
  b.sparse_keys = {9, 5, 9, 2, 1};
  b.sparse_values = {1, 1, 1, 1, 1};
  b.sparse_fields = {0, 1, 0, 1, 7};
  b.sparse_offsets = {0, 2, 5};
  b.labels = {1, 0};
  const auto& keys = m->TouchedKeys(b);
  ASSERT_EQ(keys.size(), 3u);  // wide, embedding/C1, embedding/C2
  EXPECT_THAT(keys[0], ElementsAre(1, 2, 5, 9));
  EXPECT_THAT(keys[1], ElementsAre(9));
  EXPECT_THAT(keys[2], ElementsAre(2, 5));
  EXPECT_EQ(m->tables()[1].name, "embedding/C1");
  EXPECT_EQ(m->tables()[2].dim, 3);
  c.shared_embedding = true;
  m = *Model::Create(c);
  const auto& shared = m->TouchedKeys(b);
  ASSERT_EQ(shared.size(), 2u);
  EXPECT_THAT(shared[1], ElementsAre(2, 5, 9));
}

TEST(LinearModelTest, HandComputedStep) {
  ModelConfig c;
  c.kind = "linear";
  c.dense_features = 1;
  std::unique_ptr<Model> m = *Model::Create(c);
  ASSERT_EQ(m->params().size(), 2u);  // kernel [1, 1], bias [1]
  Examples b;
  b.dense_dim = 1;
  b.dense = {2.0f};
  b.sparse_keys = {4, 8};
  b.sparse_values = {1.0f, 3.0f};
  b.sparse_fields = {0, 0};
  b.sparse_offsets = {0, 2};
  b.labels = {1};
  EXPECT_THAT(m->TouchedKeys(b)[0], ElementsAre(4, 8));
  // logit = 0.1 + 2 * 0.25 + 1 * 0.2 + 3 * (-0.3) = -0.1
  const float kernel = 0.25f, bias = 0.1f, rows[2] = {0.2f, -0.3f};
  ModelInputs in{{&kernel, &bias}, {rows}};
  ModelGrads g;
  const float loss = m->ForwardBackward(in, b, &g);
  const double p = 1.0 / (1.0 + std::exp(0.1));
  EXPECT_NEAR(loss, -std::log(p), 1e-6);
  EXPECT_NEAR(g.params[0].values[0], (p - 1) * 2, 1e-6);
  EXPECT_NEAR(g.params[1].values[0], p - 1, 1e-6);
  EXPECT_NEAR(g.rows[0][0], (p - 1) * 1, 1e-6);
  EXPECT_NEAR(g.rows[0][1], (p - 1) * 3, 1e-6);
  std::vector<float> pred;
  m->Predict(in, b, &pred);
  EXPECT_NEAR(pred[0], p, 1e-6);
}

TEST(LinearModelTest, GradientsMatchFiniteDifferences) {
  ModelConfig c;
  c.kind = "linear";
  c.dense_features = 3;
  std::unique_ptr<Model> m = *Model::Create(c);
  CheckGradients(*m, RandomBatch(6, 3, 4, 1));
}

TEST(WideDeepModelTest, GradientsMatchFiniteDifferences) {
  // Three fields interact through their dot products; a single field has no pairs, so its
  // embedding feeds the MLP itself.
  for (int fields : {3, 1}) {
    for (bool shared : {false, true}) {
      SCOPED_TRACE(absl::StrCat(fields, " fields, ", shared ? "shared table" : "a table each"));
      ModelConfig c;
      c.kind = "wide_deep";
      c.dense_features = 2;
      c.categorical_fields = fields;
      c.embedding_dim = 2;
      c.hidden = {5, 3};
      c.shared_embedding = shared;
      std::unique_ptr<Model> m = *Model::Create(c);
      CheckGradients(*m, RandomBatch(5, 2, fields, 2));
    }
  }
}

// The wide table learns by FTRL-Proximal with an L2 prior, the embeddings by Adagrad; the
// linear model leaves its table to the chief's --table_optimizer.
TEST(WideDeepModelTest, PicksItsTablesOptimizers) {
  ModelConfig c;
  c.kind = "wide_deep";
  c.dense_features = 2;
  c.categorical_fields = 3;
  c.embedding_dim = 4;
  std::unique_ptr<Model> m = *Model::Create(c);
  ASSERT_EQ(m->tables().size(), 4u);
  ASSERT_TRUE(m->tables()[0].optimizer.has_value());
  EXPECT_EQ(m->tables()[0].optimizer->name, "ftrl");
  EXPECT_GT(m->tables()[0].optimizer->l2, 0);
  for (size_t t = 1; t < m->tables().size(); ++t) {
    ASSERT_TRUE(m->tables()[t].optimizer.has_value());
    EXPECT_EQ(m->tables()[t].optimizer->name, "adagrad");
    EXPECT_GT(m->tables()[t].optimizer->initial_accumulator_value, 0);
  }
  c.kind = "linear";
  EXPECT_FALSE((*Model::Create(c))->tables()[0].optimizer.has_value());
}

TEST(MlpModelTest, SameAsTheMlp) {
  ModelConfig c;
  c.kind = "mlp";
  c.dense_features = 4;
  c.hidden = {6};
  c.num_classes = 3;
  std::unique_ptr<Model> m = *Model::Create(c);
  EXPECT_EQ(m->task(), ModelTask::kClassification);
  Examples b = RandomBatch(5, 4, 0, 3);
  for (float& l : b.labels) l = static_cast<float>(static_cast<int>(l * 2));
  State s = RandomState(*m, b, 4);
  ModelGrads g;
  const float loss = m->ForwardBackward(s.Inputs(), b, &g);
  Mlp direct({4, 6, 3});
  std::vector<int32_t> labels(b.labels.begin(), b.labels.end());
  std::vector<Tensor> want;
  const float want_loss = direct.ForwardBackward(
      s.Inputs().params, ConstMatrixMap(b.dense.data(), 5, 4), labels.data(), &want);
  EXPECT_FLOAT_EQ(loss, want_loss);
  for (size_t k = 0; k < want.size(); ++k) EXPECT_EQ(g.params[k].values, want[k].values);
  std::vector<float> pred;
  m->Predict(s.Inputs(), b, &pred);
  const double acc =
      direct.Accuracy(s.Inputs().params, ConstMatrixMap(b.dense.data(), 5, 4), labels.data());
  EXPECT_DOUBLE_EQ(Evaluate(ModelTask::kClassification, pred, b.labels).accuracy, acc);
}

TEST(MlpModelTest, TwoClassesGiveTheProbabilityOfClassOneForAucAndLogLoss) {
  // One layer, no hidden: logits = x W + b, W = [[0, 1]], b = [0.5, 0]; p1 = sigmoid(x - 0.5).
  ModelConfig c;
  c.kind = "mlp";
  c.dense_features = 1;
  c.hidden.clear();
  c.num_classes = 2;
  std::unique_ptr<Model> m = *Model::Create(c);
  ASSERT_EQ(m->params().size(), 2u);
  Examples b;
  b.dense_dim = 1;
  b.dense = {0.0f, 1.0f, 3.0f, -2.0f};
  b.sparse_offsets = {0, 0, 0, 0, 0};
  b.labels = {0, 1, 1, 1};
  const float kernel[] = {0, 1}, bias[] = {0.5f, 0};
  ModelInputs in{{kernel, bias}, {}};
  m->TouchedKeys(b);
  std::vector<float> classes, p;
  m->Predict(in, b, &classes);
  EXPECT_THAT(classes, ElementsAre(0, 1, 1, 0));
  ASSERT_TRUE(m->ClassOneProbabilities(in, b, &p));
  ASSERT_EQ(p.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    EXPECT_NEAR(p[r], 1 / (1 + std::exp(0.5 - b.dense[r])), 1e-6) << r;
  }
  // Ranks: the negative (p 0.38) above one positive (p 0.08): 2 of 3 pairs right.
  const Metrics metrics = Evaluate(m->task(), classes, b.labels, &p);
  EXPECT_TRUE(metrics.scored);
  EXPECT_NEAR(metrics.auc, 2.0 / 3, 1e-9);
  double want = 0;
  for (int r = 0; r < 4; ++r) want -= std::log(b.labels[r] > 0 ? p[r] : 1 - p[r]);
  EXPECT_NEAR(metrics.log_loss, want / 4, 1e-6);
  EXPECT_NEAR(metrics.base_log_loss, -(0.75 * std::log(0.75) + 0.25 * std::log(0.25)), 1e-6);
  EXPECT_DOUBLE_EQ(metrics.accuracy, 0.75);
  EXPECT_FALSE(Evaluate(m->task(), classes, b.labels).scored);  // without them: none
  // Three classes, or a regression: none.
  c.num_classes = 3;
  EXPECT_FALSE((*Model::Create(c))->ClassOneProbabilities(in, b, &p));
  c.num_classes = 0;
  c.regression = true;
  EXPECT_FALSE((*Model::Create(c))->ClassOneProbabilities(in, b, &p));
}

TEST(MetricsTest, AucAndLogLossHandComputed) {
  // Positives at 0.35 and 0.8, negatives at 0.1 and 0.4: 3 of 4 pairs ordered right.
  Metrics m = Evaluate(ModelTask::kBinary, {0.1f, 0.4f, 0.35f, 0.8f}, {0, 0, 1, 1});
  EXPECT_DOUBLE_EQ(m.auc, 0.75);
  const double want = -(std::log(0.9) + std::log(0.6) + std::log(0.35) + std::log(0.8)) / 4;
  EXPECT_NEAR(m.log_loss, want, 1e-6);
  EXPECT_EQ(m.examples, 4);
  // A tie between a positive and a negative counts half.
  EXPECT_DOUBLE_EQ(Evaluate(ModelTask::kBinary, {0.5f, 0.5f}, {0, 1}).auc, 0.5);
  EXPECT_DOUBLE_EQ(Evaluate(ModelTask::kBinary, {0.2f, 0.9f, 0.3f}, {0, 1, 1}).auc, 1.0);
  // Scores that are not numbers (outputs that overflowed) rank lowest and end: every row NaN
  // is one tie, a NaN positive below a scored negative.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_DOUBLE_EQ(Evaluate(ModelTask::kBinary, {nan, nan, nan, nan}, {0, 1, 0, 1}).auc, 0.5);
  EXPECT_DOUBLE_EQ(Evaluate(ModelTask::kBinary, {nan, 0.4f, 0.7f}, {1, 0, 1}).auc, 0.5);
  EXPECT_NEAR(Evaluate(ModelTask::kBinary, {0.0f}, {1}).log_loss, -std::log(1e-7), 1e-6);
  EXPECT_DOUBLE_EQ(Evaluate(ModelTask::kClassification, {1, 2, 3}, {1, 0, 3}).accuracy, 2.0 / 3);
  // Base rate 1/2 on the first case: the labels' entropy.
  EXPECT_NEAR(m.base_log_loss, std::log(2.0), 1e-6);
  EXPECT_NEAR(Evaluate(ModelTask::kBinary, {0.5f, 0.5f, 0.5f, 0.5f}, {1, 0, 0, 0}).base_log_loss,
              -(0.25 * std::log(0.25) + 0.75 * std::log(0.75)), 1e-6);
}

TEST(MetricsTest, MacroF1HandComputed) {
  // Predicted 0 0 1 2 2 against labels 0 1 1 2 0: class 0 has TP 1, FP 1, FN 1 (F1 1/2);
  // class 1 TP 1, FN 1 (2/3); class 2 TP 1, FP 1 (2/3).
  Metrics m = Evaluate(ModelTask::kClassification, {0, 0, 1, 2, 2}, {0, 1, 1, 2, 0});
  EXPECT_NEAR(m.macro_f1, (0.5 + 2.0 / 3 + 2.0 / 3) / 3, 1e-9);
  EXPECT_DOUBLE_EQ(m.accuracy, 0.6);
  // A class only predicted counts with F1 0, as scikit-learn's f1_score(average="macro").
  EXPECT_NEAR(Evaluate(ModelTask::kClassification, {0, 1}, {0, 0}).macro_f1, (2.0 / 3) / 2, 1e-9);
}

// A regression learns the label standardized by the config's mean and deviation and predicts in
// the label's units: loss = mean (out - (y - mean) / sd)^2, prediction = mean + sd * out.
TEST(LinearModelTest, RegressionHandComputedStep) {
  ModelConfig c;
  c.kind = "linear";
  c.dense_features = 1;
  c.regression = true;
  c.label_mean = 10;
  c.label_stddev = 4;
  std::unique_ptr<Model> m = *Model::Create(c);
  EXPECT_EQ(m->task(), ModelTask::kRegression);
  Examples b;
  b.dense_dim = 1;
  b.dense = {2.0f, -1.0f};
  b.sparse_offsets = {0, 0, 0};
  b.labels = {14, 4};  // standardized: 1, -1.5
  m->TouchedKeys(b);
  const float kernel = 0.5f, bias = 0.25f;  // outputs 1.25, -0.25
  ModelInputs in{{&kernel, &bias}, {nullptr}};
  ModelGrads g;
  const float loss = m->ForwardBackward(in, b, &g);
  // errors 0.25 and 1.25: loss (0.0625 + 1.5625) / 2, d/dout = error (2 / n = 1)
  EXPECT_NEAR(loss, 0.8125, 1e-6);
  EXPECT_NEAR(g.params[0].values[0], 0.25 * 2 + 1.25 * -1, 1e-6);
  EXPECT_NEAR(g.params[1].values[0], 0.25 + 1.25, 1e-6);
  std::vector<float> pred;
  m->Predict(in, b, &pred);
  EXPECT_THAT(pred, ElementsAre(15.0f, 9.0f));
  Metrics metrics = Evaluate(m->task(), pred, b.labels);
  EXPECT_NEAR(metrics.rmse, std::sqrt((1.0 + 25.0) / 2), 1e-6);
  EXPECT_NEAR(metrics.mae, 3.0, 1e-6);
  EXPECT_EQ(metrics.auc, 0);
}

TEST(ModelRegressionTest, GradientsOfEveryKindMatchFiniteDifferences) {
  for (const char* kind : {"linear", "mlp", "wide_deep"}) {
    SCOPED_TRACE(kind);
    ModelConfig c;
    c.kind = kind;
    c.dense_features = 3;
    c.categorical_fields = std::string(kind) == "wide_deep" ? 2 : 0;
    c.embedding_dim = 2;
    c.hidden = {4};
    c.regression = true;
    c.label_mean = 0.5;
    c.label_stddev = 2;
    std::unique_ptr<Model> m = *Model::Create(c);
    EXPECT_EQ(m->task(), ModelTask::kRegression);
    Examples b = RandomBatch(6, 3, c.categorical_fields, 9);
    for (size_t r = 0; r < b.labels.size(); ++r) b.labels[r] = 3.0f * r - 4;
    CheckGradients(*m, b);
  }
  ModelConfig bad;
  bad.kind = "mlp";
  bad.dense_features = 2;
  bad.regression = true;
  bad.label_stddev = std::nan("");
  EXPECT_THAT(std::string(Model::Create(bad).status().message()), HasSubstr("deviation"));
}

TEST(LinearModelTest, LearnsASeparableProblemWithSgd) {
  // Label 1 exactly when feature key 1 is present; key 2 is noise.
  ModelConfig c;
  c.kind = "linear";
  std::unique_ptr<Model> m = *Model::Create(c);
  std::mt19937_64 rng(5);
  Examples data;
  for (int r = 0; r < 400; ++r) {
    const bool pos = rng() % 2;
    if (pos) {
      data.sparse_keys.push_back(1);
      data.sparse_values.push_back(1);
      data.sparse_fields.push_back(0);
    }
    data.sparse_keys.push_back(2);
    data.sparse_values.push_back(1);
    data.sparse_fields.push_back(0);
    data.sparse_offsets.push_back(static_cast<int64_t>(data.sparse_keys.size()));
    data.labels.push_back(pos);
  }
  float bias = 0;
  std::map<uint64_t, float> weights;
  for (int epoch = 0; epoch < 20; ++epoch) {
    const auto& keys = m->TouchedKeys(data);
    std::vector<float> rows;
    for (uint64_t k : keys[0]) rows.push_back(weights[k]);
    ModelGrads g;
    m->ForwardBackward({{&bias}, {rows.data()}}, data, &g);
    bias -= 1.0f * g.params[0].values[0];
    for (size_t i = 0; i < keys[0].size(); ++i) weights[keys[0][i]] -= 1.0f * g.rows[0][i];
  }
  const auto& keys = m->TouchedKeys(data);
  std::vector<float> rows, pred;
  for (uint64_t k : keys[0]) rows.push_back(weights[k]);
  m->Predict({{&bias}, {rows.data()}}, data, &pred);
  const Metrics metrics = Evaluate(ModelTask::kBinary, pred, data.labels);
  EXPECT_DOUBLE_EQ(metrics.auc, 1.0);
  EXPECT_LT(metrics.log_loss, 0.3);
}

}  // namespace
}  // namespace pstrain
