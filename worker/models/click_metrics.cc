#include "worker/models/click_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace shardps::worker {

double Auc(const std::vector<float>& scores, const std::vector<float>& labels) {
  const size_t n = scores.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  // Sum of the clicks' ranks (1-based), tied scores sharing their mean rank.
  double rank_sum = 0, clicks = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && scores[order[j]] == scores[order[i]]) ++j;
    const double mean_rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2;
    for (size_t k = i; k < j; ++k)
      if (labels[order[k]] > 0.5f) {
        rank_sum += mean_rank;
        clicks += 1;
      }
    i = j;
  }
  const double others = static_cast<double>(n) - clicks;
  if (clicks == 0 || others == 0) return std::numeric_limits<double>::quiet_NaN();
  return (rank_sum - clicks * (clicks + 1) / 2) / (clicks * others);
}

double LogLoss(const std::vector<float>& logits, const std::vector<float>& labels) {
  if (logits.empty()) return std::numeric_limits<double>::quiet_NaN();
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double z = logits[i], y = labels[i];
    sum += std::max(z, 0.0) - z * y + std::log1p(std::exp(-std::fabs(z)));
  }
  return sum / static_cast<double>(logits.size());
}

}  // namespace shardps::worker
