#include "common/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>

namespace pstrain {

double LogLoss(const std::vector<float>& probabilities, const std::vector<float>& labels) {
  const size_t n = std::min(probabilities.size(), labels.size());
  if (n == 0) return 0;
  double loss = 0;
  for (size_t r = 0; r < n; ++r) {
    const double p = std::clamp(static_cast<double>(probabilities[r]), 1e-7, 1.0 - 1e-7);
    loss -= labels[r] > 0 ? std::log(p) : std::log(1.0 - p);
  }
  return loss / static_cast<double>(n);
}

double Auc(const std::vector<float>& scores, const std::vector<float>& labels) {
  const size_t n = std::min(scores.size(), labels.size());
  // AUC as the Mann-Whitney statistic: ranks of the positives, ties sharing their mean rank. A
  // score that is not a number (a model whose outputs overflowed) ranks lowest, tied with -inf:
  // NaN compares false to everything, which would break the sort and the run of ties.
  auto key = [&](size_t r) {
    return std::isnan(scores[r]) ? -std::numeric_limits<float>::infinity() : scores[r];
  };
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
  double positive_rank_sum = 0;
  int64_t positives = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && key(order[j]) == key(order[i])) ++j;
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
  if (positives == 0 || negatives == 0) return 0;
  return (positive_rank_sum - static_cast<double>(positives) * (positives + 1) / 2.0) /
         (static_cast<double>(positives) * static_cast<double>(negatives));
}

}  // namespace pstrain
