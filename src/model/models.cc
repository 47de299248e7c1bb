// Model::Create, and the MLP behind the model interface.
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/model_internal.h"

namespace pstrain {
namespace {

// Softmax classification (or, with ModelConfig::regression, one output learning the
// standardized label by squared error) of the dense features; no tables.
class MlpModel final : public Model {
 public:
  MlpModel(std::vector<int> widths, const ModelConfig& c) : mlp_(std::move(widths)), head_(c) {}

  ModelTask task() const override {
    return head_.regression() ? ModelTask::kRegression : ModelTask::kClassification;
  }
  const std::vector<ParamSpec>& params() const override { return mlp_.params(); }
  const std::vector<TableSpec>& tables() const override { return no_tables_; }
  std::vector<Tensor> Initialize(uint64_t seed) const override { return mlp_.Initialize(seed); }
  const std::vector<std::vector<uint64_t>>& TouchedKeys(const Examples&) override {
    return no_keys_;
  }

  float ForwardBackward(const ModelInputs& in, const Examples& batch, ModelGrads* g,
                        const GradientsReady& ready) override {
    g->rows.clear();
    if (head_.regression()) {
      const std::vector<float>& t = head_.Targets(batch.labels.data(), batch.labels.size());
      return mlp_.ForwardBackwardSquaredError(in.params, Dense(batch), t.data(), &g->params, ready);
    }
    labels_.assign(batch.labels.begin(), batch.labels.end());
    return mlp_.ForwardBackward(in.params, Dense(batch), labels_.data(), &g->params, ready);
  }

  void Predict(const ModelInputs& in, const Examples& batch, std::vector<float>* out) override {
    if (head_.regression()) {
      mlp_.Outputs(in.params, Dense(batch), out);
      for (float& v : *out) v = head_.Prediction(v);
      return;
    }
    mlp_.Classify(in.params, Dense(batch), &classes_);
    out->assign(classes_.begin(), classes_.end());
  }

  bool ClassOneProbabilities(const ModelInputs& in, const Examples& batch,
                             std::vector<float>* out) override {
    if (head_.regression() || mlp_.widths().back() != 2) return false;
    mlp_.ClassOneProbabilities(in.params, Dense(batch), out);
    return true;
  }

 private:
  ConstMatrixMap Dense(const Examples& batch) const {
    return ConstMatrixMap(batch.dense.data(), batch.size(), batch.dense_dim);
  }

  Mlp mlp_;
  OutputHead head_;
  const std::vector<TableSpec> no_tables_;
  const std::vector<std::vector<uint64_t>> no_keys_;
  std::vector<int32_t> labels_, classes_;
};

}  // namespace

void ReportAllReady(const GradientsReady& ready, size_t n) {
  if (!ready) return;
  std::vector<int> all(n);
  for (size_t i = 0; i < n; ++i) all[i] = static_cast<int>(i);
  ready(all);
}

std::unique_ptr<Model> MakeMlpModel(const ModelConfig& c) {
  std::vector<int> widths = {c.dense_features};
  widths.insert(widths.end(), c.hidden.begin(), c.hidden.end());
  widths.push_back(c.regression ? 1 : c.num_classes);
  return std::make_unique<MlpModel>(std::move(widths), c);
}

absl::StatusOr<std::unique_ptr<Model>> Model::Create(const ModelConfig& c) {
  auto bad = [&](auto... parts) {
    return absl::InvalidArgumentError(absl::StrCat("model ", c.kind, ": ", parts...));
  };
  constexpr int kMaxWidth = 1 << 20;
  if (c.dense_features < 0 || c.dense_features > kMaxWidth) {
    return bad("dense_features ", c.dense_features, " is out of range [0, ", kMaxWidth, "]");
  }
  if (c.regression &&
      !(std::isfinite(c.label_mean) && std::isfinite(c.label_stddev) && c.label_stddev >= 0)) {
    return bad("the label's mean ", c.label_mean, " and deviation ", c.label_stddev,
               " must be finite, the deviation >= 0");
  }
  for (int h : c.hidden) {
    if (h <= 0 || h > kMaxWidth)
      return bad("hidden width ", h, " is out of range [1, ", kMaxWidth, "]");
  }
  if (c.kind == "mlp") {
    if (c.dense_features < 1) return bad("needs dense features");
    if (!c.regression && (c.num_classes < 2 || c.num_classes > kMaxWidth)) {
      return bad("num_classes ", c.num_classes, " must be at least 2");
    }
    return MakeMlpModel(c);
  }
  if (c.kind == "linear") return MakeLinearModel(c);
  if (c.kind == "wide_deep") {
    if (c.categorical_fields < 0 || c.categorical_fields > 4096) {
      return bad("categorical_fields ", c.categorical_fields, " is out of range [0, 4096]");
    }
    if (c.embedding_dim < 1 || c.embedding_dim > 4096) {
      return bad("embedding_dim ", c.embedding_dim, " is out of range [1, 4096]");
    }
    // The MLP reads the dense features and the dot products of every pair of fields (with fewer
    // than two fields, which have no pairs, the embeddings themselves).
    const int64_t fields = c.categorical_fields;
    const int64_t mlp_sparse = fields < 2 ? fields * c.embedding_dim : fields * (fields - 1) / 2;
    if (c.dense_features + mlp_sparse > kMaxWidth) {
      return bad("the deep part's input (dense features + pairs of fields) is too wide");
    }
    if (c.dense_features + c.categorical_fields == 0) return bad("has no input");
    return MakeWideDeepModel(c);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown model \"", c.kind, "\" (known: mlp, linear, wide_deep)"));
}

}  // namespace pstrain
