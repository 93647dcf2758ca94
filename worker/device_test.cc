// CUDA against CPU for every device operation. Without a GPU these tests
// skip, saying why.
#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <vector>

#include "worker/device.h"
#include "worker/mlp.h"

namespace shardps::worker {
namespace {

class CudaVsCpu : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    gpu_ = MakeCudaDevice(&why);
    if (!gpu_) GTEST_SKIP() << "no GPU: " << why;
    cpu_ = MakeCpuDevice();
  }
  std::vector<float> Random(size_t n, float lo = -1, float hi = 1) {
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = u(rng_);
    return v;
  }
  // Runs `op` on both devices with the same inputs; compares the outputs.
  template <typename Op>
  void Compare(std::vector<std::vector<float>> inputs, size_t out_index, Op op, float tol = 1e-4f) {
    std::vector<std::vector<float>> results;
    for (Device* d : {cpu_.get(), gpu_.get()}) {
      std::vector<DeviceBuffer> bufs;
      std::vector<float*> ptrs;
      for (auto& in : inputs) {
        bufs.emplace_back(d, in.size());
        d->Upload(bufs.back().data(), in.data(), in.size());
        ptrs.push_back(bufs.back().data());
      }
      op(d, ptrs);
      std::vector<float> out(inputs[out_index].size());
      d->Download(out.data(), ptrs[out_index], out.size());
      results.push_back(out);
    }
    for (size_t i = 0; i < results[0].size(); ++i)
      ASSERT_NEAR(results[0][i], results[1][i], tol * (1 + std::fabs(results[0][i]))) << i;
  }
  std::mt19937 rng_{5};
  std::unique_ptr<Device> cpu_, gpu_;
};

TEST_F(CudaVsCpu, Gemm) {
  const int m = 33, n = 17, k = 65;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      Compare({Random(m * k), Random(k * n), Random(m * n)}, 2, [&](Device* d, std::vector<float*>& p) {
        d->Gemm(ta, tb, m, n, k, 0.5f, p[0], p[1], 0.25f, p[2]);
      });
}

TEST_F(CudaVsCpu, AddBiasReluAndBackward) {
  Compare({Random(40 * 30), Random(30)}, 0, [](Device* d, std::vector<float*>& p) { d->AddBias(p[0], p[1], 40, 30); });
  Compare({Random(1000)}, 0, [](Device* d, std::vector<float*>& p) { d->Relu(p[0], 1000); });
  Compare({Random(1000), Random(1000)}, 0, [](Device* d, std::vector<float*>& p) { d->ReluBackward(p[0], p[1], 1000); });
}

TEST_F(CudaVsCpu, SoftmaxCrossEntropyAndColumnSum) {
  std::vector<float> labels(64);
  for (int i = 0; i < 64; ++i) labels[i] = static_cast<float>(i % 10);
  Compare({Random(64 * 10, -5, 5), labels, std::vector<float>(640), std::vector<float>(2)}, 2,
          [](Device* d, std::vector<float*>& p) { d->SoftmaxCrossEntropy(p[0], p[1], 64, 10, p[2], p[3]); });
  Compare({Random(64 * 10, -5, 5), labels, std::vector<float>(640), std::vector<float>(2)}, 3,
          [](Device* d, std::vector<float*>& p) { d->SoftmaxCrossEntropy(p[0], p[1], 64, 10, p[2], p[3]); }, 1e-3f);
  Compare({Random(50 * 20), std::vector<float>(20)}, 1, [](Device* d, std::vector<float*>& p) { d->ColumnSum(p[0], 50, 20, p[1]); });
  Compare({Random(100)}, 0, [](Device* d, std::vector<float*>& p) { d->Zero(p[0], 100); });
  for (int out = 0; out < 2; ++out)  // the extrapolated values, then the values kept
    Compare({Random(1000), Random(1000)}, out,
            [](Device* d, std::vector<float*>& p) { d->Extrapolate(p[0], p[1], 1000, 0.45f); });
}

// The CPU backend against the definition (it is the reference above).
TEST(CpuDevice, Extrapolate) {
  auto d = MakeCpuDevice();
  const std::vector<float> w0 = {1.0f, -2.0f, 0.5f}, prev0 = {0.5f, -2.5f, 0.5f};
  DeviceBuffer w(d.get(), 3), prev(d.get(), 3);
  d->Upload(w.data(), w0.data(), 3);
  d->Upload(prev.data(), prev0.data(), 3);
  d->Extrapolate(w.data(), prev.data(), 3, 0.5f);
  std::vector<float> got(3), kept(3);
  d->Download(got.data(), w.data(), 3);
  d->Download(kept.data(), prev.data(), 3);
  EXPECT_EQ(got, (std::vector<float>{1.25f, -1.75f, 0.5f}));
  EXPECT_EQ(kept, w0);
  // a = 0: unchanged, and kept, whatever prev held (a first load's is not
  // initialised).
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> junk = {nan, std::numeric_limits<float>::infinity(), nan};
  d->Upload(prev.data(), junk.data(), 3);
  d->Extrapolate(w.data(), prev.data(), 3, 0.0f);
  d->Download(got.data(), w.data(), 3);
  d->Download(kept.data(), prev.data(), 3);
  EXPECT_EQ(got, (std::vector<float>{1.25f, -1.75f, 0.5f}));
  EXPECT_EQ(kept, got);
}

TEST_F(CudaVsCpu, WholeMlpStep) {
  const std::vector<int> dims = {784, 256, 128, 10};
  Mlp a(cpu_.get(), dims), b(gpu_.get(), dims);
  for (int l = 0; l < 3; ++l) {
    auto w = Random(a.weight_size(l), -0.05f, 0.05f), bias = Random(a.bias_size(l), -0.01f, 0.01f);
    cpu_->Upload(a.weight(l).data(), w.data(), w.size());
    cpu_->Upload(a.bias(l).data(), bias.data(), bias.size());
    gpu_->Upload(b.weight(l).data(), w.data(), w.size());
    gpu_->Upload(b.bias(l).data(), bias.data(), bias.size());
  }
  auto x = Random(64 * 784, 0, 1);
  std::vector<float> y(64);
  for (int i = 0; i < 64; ++i) y[i] = static_cast<float>(i % 10);
  DeviceBuffer gx(gpu_.get(), x.size()), gy(gpu_.get(), 64), gs(gpu_.get(), 2);
  gpu_->Upload(gx.data(), x.data(), x.size());
  gpu_->Upload(gy.data(), y.data(), 64);
  gpu_->Zero(gs.data(), 2);
  float cs[2] = {0, 0};
  a.Forward(x.data(), 64);
  a.Backward(x.data(), y.data(), 64, cs, nullptr);
  b.Forward(gx.data(), 64);
  b.Backward(gx.data(), gy.data(), 64, gs.data(), nullptr);
  for (int l = 0; l < 3; ++l) {
    std::vector<float> g(b.weight_size(l));
    gpu_->Download(g.data(), b.grad_weight(l).data(), g.size());
    for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], a.grad_weight(l).data()[i], 1e-4f) << l << " " << i;
  }
}

TEST(DeviceChoice, AutoAlwaysGivesADeviceAndSaysWhich) {
  std::unique_ptr<Device> d;
  std::string why;
  ASSERT_TRUE(MakeDevice(DeviceKind::kAuto, &d, &why).ok());
  ASSERT_TRUE(d);
  EXPECT_FALSE(why.empty());
  ASSERT_TRUE(MakeDevice(DeviceKind::kCpu, &d, &why).ok());
  EXPECT_EQ(d->name(), "cpu");
  DeviceKind k;
  EXPECT_FALSE(ParseDeviceKind("tpu", &k).ok());
}

}  // namespace
}  // namespace shardps::worker
