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

}  // namespace pstrain
