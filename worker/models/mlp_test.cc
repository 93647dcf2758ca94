// Gradient checks by finite differences for every layer on the CPU backend,
// and the device operations against plain reference loops.
#include "worker/models/mlp.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace shardps::worker {
namespace {

float MeanLoss(Device* dev, Mlp& m, const std::vector<float>& x, const std::vector<float>& y, int rows) {
  float stats[2] = {0, 0};
  m.Evaluate(x.data(), y.data(), rows, stats);
  return stats[0] / rows;
}

TEST(Mlp, GradientsMatchFiniteDifferencesForEveryLayer) {
  auto dev = MakeCpuDevice();
  const std::vector<int> dims = {6, 5, 4, 3};
  Mlp m(dev.get(), dims);
  const int rows = 7;
  std::vector<float> x(rows * dims[0]), y(rows);
  // Finite differences are meaningless across a ReLU kink: draw parameters
  // until every hidden pre-activation is at least 0.05 away from zero (the
  // perturbations below move them by less than 0.01).
  for (uint32_t seed = 1;; ++seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0, 0.7f);
    for (int l = 0; l < m.num_layers(); ++l) {
      for (size_t i = 0; i < m.weight_size(l); ++i) m.weight(l).data()[i] = nd(rng);
      for (size_t i = 0; i < m.bias_size(l); ++i) m.bias(l).data()[i] = nd(rng) * 0.1f;
    }
    for (auto& v : x) v = nd(rng);
    std::vector<float> in = x, z;
    float closest = 1e9f;
    for (int l = 0; l + 1 < m.num_layers(); ++l) {
      z.assign(static_cast<size_t>(rows) * dims[l + 1], 0.0f);
      dev->Gemm(false, false, rows, dims[l + 1], dims[l], 1.0f, in.data(), m.weight(l).data(), 0.0f, z.data());
      dev->AddBias(z.data(), m.bias(l).data(), rows, dims[l + 1]);
      for (float v : z) closest = std::min(closest, std::fabs(v));
      dev->Relu(z.data(), z.size());
      in = z;
    }
    if (closest > 0.05f) break;
    ASSERT_LT(seed, 10000u);
  }
  for (int r = 0; r < rows; ++r) y[r] = static_cast<float>(r % dims.back());
  m.Forward(x.data(), rows);
  float stats[2] = {0, 0};
  std::vector<int> ready;
  m.Backward(x.data(), y.data(), rows, stats, [&](int l) { ready.push_back(l); });
  EXPECT_EQ(ready, (std::vector<int>{2, 1, 0}));  // last layer first
  const float eps = 2e-3f;
  auto check = [&](float* p, const float* g, size_t n, const char* what, int l) {
    for (size_t i = 0; i < n; ++i) {
      const float keep = p[i];
      p[i] = keep + eps;
      float up = MeanLoss(dev.get(), m, x, y, rows);
      p[i] = keep - eps;
      float down = MeanLoss(dev.get(), m, x, y, rows);
      p[i] = keep;
      float numeric = (up - down) / (2 * eps);
      EXPECT_NEAR(g[i], numeric, 2e-3f + 2e-2f * std::fabs(numeric)) << what << " of layer " << l << " [" << i << "]";
    }
  };
  for (int l = 0; l < m.num_layers(); ++l) {
    std::vector<float> gw(m.grad_weight(l).data(), m.grad_weight(l).data() + m.weight_size(l));
    std::vector<float> gb(m.grad_bias(l).data(), m.grad_bias(l).data() + m.bias_size(l));
    check(m.weight(l).data(), gw.data(), gw.size(), "weight", l);
    check(m.bias(l).data(), gb.data(), gb.size(), "bias", l);
  }
}

TEST(Mlp, SoftmaxRegressionLossAndAccuracyStats) {
  auto dev = MakeCpuDevice();
  Mlp m(dev.get(), {2, 2});
  // Weights that pick class = argmax(x).
  float w[] = {1, 0, 0, 1}, b[] = {0, 0};
  std::copy(w, w + 4, m.weight(0).data());
  std::copy(b, b + 2, m.bias(0).data());
  std::vector<float> x = {3, 0, 0, 3, 3, 0}, y = {0, 1, 1};
  float stats[2] = {0, 0};
  m.Evaluate(x.data(), y.data(), 3, stats);
  EXPECT_EQ(stats[1], 2.0f);
  // Loss of a right answer with margin 3: log(1 + e^-3); wrong: log(1 + e^3).
  EXPECT_NEAR(stats[0], 2 * std::log1p(std::exp(-3.0)) + std::log1p(std::exp(3.0)), 1e-5);
}

TEST(CpuDevice, GemmTransposesAgreeWithLoops) {
  auto dev = MakeCpuDevice();
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  const int m = 3, n = 4, k = 5;
  std::vector<float> a(m * k), b(k * n), at(k * m), bt(n * k);
  for (auto& v : a) v = u(rng);
  for (auto& v : b) v = u(rng);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < k; ++j) at[j * m + i] = a[i * k + j];
  for (int i = 0; i < k; ++i)
    for (int j = 0; j < n; ++j) bt[j * k + i] = b[i * n + j];
  std::vector<float> want(m * n, 0.0f);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j)
      for (int p = 0; p < k; ++p) want[i * n + j] += a[i * k + p] * b[p * n + j];
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      std::vector<float> c(m * n, 0.0f);
      dev->Gemm(ta, tb, m, n, k, 1.0f, ta ? at.data() : a.data(), tb ? bt.data() : b.data(), 0.0f, c.data());
      for (int i = 0; i < m * n; ++i) EXPECT_NEAR(c[i], want[i], 1e-5) << ta << tb;
    }
}

TEST(Mlp, AStepOnTheGpuGivesTheGradientsOfTheCpu) {
  std::string why;
  std::unique_ptr<Device> gpu = MakeCudaDevice(&why);
  if (!gpu) GTEST_SKIP() << "no GPU: " << why;
  std::unique_ptr<Device> cpu = MakeCpuDevice();
  std::mt19937 rng(7);
  auto Random = [&](size_t n, float lo, float hi) {
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = u(rng);
    return v;
  };
  const std::vector<int> dims = {784, 256, 128, 10};
  Mlp a(cpu.get(), dims), b(gpu.get(), dims);
  for (int l = 0; l < 3; ++l) {
    auto w = Random(a.weight_size(l), -0.05f, 0.05f), bias = Random(a.bias_size(l), -0.01f, 0.01f);
    cpu->Upload(a.weight(l).data(), w.data(), w.size());
    cpu->Upload(a.bias(l).data(), bias.data(), bias.size());
    gpu->Upload(b.weight(l).data(), w.data(), w.size());
    gpu->Upload(b.bias(l).data(), bias.data(), bias.size());
  }
  auto x = Random(64 * 784, 0, 1);
  std::vector<float> y(64);
  for (int i = 0; i < 64; ++i) y[i] = static_cast<float>(i % 10);
  DeviceBuffer gx(gpu.get(), x.size()), gy(gpu.get(), 64), gs(gpu.get(), 2);
  gpu->Upload(gx.data(), x.data(), x.size());
  gpu->Upload(gy.data(), y.data(), 64);
  gpu->Zero(gs.data(), 2);
  float cs[2] = {0, 0};
  a.Forward(x.data(), 64);
  a.Backward(x.data(), y.data(), 64, cs, nullptr);
  b.Forward(gx.data(), 64);
  b.Backward(gx.data(), gy.data(), 64, gs.data(), nullptr);
  for (int l = 0; l < 3; ++l) {
    std::vector<float> g(b.weight_size(l));
    gpu->Download(g.data(), b.grad_weight(l).data(), g.size());
    for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], a.grad_weight(l).data()[i], 1e-4f) << l << " " << i;
  }
}

}  // namespace
}  // namespace shardps::worker
