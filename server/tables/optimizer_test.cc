#include "server/tables/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace shardps {
namespace {

TableSpec Spec(OptimizerKind k) {
  TableSpec s;
  s.name = "t";
  s.rows = 1;
  s.cols = 2;
  s.optimizer = k;
  s.lr = 0.1f;
  s.momentum = 0.5f;
  s.beta1 = 0.9f;
  s.beta2 = 0.99f;
  s.eps = 1e-8f;
  s.initial_accumulator = 0.1f;
  return s;
}

TEST(Optimizer, SgdHandComputed) {
  TableSpec s = Spec(OptimizerKind::kSGD);
  EXPECT_EQ(OptimizerStateWidth(s), 0u);
  std::vector<float> w = {1.0f, -2.0f}, g = {0.5f, 1.0f};
  ApplyOptimizer(s, w.data(), nullptr, g.data(), 1, 1.0f);
  EXPECT_FLOAT_EQ(w[0], 1.0f - 0.05f);
  EXPECT_FLOAT_EQ(w[1], -2.0f - 0.1f);
  ApplyOptimizer(s, w.data(), nullptr, g.data(), 1, 0.5f);  // scaled gradient
  EXPECT_FLOAT_EQ(w[0], 0.95f - 0.025f);
}

TEST(Optimizer, MomentumHandComputed) {
  TableSpec s = Spec(OptimizerKind::kMomentum);
  ASSERT_EQ(OptimizerStateWidth(s), 2u);
  std::vector<float> w = {1.0f, 1.0f}, v(2), g = {1.0f, -1.0f};
  InitOptimizerState(s, v.data(), 1);
  ApplyOptimizer(s, w.data(), v.data(), g.data(), 1, 1.0f);
  // v = 1, w = 1 - 0.1
  EXPECT_FLOAT_EQ(v[0], 1.0f);
  EXPECT_FLOAT_EQ(w[0], 0.9f);
  ApplyOptimizer(s, w.data(), v.data(), g.data(), 1, 1.0f);
  // v = 0.5 * 1 + 1 = 1.5, w = 0.9 - 0.15
  EXPECT_FLOAT_EQ(v[0], 1.5f);
  EXPECT_FLOAT_EQ(w[0], 0.75f);
  EXPECT_FLOAT_EQ(w[1], 1.25f);
}

TEST(Optimizer, AdagradHandComputed) {
  TableSpec s = Spec(OptimizerKind::kAdagrad);
  std::vector<float> w = {0.0f, 0.0f}, a(2), g = {2.0f, 0.0f};
  InitOptimizerState(s, a.data(), 1);
  EXPECT_FLOAT_EQ(a[0], 0.1f);
  ApplyOptimizer(s, w.data(), a.data(), g.data(), 1, 1.0f);
  EXPECT_FLOAT_EQ(a[0], 4.1f);
  EXPECT_NEAR(w[0], -0.1 * 2.0 / std::sqrt(4.1), 1e-7);
  EXPECT_FLOAT_EQ(w[1], 0.0f);
}

TEST(Optimizer, AdamHandComputed) {
  TableSpec s = Spec(OptimizerKind::kAdam);
  ASSERT_EQ(OptimizerStateWidth(s), 5u);
  std::vector<float> w = {1.0f, 1.0f}, st(5), g = {0.5f, -0.25f};
  InitOptimizerState(s, st.data(), 1);
  ApplyOptimizer(s, w.data(), st.data(), g.data(), 1, 1.0f);
  // Step 1: m = 0.1 g, v = 0.01 g^2, bias-corrected m = g, v = g^2,
  // so the step is lr * sign(g) (up to eps).
  EXPECT_FLOAT_EQ(st[4], 1.0f);
  EXPECT_NEAR(w[0], 0.9, 1e-6);
  EXPECT_NEAR(w[1], 1.1, 1e-6);
  // Step 2 by hand, in double.
  double m = 0.1 * 0.5, v = 0.01 * 0.25;
  m = 0.9 * m + 0.1 * 0.5;
  v = 0.99 * v + 0.01 * 0.25;
  double mh = m / (1 - 0.81), vh = v / (1 - 0.9801);
  double expect = 0.9 - 0.1 * mh / (std::sqrt(vh) + 1e-8);
  ApplyOptimizer(s, w.data(), st.data(), g.data(), 1, 1.0f);
  EXPECT_NEAR(w[0], expect, 1e-6);
  EXPECT_FLOAT_EQ(st[4], 2.0f);
}

TEST(Optimizer, MultiRowAdamKeepsRowsApart) {
  TableSpec s = Spec(OptimizerKind::kAdam);
  std::vector<float> w(4, 0.0f), st(10), g = {1, 1, 0, 0};
  InitOptimizerState(s, st.data(), 2);
  ApplyOptimizer(s, w.data(), st.data(), g.data(), 2, 1.0f);
  EXPECT_NEAR(w[0], -0.1, 1e-6);
  EXPECT_EQ(w[2], 0.0f);
  EXPECT_EQ(st[4], 1.0f);
  EXPECT_EQ(st[9], 1.0f);
}

// A stale gradient under kScaleLr (server/tables/optimizer.h): lr * lr_scale for
// SGD, Adagrad and Adam; momentum takes the gradient into its velocity at
// lr_scale, leaving what earlier gradients built.
TEST(Optimizer, StalenessScalesTheStepHandComputed) {
  EXPECT_EQ(StalenessLrScale(StalenessRule::kScaleLr, 0), 1.0f);
  EXPECT_EQ(StalenessLrScale(StalenessRule::kScaleLr, 1), 1.0f);
  EXPECT_EQ(StalenessLrScale(StalenessRule::kScaleLr, 4), 0.25f);
  EXPECT_EQ(StalenessLrScale(StalenessRule::kNone, 4), 1.0f);
  TableSpec d = Spec(OptimizerKind::kSGD);
  EXPECT_EQ(EffectiveStalenessRule(d), StalenessRule::kScaleLr);
  d.staleness_rule = StalenessRule::kNone;
  EXPECT_EQ(EffectiveStalenessRule(d), StalenessRule::kNone);

  TableSpec s = Spec(OptimizerKind::kSGD);
  std::vector<float> w = {1.0f, 1.0f}, g = {1.0f, -2.0f};
  ApplyOptimizer(s, w.data(), nullptr, g.data(), 1, 1.0f, 0.25f);
  EXPECT_FLOAT_EQ(w[0], 1.0f - 0.025f);
  EXPECT_FLOAT_EQ(w[1], 1.0f + 0.05f);

  TableSpec m = Spec(OptimizerKind::kMomentum);
  std::vector<float> mw = {0.0f, 0.0f}, v(2), mg = {1.0f, 1.0f};
  InitOptimizerState(m, v.data(), 1);
  ApplyOptimizer(m, mw.data(), v.data(), mg.data(), 1, 1.0f);        // v = 1, w = -0.1
  ApplyOptimizer(m, mw.data(), v.data(), mg.data(), 1, 1.0f, 0.5f);  // v = 0.5 + 0.5, w = -0.2
  EXPECT_FLOAT_EQ(v[0], 1.0f);
  EXPECT_FLOAT_EQ(mw[0], -0.2f);

  TableSpec a = Spec(OptimizerKind::kAdagrad);
  std::vector<float> aw = {0.0f, 0.0f}, acc(2), ag = {2.0f, 0.0f};
  InitOptimizerState(a, acc.data(), 1);
  ApplyOptimizer(a, aw.data(), acc.data(), ag.data(), 1, 1.0f, 0.5f);
  EXPECT_FLOAT_EQ(acc[0], 4.1f);  // the whole gradient in the accumulator
  EXPECT_NEAR(aw[0], -0.05 * 2.0 / std::sqrt(4.1), 1e-7);

  TableSpec adam = Spec(OptimizerKind::kAdam);
  std::vector<float> dw = {1.0f, 1.0f}, st(5), dg = {0.5f, -0.25f};
  InitOptimizerState(adam, st.data(), 1);
  ApplyOptimizer(adam, dw.data(), st.data(), dg.data(), 1, 1.0f, 0.5f);
  // Step 1 of Adam moves lr * sign(g); at half the rate, 0.05.
  EXPECT_NEAR(dw[0], 0.95, 1e-6);
  EXPECT_NEAR(dw[1], 1.05, 1e-6);
  EXPECT_FLOAT_EQ(st[4], 1.0f);
}

}  // namespace
}  // namespace shardps
