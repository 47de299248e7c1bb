// Quality metrics of binary predictions, shared by the models' evaluation and the data
// generator's ground truth.
#pragma once

#include <vector>

namespace pstrain {

// Area under the ROC curve of `scores` against `labels` (> 0 is positive), as the
// Mann-Whitney statistic: ties between a positive and a negative count half. 0 when only one
// class is present. A NaN score ranks lowest (tied with -inf).
double Auc(const std::vector<float>& scores, const std::vector<float>& labels);
// Mean binary cross-entropy of probabilities against labels, probabilities clipped to
// [1e-7, 1 - 1e-7].
double LogLoss(const std::vector<float>& probabilities, const std::vector<float>& labels);

}  // namespace pstrain
