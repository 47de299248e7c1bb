// Internal to src/model: the concrete models behind Model::Create, and the index that maps a
// batch's sparse features to the rows of the tables they look up.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "model/model.h"

namespace pstrain {

std::unique_ptr<Model> MakeMlpModel(const ModelConfig& config);
std::unique_ptr<Model> MakeLinearModel(const ModelConfig& config);
std::unique_ptr<Model> MakeWideDeepModel(const ModelConfig& config);

// For one batch: per table the distinct keys its features touch (ascending), and for every
// sparse feature j of the batch the row of its key in that list.
class SparseIndex {
 public:
  // `table_of(field)` says which table a feature of that field looks up, or -1 for none.
  void Build(const Examples& batch, int num_tables, const std::function<int(int32_t)>& table_of);
  const std::vector<std::vector<uint64_t>>& keys() const { return keys_; }
  int table(int64_t j) const { return table_[j]; }  // -1: the feature looks nothing up
  int64_t row(int64_t j) const { return row_[j]; }

 private:
  std::vector<std::vector<uint64_t>> keys_;
  std::vector<int> table_;
  std::vector<int64_t> row_;
  std::vector<std::pair<uint64_t, int64_t>> scratch_;  // (key, feature) of one table, sorted
};

// Mean binary cross-entropy of `logits` against labels (> 0 counts as 1), computed stably;
// writes d(mean loss)/d(logit) into *dlogits.
float SigmoidCrossEntropy(const std::vector<float>& logits, const float* labels,
                          std::vector<float>* dlogits);
float Sigmoid(float x);

// The head of a model with one output per row: binary (sigmoid cross-entropy, the output a
// logit) or, when the config says regression, the squared error of the output against the
// label standardized by the config's label_mean and label_stddev.
class OutputHead {
 public:
  explicit OutputHead(const ModelConfig& c);
  bool regression() const { return regression_; }
  ModelTask task() const { return regression_ ? ModelTask::kRegression : ModelTask::kBinary; }
  // The mean loss of `outputs` against `labels`; d(mean loss)/d(output) into *doutputs.
  float Loss(const std::vector<float>& outputs, const float* labels, std::vector<float>* doutputs);
  // The standardized targets of `n` labels.
  const std::vector<float>& Targets(const float* labels, size_t n);
  // What Predict writes for an output: the probability of label 1, or a number in the label's
  // units.
  float Prediction(float output) const {
    return regression_ ? static_cast<float>(mean_ + scale_ * output) : Sigmoid(output);
  }

 private:
  bool regression_;
  double mean_, scale_;
  std::vector<float> targets_;
};

}  // namespace pstrain
