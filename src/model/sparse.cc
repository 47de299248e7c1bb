// SparseIndex, the sigmoid loss, and the metrics shared by every model.
#include <algorithm>
#include <cmath>
#include <numeric>

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

Metrics Evaluate(ModelTask task, const std::vector<float>& predictions,
                 const std::vector<float>& labels) {
  Metrics m;
  const size_t n = std::min(predictions.size(), labels.size());
  m.examples = static_cast<int64_t>(n);
  if (n == 0) return m;
  if (task == ModelTask::kClassification) {
    int64_t correct = 0;
    for (size_t r = 0; r < n; ++r) correct += predictions[r] == labels[r];
    m.accuracy = static_cast<double>(correct) / static_cast<double>(n);
    return m;
  }
  double loss = 0;
  for (size_t r = 0; r < n; ++r) {
    const double p = std::clamp(static_cast<double>(predictions[r]), 1e-7, 1.0 - 1e-7);
    loss -= labels[r] > 0 ? std::log(p) : std::log(1.0 - p);
  }
  m.log_loss = loss / static_cast<double>(n);
  // AUC as the Mann-Whitney statistic: ranks of the positives, ties sharing their mean rank.
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return predictions[a] < predictions[b]; });
  double positive_rank_sum = 0;
  int64_t positives = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && predictions[order[j]] == predictions[order[i]]) ++j;
    const double rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2.0;
    for (size_t k = i; k < j; ++k) {
      if (labels[order[k]] > 0) {
        positive_rank_sum += rank;
        ++positives;
      }
    }
    i = j;
  }
  const int64_t negatives = static_cast<int64_t>(n) - positives;
  if (positives > 0 && negatives > 0) {
    m.auc = (positive_rank_sum - static_cast<double>(positives) * (positives + 1) / 2.0) /
            (static_cast<double>(positives) * static_cast<double>(negatives));
  }
  return m;
}

}  // namespace pstrain
