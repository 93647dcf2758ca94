// DenseStack on the CPU backend against a double-precision reference and
// central finite differences; on a GPU, CUDA against CPU (skipped without).
#include "worker/models/dense_stack.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "worker/models/dlrm_reference.h"

namespace shardps::worker {
namespace {

using testing::CentralDifferences;
using testing::InitLikeTorch;
using testing::ReferenceStack;

std::vector<float> Uniform(size_t n, std::mt19937& rng, float lo = -1, float hi = 1) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

TEST(DenseStack, ForwardMatchesTheReferenceWithAndWithoutTheLastRelu) {
  auto dev = MakeCpuDevice();
  std::mt19937 rng(3);
  for (bool relu_last : {false, true}) {
    DenseStack s(dev.get(), {5, 7, 4}, relu_last);
    InitLikeTorch(s, rng);
    const int rows = 6;
    const auto x = Uniform(static_cast<size_t>(rows) * 5, rng);
    const float* out = s.Forward(x.data(), rows);
    const auto want = ReferenceStack(s, std::vector<double>(x.begin(), x.end()), rows, nullptr);
    bool negative = false;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(out[i], want[i], 1e-5) << relu_last << " " << i;
      negative |= out[i] < 0;
    }
    EXPECT_EQ(negative, !relu_last);  // a linear last layer has negative outputs (here), a ReLU'd one none
  }
}

// Loss = sum of c[i] * out[i], so dout = c.
TEST(DenseStack, GradientsMatchFiniteDifferencesForEveryLayerAndTheInput) {
  auto dev = MakeCpuDevice();
  const std::vector<int> dims = {4, 6, 5, 3};
  DenseStack s(dev.get(), dims, /*relu_last=*/true);
  const int rows = 5;
  std::vector<float> x, c;
  for (uint32_t seed = 1;; ++seed) {  // parameters away from every ReLU's kink
    std::mt19937 rng(seed);
    InitLikeTorch(s, rng);
    x = Uniform(static_cast<size_t>(rows) * dims[0], rng);
    c = Uniform(static_cast<size_t>(rows) * dims.back(), rng);
    double closest = 1e9;
    ReferenceStack(s, std::vector<double>(x.begin(), x.end()), rows, &closest);
    if (closest > 0.02) break;
    ASSERT_LT(seed, 100000u);
  }
  auto loss = [&] {
    const auto out = ReferenceStack(s, std::vector<double>(x.begin(), x.end()), rows, nullptr);
    double sum = 0;
    for (size_t i = 0; i < out.size(); ++i) sum += c[i] * out[i];
    return sum;
  };
  s.Forward(x.data(), rows);
  std::vector<float> dx(x.size());
  std::vector<int> ready;
  s.Backward(x.data(), c.data(), rows, dx.data(), [&](int l) { ready.push_back(l); });
  EXPECT_EQ(ready, (std::vector<int>{2, 1, 0}));  // last layer first
  auto expect_close = [](const float* got, const std::vector<double>& want, const char* what, int l) {
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 1e-4 + 1e-3 * std::fabs(want[i])) << what << " of layer " << l << " [" << i << "]";
  };
  const float eps = 1e-3f;
  for (int l = 0; l < s.num_layers(); ++l) {
    const std::vector<float> gw(s.grad_weight(l).data(), s.grad_weight(l).data() + s.weight_size(l));
    const std::vector<float> gb(s.grad_bias(l).data(), s.grad_bias(l).data() + s.bias_size(l));
    expect_close(gw.data(), CentralDifferences(s.weight(l).data(), gw.size(), eps, loss), "weight", l);
    expect_close(gb.data(), CentralDifferences(s.bias(l).data(), gb.size(), eps, loss), "bias", l);
  }
  expect_close(dx.data(), CentralDifferences(x.data(), x.size(), eps, loss), "input", 0);
}

TEST(DenseStack, GrowsItsBuffersForALargerBatchAndKeepsDoutUnchanged) {
  auto dev = MakeCpuDevice();
  std::mt19937 rng(9);
  DenseStack s(dev.get(), {3, 4, 2}, /*relu_last=*/true);
  InitLikeTorch(s, rng);
  for (int rows : {2, 9, 4}) {
    const auto x = Uniform(static_cast<size_t>(rows) * 3, rng);
    const auto dout = Uniform(static_cast<size_t>(rows) * 2, rng);
    const float* out = s.Forward(x.data(), rows);
    const auto want = ReferenceStack(s, std::vector<double>(x.begin(), x.end()), rows, nullptr);
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(out[i], want[i], 1e-5) << rows;
    std::vector<float> kept = dout;
    s.Backward(x.data(), dout.data(), rows, nullptr, nullptr);
    EXPECT_EQ(dout, kept);
  }
}

TEST(DenseStack, CudaMatchesCpu) {
  std::string why;
  auto gpu = MakeCudaDevice(&why);
  if (!gpu) GTEST_SKIP() << "no GPU: " << why;
  auto cpu = MakeCpuDevice();
  const std::vector<int> dims = {13, 64, 16};
  DenseStack a(cpu.get(), dims, true), b(gpu.get(), dims, true);
  std::mt19937 rng(4);
  InitLikeTorch(a, rng);
  for (int l = 0; l < a.num_layers(); ++l) {
    gpu->Upload(b.weight(l).data(), a.weight(l).data(), a.weight_size(l));
    gpu->Upload(b.bias(l).data(), a.bias(l).data(), a.bias_size(l));
  }
  const int rows = 37;
  const auto x = Uniform(static_cast<size_t>(rows) * 13, rng, 0, 3);
  const auto dout = Uniform(static_cast<size_t>(rows) * 16, rng);
  DeviceBuffer gx(gpu.get(), x.size()), gd(gpu.get(), dout.size()), gdx(gpu.get(), x.size());
  gpu->Upload(gx.data(), x.data(), x.size());
  gpu->Upload(gd.data(), dout.data(), dout.size());
  std::vector<float> dx(x.size()), got_out(static_cast<size_t>(rows) * 16), got_dx(x.size());
  const float* out = a.Forward(x.data(), rows);
  a.Backward(x.data(), dout.data(), rows, dx.data(), nullptr);
  gpu->Download(got_out.data(), b.Forward(gx.data(), rows), got_out.size());
  b.Backward(gx.data(), gd.data(), rows, gdx.data(), nullptr);
  gpu->Download(got_dx.data(), gdx.data(), got_dx.size());
  for (size_t i = 0; i < got_out.size(); ++i) ASSERT_NEAR(got_out[i], out[i], 1e-4f) << i;
  for (size_t i = 0; i < dx.size(); ++i) ASSERT_NEAR(got_dx[i], dx[i], 1e-4f) << i;
  for (int l = 0; l < a.num_layers(); ++l) {
    std::vector<float> g(a.weight_size(l));
    gpu->Download(g.data(), b.grad_weight(l).data(), g.size());
    for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], a.grad_weight(l).data()[i], 1e-3f) << l << " " << i;
    g.resize(a.bias_size(l));
    gpu->Download(g.data(), b.grad_bias(l).data(), g.size());
    for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], a.grad_bias(l).data()[i], 1e-3f) << l << " " << i;
  }
}

}  // namespace
}  // namespace shardps::worker
