// The sparse model's parts that read no sockets: a batch's examples from
// the click log (pool or shard), the rows it touches, the logistic loss
// and its gradient (against finite differences), the test set's rows and
// the accuracy (the true model's is about the best possible), the table.
// (The loop against real servers: tests/training_test.cc, sparse-lr.)
#include "worker/trainers/sparse_trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "tests/table_spec.h"

namespace shardps::worker {
namespace {

ClickLogOptions Clicks() {
  ClickLogOptions co;
  co.id_space = 1000;
  co.ids_per_example = 5;
  co.seed = 11;
  return co;
}

TEST(SparseLr, ABatchIsThePoolsIndicesOrTheShardsEveryWorldTh) {
  const ClickLogOptions co = Clicks();
  Batch b;
  b.first = 6;
  b.n = 3;
  ClickBatch pooled, shard, one;
  GatherClicks(co, b, true, 1, 4, &pooled);
  GatherClicks(co, b, false, 1, 4, &shard);
  ASSERT_EQ(pooled.labels.size(), 3u);
  ASSERT_EQ(pooled.offsets.size(), 4u);
  for (int i = 0; i < 3; ++i) {
    GenerateClicks(co, 0, 6 + i, 1, &one);  // pooled: position = index
    EXPECT_EQ(std::vector<uint64_t>(pooled.ids.begin() + pooled.offsets[i], pooled.ids.begin() + pooled.offsets[i + 1]),
              one.ids);
    EXPECT_EQ(pooled.labels[i], one.labels[0]);
    GenerateClicks(co, 0, 1 + 4 * (6 + i), 1, &one);  // shard 1 of 4: rank + world * position
    EXPECT_EQ(std::vector<uint64_t>(shard.ids.begin() + shard.offsets[i], shard.ids.begin() + shard.offsets[i + 1]),
              one.ids);
    EXPECT_EQ(shard.labels[i], one.labels[0]);
  }
}

TEST(SparseLr, TheRowsOfABatchAreTheBiasThenEachIdOnceAsFirstSeen) {
  ClickBatch b;
  b.offsets = {0, 3, 5};
  b.ids = {7, 3, 7, 9, 3};
  b.labels = {1, 0};
  std::vector<uint64_t> keys;
  std::unordered_map<uint64_t, uint32_t> slot;
  BatchKeys(b, &keys, &slot);
  EXPECT_EQ(keys, (std::vector<uint64_t>{kSparseBias, 7, 3, 9}));
  for (uint32_t i = 0; i < keys.size(); ++i) EXPECT_EQ(slot.at(keys[i]), i);
  EXPECT_EQ(slot.size(), keys.size());
}

double MeanLoss(const ClickBatch& b, const std::unordered_map<uint64_t, uint32_t>& slot, const std::vector<float>& v,
                float scale) {
  std::vector<float> g;
  return LogisticGradient(b, slot, v, scale, &g) / b.labels.size();
}

TEST(SparseLr, TheGradientIsTheMeanLosssByFiniteDifferences) {
  ClickBatch b;
  Batch at;
  at.n = 16;
  GatherClicks(Clicks(), at, true, 0, 1, &b);
  std::vector<uint64_t> keys;
  std::unordered_map<uint64_t, uint32_t> slot;
  BatchKeys(b, &keys, &slot);
  const float scale = 1.0f / std::sqrt(5.0f);
  std::vector<float> zero(keys.size(), 0.0f), grads;
  // All weights 0: p = 1/2 for every example.
  EXPECT_NEAR(LogisticGradient(b, slot, zero, scale, &grads), 16 * std::log(2.0), 1e-4);
  std::mt19937 rng(4);
  std::normal_distribution<float> nd(0, 0.5f);
  std::vector<float> v(keys.size());
  for (auto& x : v) x = nd(rng);
  LogisticGradient(b, slot, v, scale, &grads);
  ASSERT_EQ(grads.size(), keys.size());
  const float eps = 1e-2f;
  for (size_t i = 0; i < v.size(); ++i) {
    std::vector<float> up = v, down = v;
    up[i] += eps;
    down[i] -= eps;
    const double fd = (MeanLoss(b, slot, up, scale) - MeanLoss(b, slot, down, scale)) / (2 * eps);
    EXPECT_NEAR(grads[i], fd, 2e-3) << "row " << i;
  }
}

TEST(SparseLr, TheTestRowsAreSortedOnceEachWithTheBias) {
  ClickBatch t;
  t.offsets = {0, 2, 4};
  t.ids = {9, 2, 2, 5};
  t.labels = {0, 1};
  EXPECT_EQ(TestKeys(t), (std::vector<uint64_t>{2, 5, 9, kSparseBias}));
}

TEST(SparseLr, TheTrueModelIsAboutAsAccurateAsPossibleAndTheBiasAloneIsTheBaseRate) {
  const ClickLogOptions co = Clicks();
  ClickBatch test;
  GenerateClicks(co, 1, 0, 4000, &test);
  const float scale = 1.0f / std::sqrt(static_cast<float>(co.ids_per_example));
  std::unordered_map<uint64_t, float> w, bias_only;
  // The click log's labels come from sigmoid((bias + sum of weights) /
  // sqrt(ids)): the model's bias is the true one scaled.
  for (uint64_t k : TestKeys(test)) {
    w[k] = k == kSparseBias ? TrueClickWeight(co, k) * scale : TrueClickWeight(co, k);
    bias_only[k] = k == kSparseBias ? 1.0f : 0.0f;
  }
  EXPECT_NEAR(ClickAccuracy(test, w, scale), test.bayes_accuracy, 0.03);
  double ones = 0;
  for (float y : test.labels) ones += y;
  EXPECT_DOUBLE_EQ(ClickAccuracy(test, bias_only, scale), ones / test.labels.size());  // every example a click
}

TEST(SparseLr, TheTableIsOneSparseColumn) {
  const TableSpec want = testing::Sparse("sparse_lr.w", 1).Adagrad(0.1f, 0.1f);
  EXPECT_TRUE(SparseLrTableSpec(OptimizerKind::kAdagrad, 0.1f).SameShape(want));
  EXPECT_FALSE(SparseLrTableSpec(OptimizerKind::kAdagrad, 0.2f).SameShape(want));
}

}  // namespace
}  // namespace shardps::worker
