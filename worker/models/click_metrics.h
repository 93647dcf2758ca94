// How well a click model ranks and predicts: the area under the ROC curve
// (AUC) and the mean binary cross-entropy (logloss) of predicted click
// probabilities against 0/1 labels.
#pragma once

#include <cstddef>
#include <vector>

namespace shardps::worker {

// The probability that a random click is scored above a random non-click
// (ties count one half): the Mann-Whitney statistic over the scores'
// ranks, O(n log n). `scores` may be logits or probabilities (only their
// order matters). NaN when the labels are all one class or n == 0.
double Auc(const std::vector<float>& scores, const std::vector<float>& labels);

// Mean of -(y log p + (1 - y) log(1 - p)) over the examples, with
// p = sigmoid(logit) computed stably from the logit.
double LogLoss(const std::vector<float>& logits, const std::vector<float>& labels);

}  // namespace shardps::worker
