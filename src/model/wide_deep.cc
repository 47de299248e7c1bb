// Wide & Deep (Cheng et al. 2016) for click-through rate:
//  - wide: one weight per sparse feature (a dim-1 table) plus a bias;
//  - deep: per categorical field an embedding (one table per field, or one shared table), the
//    value-weighted sum of the field's features; the dot products of every pair of field
//    embeddings (DLRM's interaction, Naumov et al. 2019: an MLP over concatenated embeddings
//    learns products of its inputs poorly) after the dense features, then an MLP (ReLU hidden
//    layers) to one logit. As in DLRM, the embeddings reach the MLP through their dot products
//    only (the wide part has each value's own weight); with fewer than two fields, which have
//    no pairs, the embeddings themselves follow the dense features.
//   logit = wide + deep, loss = mean sigmoid cross-entropy (or, with ModelConfig::regression,
//   the mean squared error of the standardized label).
// Features whose field is outside [0, categorical_fields) feed the wide part only.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "model/interaction.h"
#include "model/model_internal.h"

namespace pstrain {
namespace {

// The tables' optimizers and the embeddings' initial scale, measured on gen-criteo's 1,000,000
// rows (held-out AUC; one table optimizer for all, Adagrad 0.1 at dim 8, reached 0.839):
//  - the wide part as in Cheng et al.: FTRL-Proximal, whose L2 term is a prior that keeps the
//    weight of a value seen a few times near zero (+0.0015 over Adagrad); the initial
//    accumulator, tiny against the squared gradients of a batch's mean loss, leaves the
//    learning rate alone;
//  - the embeddings Adagrad with an initial accumulator of 1e-5, about one batch's squared
//    gradient, so a rare value's first update is damped rather than a full learning rate
//    (+0.003), and first rows a quarter of 1/sqrt(dim), so that rare and unseen values add little
//    noise to the dot products (+0.0015).
constexpr double kWideLr = 0.1, kWideL2 = 0.05, kDeepLr = 0.05, kEmbeddingScale = 0.25;

TableOptimizer WideOptimizer() {
  TableOptimizer o;
  o.name = "ftrl";
  o.learning_rate = kWideLr;
  o.initial_accumulator_value = 1e-6;
  o.l2 = kWideL2;
  return o;
}

TableOptimizer DeepOptimizer() {
  TableOptimizer o;
  o.name = "adagrad";
  o.learning_rate = kDeepLr;
  o.initial_accumulator_value = 1e-5;
  return o;
}

class WideDeepModel final : public Model {
 public:
  explicit WideDeepModel(const ModelConfig& c)
      : dense_(c.dense_features),
        fields_(c.categorical_fields),
        dim_(c.embedding_dim),
        shared_(c.shared_embedding),
        pairs_(layers::InteractionPairs(c.categorical_fields)),
        mlp_embeddings_(pairs_ == 0 ? fields_ * dim_ : 0),
        head_(c) {
    widths_.push_back(dense_ + mlp_embeddings_ + pairs_);
    widths_.insert(widths_.end(), c.hidden.begin(), c.hidden.end());
    widths_.push_back(1);
    params_.push_back({"wide/bias", {1}});
    for (size_t i = 0; i + 1 < widths_.size(); ++i) {
      params_.push_back({absl::StrCat("deep/dense", i, "/kernel"), {widths_[i], widths_[i + 1]}});
      params_.push_back({absl::StrCat("deep/dense", i, "/bias"), {widths_[i + 1]}});
    }
    tables_.push_back({"wide", 1, Initializer{}, WideOptimizer()});
    Initializer emb;
    emb.kind = "truncated_normal";
    emb.stddev = kEmbeddingScale / std::sqrt(static_cast<double>(dim_));
    const int tables = shared_ ? 1 : fields_;
    for (int t = 0; t < tables; ++t) {
      emb.seed = 1000 + t;
      tables_.push_back(
          {shared_ ? "embedding" : absl::StrCat("embedding/C", t + 1), dim_, emb, DeepOptimizer()});
    }
    acts_.resize(widths_.size() - 1);
    dacts_.resize(widths_.size() - 1);
  }

  ModelTask task() const override { return head_.task(); }
  const std::vector<ParamSpec>& params() const override { return params_; }
  const std::vector<TableSpec>& tables() const override { return tables_; }

  std::vector<Tensor> Initialize(uint64_t seed) const override {
    std::vector<Tensor> out;
    for (size_t k = 0; k < params_.size(); ++k) {
      Initializer init;
      if (params_[k].shape.size() == 2) {
        init.kind = "glorot_uniform";
        init.seed = seed * 1000003 + k;
      }
      out.push_back(*MakeInitialValue(params_[k].shape, init));
    }
    return out;
  }

  const std::vector<std::vector<uint64_t>>& TouchedKeys(const Examples& batch) override {
    wide_.Build(batch, 1, [](int32_t) { return 0; });
    deep_.Build(batch, shared_ ? 1 : fields_, [this](int32_t f) {
      if (f < 0 || f >= fields_) return -1;
      return shared_ ? 0 : static_cast<int>(f);
    });
    keys_.assign(1, wide_.keys()[0]);
    keys_.insert(keys_.end(), deep_.keys().begin(), deep_.keys().end());
    return keys_;
  }

  float ForwardBackward(const ModelInputs& in, const Examples& batch, ModelGrads* g,
                        const GradientsReady& ready) override {
    Forward(in, batch);
    const float loss = head_.Loss(logits_, batch.labels.data(), &dlogits_);
    g->params.resize(params_.size());
    for (size_t k = 0; k < params_.size(); ++k) g->params[k] = Tensor(params_[k].shape, 0.0f);
    g->rows.resize(keys_.size());
    for (size_t t = 0; t < keys_.size(); ++t) {
      g->rows[t].assign(keys_[t].size() * tables_[t].dim, 0.0f);
    }
    const int64_t n = batch.size();
    // Wide part.
    for (int64_t r = 0; r < n; ++r) {
      g->params[0].values[0] += dlogits_[r];
      for (int64_t j = batch.sparse_offsets[r]; j < batch.sparse_offsets[r + 1]; ++j) {
        g->rows[0][wide_.row(j)] += batch.sparse_values[j] * dlogits_[r];
      }
    }
    // Deep part: back through the layers to the input, then into the embedding rows.
    const size_t layers = widths_.size() - 1;
    dacts_[layers - 1] = Eigen::Map<const Matrix>(dlogits_.data(), n, 1);
    for (size_t i = layers; i-- > 0;) {
      ConstMatrixMap w(in.params[1 + 2 * i], widths_[i], widths_[i + 1]);
      float* dw = g->params[1 + 2 * i].data();
      float* db = g->params[2 + 2 * i].data();
      const Matrix& below = i == 0 ? input_ : acts_[i - 1];
      Matrix* dbelow = i == 0 ? &dinput_ : &dacts_[i - 1];
      layers::DenseBackward(below, w, dacts_[i], dbelow, dw, db);
      if (i > 0) layers::ReluBackward(acts_[i - 1], &dacts_[i - 1]);
    }
    if (mlp_embeddings_ > 0) {
      demb_ = dinput_.middleCols(dense_, mlp_embeddings_);
    } else {
      demb_.setZero(n, fields_ * dim_);
    }
    layers::DotInteractionBackward(emb_, fields_, dim_, dinput_.rightCols(pairs_), demb_);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t j = batch.sparse_offsets[r]; j < batch.sparse_offsets[r + 1]; ++j) {
        const int t = deep_.table(j);
        if (t < 0) continue;
        float* drow = g->rows[1 + t].data() + deep_.row(j) * dim_;
        const float* dx = demb_.row(r).data() + batch.sparse_fields[j] * dim_;
        for (int c = 0; c < dim_; ++c) drow[c] += batch.sparse_values[j] * dx[c];
      }
    }
    ReportAllReady(ready, params_.size());
    return loss;
  }

  void Predict(const ModelInputs& in, const Examples& batch, std::vector<float>* out) override {
    Forward(in, batch);
    out->resize(logits_.size());
    for (size_t r = 0; r < logits_.size(); ++r) (*out)[r] = head_.Prediction(logits_[r]);
  }

 private:
  void Forward(const ModelInputs& in, const Examples& batch) {
    const int64_t n = batch.size();
    emb_.setZero(n, fields_ * dim_);
    input_.resize(n, widths_[0]);
    for (int64_t r = 0; r < n; ++r) {
      for (int c = 0; c < dense_; ++c) input_(r, c) = batch.dense_row(r)[c];
      for (int64_t j = batch.sparse_offsets[r]; j < batch.sparse_offsets[r + 1]; ++j) {
        const int t = deep_.table(j);
        if (t < 0) continue;
        const float* row = in.rows[1 + t] + deep_.row(j) * dim_;
        float* x = emb_.row(r).data() + batch.sparse_fields[j] * dim_;
        for (int c = 0; c < dim_; ++c) x[c] += batch.sparse_values[j] * row[c];
      }
    }
    if (mlp_embeddings_ > 0) input_.middleCols(dense_, mlp_embeddings_) = emb_;
    layers::DotInteractionForward(emb_, fields_, dim_, input_.rightCols(pairs_));
    const size_t layers = widths_.size() - 1;
    for (size_t i = 0; i < layers; ++i) {
      ConstMatrixMap w(in.params[1 + 2 * i], widths_[i], widths_[i + 1]);
      layers::DenseForward(i == 0 ? input_ : acts_[i - 1], w, in.params[2 + 2 * i], &acts_[i]);
      if (i + 1 < layers) layers::ReluForward(&acts_[i]);
    }
    const float bias = in.params[0][0];
    logits_.resize(n);
    for (int64_t r = 0; r < n; ++r) {
      float l = bias + acts_[layers - 1](r, 0);
      for (int64_t j = batch.sparse_offsets[r]; j < batch.sparse_offsets[r + 1]; ++j) {
        l += batch.sparse_values[j] * in.rows[0][wide_.row(j)];
      }
      logits_[r] = l;
    }
  }

  const int dense_, fields_, dim_;
  const bool shared_;
  const int pairs_;           // of fields: the interaction's outputs, the MLP's last inputs
  const int mlp_embeddings_;  // MLP inputs holding the embeddings themselves (no pairs: all)
  std::vector<int> widths_;   // deep part: input, hidden..., 1
  std::vector<ParamSpec> params_;
  std::vector<TableSpec> tables_;
  SparseIndex wide_, deep_;
  std::vector<std::vector<uint64_t>> keys_;  // wide, then the embedding tables
  Matrix emb_, demb_;      // the field embeddings side by side, and their gradient
  Matrix input_, dinput_;  // the MLP's input: dense features, embeddings if no pairs, dots
  std::vector<Matrix> acts_, dacts_;
  OutputHead head_;
  std::vector<float> logits_, dlogits_;
};

}  // namespace

std::unique_ptr<Model> MakeWideDeepModel(const ModelConfig& config) {
  return std::make_unique<WideDeepModel>(config);
}

}  // namespace pstrain
