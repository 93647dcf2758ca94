// AUC and logloss (worker/models/click_metrics.h) against values worked by hand
// and a brute-force pair count.
#include "worker/models/click_metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace shardps::worker {
namespace {

TEST(ClickMetrics, AucOfKnownOrders) {
  EXPECT_DOUBLE_EQ(Auc({0.1f, 0.4f, 0.35f, 0.8f}, {0, 0, 1, 1}), 0.75);  // the textbook example
  EXPECT_DOUBLE_EQ(Auc({1, 2, 3}, {0, 1, 1}), 1.0);
  EXPECT_DOUBLE_EQ(Auc({3, 2, 1}, {0, 1, 1}), 0.0);
  EXPECT_DOUBLE_EQ(Auc({5, 5, 5, 5}, {0, 1, 0, 1}), 0.5);  // ties count one half
  EXPECT_TRUE(std::isnan(Auc({1, 2}, {1, 1})));
  EXPECT_TRUE(std::isnan(Auc({}, {})));
}

TEST(ClickMetrics, AucEqualsTheShareOfOrderedPairs) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> score(0, 20);  // many ties
  std::vector<float> s(500), y(500);
  for (size_t i = 0; i < s.size(); ++i) {
    s[i] = static_cast<float>(score(rng));
    y[i] = rng() % 3 == 0 ? 1.0f : 0.0f;
  }
  double wins = 0, pairs = 0;
  for (size_t i = 0; i < s.size(); ++i)
    for (size_t j = 0; j < s.size(); ++j)
      if (y[i] == 1 && y[j] == 0) {
        pairs += 1;
        wins += s[i] > s[j] ? 1.0 : s[i] == s[j] ? 0.5 : 0.0;
      }
  EXPECT_NEAR(Auc(s, y), wins / pairs, 1e-12);
}

TEST(ClickMetrics, LogLossIsStableForLargeLogits) {
  EXPECT_NEAR(LogLoss({0.0f}, {1.0f}), std::log(2.0), 1e-12);
  EXPECT_NEAR(LogLoss({100.0f, -100.0f}, {1.0f, 0.0f}), 0.0, 1e-12);
  EXPECT_NEAR(LogLoss({-100.0f}, {1.0f}), 100.0, 1e-9);
  const double p = 1 / (1 + std::exp(-0.7));
  EXPECT_NEAR(LogLoss({0.7f, 0.7f}, {1.0f, 0.0f}), -(std::log(p) + std::log(1 - p)) / 2, 1e-6);
}

}  // namespace
}  // namespace shardps::worker
