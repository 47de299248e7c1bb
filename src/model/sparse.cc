// SparseIndex, the sigmoid loss, and the metrics shared by every model.
#include <algorithm>
#include <cmath>
#include <map>

#include "common/metrics.h"
#include "model/model_internal.h"

namespace pstrain {

void SparseIndex::Build(const Examples& batch, int num_tables,
                        const std::function<int(int32_t)>& table_of) {
  const int64_t n = static_cast<int64_t>(batch.sparse_keys.size());
  keys_.resize(num_tables);
  table_.resize(n);
  row_.assign(n, -1);
  for (int64_t j = 0; j < n; ++j) table_[j] = table_of(batch.sparse_fields[j]);
  for (int t = 0; t < num_tables; ++t) {
    scratch_.clear();
    for (int64_t j = 0; j < n; ++j) {
      if (table_[j] == t) scratch_.emplace_back(batch.sparse_keys[j], j);
    }
    std::sort(scratch_.begin(), scratch_.end());
    keys_[t].clear();
    for (const auto& [key, j] : scratch_) {
      if (keys_[t].empty() || keys_[t].back() != key) keys_[t].push_back(key);
      row_[j] = static_cast<int64_t>(keys_[t].size()) - 1;
    }
  }
}

float Sigmoid(float x) {
  return x >= 0 ? 1.0f / (1.0f + std::exp(-x)) : std::exp(x) / (1.0f + std::exp(x));
}

float SigmoidCrossEntropy(const std::vector<float>& logits, const float* labels,
                          std::vector<float>* dlogits) {
  const size_t n = logits.size();
  dlogits->resize(n);
  if (n == 0) return 0.0f;
  double total = 0;
  const float inv_n = 1.0f / static_cast<float>(n);
  for (size_t r = 0; r < n; ++r) {
    const float l = logits[r];
    const float y = labels[r] > 0 ? 1.0f : 0.0f;
    // log(1 + e^l) - y l, without overflow for large |l|
    total += std::max(l, 0.0f) - l * y + std::log1p(std::exp(-std::abs(l)));
    (*dlogits)[r] = (Sigmoid(l) - y) * inv_n;
  }
  return static_cast<float>(total / static_cast<double>(n));
}

OutputHead::OutputHead(const ModelConfig& c)
    : regression_(c.regression),
      mean_(c.label_mean),
      scale_(c.label_stddev > 0 ? c.label_stddev : 1.0) {}

const std::vector<float>& OutputHead::Targets(const float* labels, size_t n) {
  targets_.resize(n);
  for (size_t r = 0; r < n; ++r) {
    targets_[r] = static_cast<float>((static_cast<double>(labels[r]) - mean_) / scale_);
  }
  return targets_;
}

float OutputHead::Loss(const std::vector<float>& outputs, const float* labels,
                       std::vector<float>* doutputs) {
  if (!regression_) return SigmoidCrossEntropy(outputs, labels, doutputs);
  const size_t n = outputs.size();
  const std::vector<float>& t = Targets(labels, n);
  doutputs->resize(n);
  return layers::SquaredError(outputs.data(), t.data(), static_cast<int64_t>(n), doutputs->data());
}

namespace {

// AUC and log loss of `p`, the probability of a positive label, over the first n rows.
void Score(const std::vector<float>& p, const std::vector<float>& labels, size_t n, Metrics* m) {
  m->scored = true;
  m->log_loss = LogLoss(p, labels);
  double positives = 0;
  for (size_t r = 0; r < n; ++r) positives += labels[r] > 0;
  // Predicting the rows' own positive rate q for every row costs their entropy.
  const double q = std::clamp(positives / static_cast<double>(n), 1e-7, 1.0 - 1e-7);
  m->base_log_loss = -(q * std::log(q) + (1.0 - q) * std::log(1.0 - q));
  m->auc = Auc(p, labels);
}

}  // namespace

Metrics Evaluate(ModelTask task, const std::vector<float>& predictions,
                 const std::vector<float>& labels, const std::vector<float>* class_one) {
  Metrics m;
  const size_t n = std::min(predictions.size(), labels.size());
  m.examples = static_cast<int64_t>(n);
  if (n == 0) return m;
  if (task == ModelTask::kClassification) {
    if (class_one != nullptr && class_one->size() == predictions.size()) {
      Score(*class_one, labels, n, &m);
    }
    int64_t correct = 0;
    // Per class: true positives, and rows labelled or predicted it (2 TP + FP + FN).
    std::map<float, std::pair<int64_t, int64_t>> classes;
    for (size_t r = 0; r < n; ++r) {
      const bool right = predictions[r] == labels[r];
      correct += right;
      classes[labels[r]].first += right;
      ++classes[labels[r]].second;
      ++classes[predictions[r]].second;
    }
    m.accuracy = static_cast<double>(correct) / static_cast<double>(n);
    double f1 = 0;
    for (const auto& [c, counts] : classes) {
      f1 += 2.0 * static_cast<double>(counts.first) / static_cast<double>(counts.second);
    }
    m.macro_f1 = f1 / static_cast<double>(classes.size());
    return m;
  }
  if (task == ModelTask::kRegression) {
    double squared = 0, absolute = 0;
    for (size_t r = 0; r < n; ++r) {
      const double e = static_cast<double>(predictions[r]) - labels[r];
      squared += e * e;
      absolute += std::abs(e);
    }
    m.rmse = std::sqrt(squared / static_cast<double>(n));
    m.mae = absolute / static_cast<double>(n);
    return m;
  }
  Score(predictions, labels, n, &m);
  return m;
}

}  // namespace pstrain
