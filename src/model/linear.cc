// Logistic (or, with ModelConfig::regression, linear) regression: one weight per sparse feature
// (a dim-1 table, so any number of hashed features fits), a kernel over the dense features, and
// a bias.
//   logit_r = bias + x_r . kernel + sum_j v_j w[k_j],
//   loss = mean sigmoid cross-entropy, or mean squared error of the standardized label
#include "absl/strings/str_cat.h"
#include "model/model_internal.h"

namespace pstrain {
namespace {

class LinearModel final : public Model {
 public:
  explicit LinearModel(const ModelConfig& c) : dense_(c.dense_features), head_(c) {
    if (dense_ > 0) params_.push_back({"linear/kernel", {dense_, 1}});
    params_.push_back({"linear/bias", {1}});
    tables_.push_back({"linear/weights", 1, Initializer{}, std::nullopt});
  }

  ModelTask task() const override { return head_.task(); }
  const std::vector<ParamSpec>& params() const override { return params_; }
  const std::vector<TableSpec>& tables() const override { return tables_; }
  std::vector<Tensor> Initialize(uint64_t) const override {
    std::vector<Tensor> out;
    for (const ParamSpec& p : params_) out.emplace_back(p.shape, 0.0f);
    return out;
  }

  const std::vector<std::vector<uint64_t>>& TouchedKeys(const Examples& batch) override {
    index_.Build(batch, 1, [](int32_t) { return 0; });
    return index_.keys();
  }

  float ForwardBackward(const ModelInputs& in, const Examples& batch, ModelGrads* g,
                        const GradientsReady& ready) override {
    Logits(in, batch);
    const float loss = head_.Loss(logits_, batch.labels.data(), &dlogits_);
    g->params.resize(params_.size());
    for (size_t k = 0; k < params_.size(); ++k) g->params[k] = Tensor(params_[k].shape, 0.0f);
    g->rows.assign(1, std::vector<float>(index_.keys()[0].size(), 0.0f));
    float* dkernel = dense_ > 0 ? g->params[0].data() : nullptr;
    float* dbias = g->params.back().data();
    for (int64_t r = 0; r < batch.size(); ++r) {
      const float d = dlogits_[r];
      *dbias += d;
      for (int c = 0; c < dense_; ++c) dkernel[c] += batch.dense_row(r)[c] * d;
      for (int64_t j = batch.sparse_offsets[r]; j < batch.sparse_offsets[r + 1]; ++j) {
        g->rows[0][index_.row(j)] += batch.sparse_values[j] * d;
      }
    }
    ReportAllReady(ready, params_.size());
    return loss;
  }

  void Predict(const ModelInputs& in, const Examples& batch, std::vector<float>* out) override {
    Logits(in, batch);
    out->resize(logits_.size());
    for (size_t r = 0; r < logits_.size(); ++r) (*out)[r] = head_.Prediction(logits_[r]);
  }

 private:
  void Logits(const ModelInputs& in, const Examples& batch) {
    const float* kernel = dense_ > 0 ? in.params[0] : nullptr;
    const float bias = in.params.back()[0];
    const float* weights = in.rows[0];
    logits_.assign(batch.size(), bias);
    for (int64_t r = 0; r < batch.size(); ++r) {
      float l = bias;
      for (int c = 0; c < dense_; ++c) l += batch.dense_row(r)[c] * kernel[c];
      for (int64_t j = batch.sparse_offsets[r]; j < batch.sparse_offsets[r + 1]; ++j) {
        l += batch.sparse_values[j] * weights[index_.row(j)];
      }
      logits_[r] = l;
    }
  }

  const int dense_;
  std::vector<ParamSpec> params_;
  std::vector<TableSpec> tables_;
  OutputHead head_;
  SparseIndex index_;
  std::vector<float> logits_, dlogits_;
};

}  // namespace

std::unique_ptr<Model> MakeLinearModel(const ModelConfig& config) {
  return std::make_unique<LinearModel>(config);
}

}  // namespace pstrain
