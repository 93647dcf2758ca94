// CUDA against CPU for every device operation (without a GPU these tests
// skip, saying why), and the CPU backend against the definitions of the
// operations the CPU-only tests do not cover (Extrapolate, the DLRM ones).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "worker/devices/device.h"

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

TEST_F(CudaVsCpu, DlrmOperations) {
  std::vector<float> labels(300);
  for (int i = 0; i < 300; ++i) labels[i] = static_cast<float>(i % 3 == 0);
  for (int out = 2; out < 4; ++out)  // the gradient, then the statistics
    Compare({Random(300, -40, 40), labels, std::vector<float>(300), {1.0f, 2.0f}}, out,
            [](Device* d, std::vector<float*>& p) { d->SigmoidBce(p[0], p[1], 300, p[2], p[3]); }, 1e-3f);
  Compare({Random(300, -4, 4), labels, {0.5f, 0.0f}}, 2,
          [](Device* d, std::vector<float*>& p) { d->SigmoidBce(p[0], p[1], 300, nullptr, p[2]); }, 1e-3f);
  const int rows = 37, n = 27, dim = 16, wide = 400;  // z written at columns 20 .. 370 of a wider matrix
  Compare({Random(rows * n * dim), Random(rows * wide)}, 1, [](Device* d, std::vector<float*>& p) {
    d->PairwiseDot(p[0], rows, n, dim, p[1] + 20, wide);
  });
  Compare({Random(rows * n * dim), Random(rows * wide), Random(rows * n * dim)}, 2,
          [](Device* d, std::vector<float*>& p) { d->PairwiseDotBackward(p[0], p[1] + 20, wide, rows, n, dim, p[2]); });
  for (bool acc : {false, true})
    Compare({Random(rows * 50), Random(rows * 70)}, 1, [acc](Device* d, std::vector<float*>& p) {
      d->CopyColumns(p[0] + 3, 50, rows, 40, p[1] + 5, 70, acc);
    });
}

// The DLRM operations of the CPU backend against their definitions.
TEST(CpuDevice, SigmoidBceIsStableForLargeLogits) {
  auto d = MakeCpuDevice();
  const std::vector<float> z = {0.0f, 2.5f, -1.5f, 100.0f, -100.0f, 30.0f, -0.25f}, y = {1, 0, 1, 1, 1, 0, 0};
  const int rows = static_cast<int>(z.size());
  std::vector<float> grad(rows);
  float stats[2] = {1.0f, 1.0f}, only[2] = {0.0f, 0.0f};  // added into
  d->SigmoidBce(z.data(), y.data(), rows, grad.data(), stats);
  d->SigmoidBce(z.data(), y.data(), rows, nullptr, only);
  double loss = 0;
  int correct = 0;
  for (int r = 0; r < rows; ++r) {
    const double zr = z[r];
    loss += std::log1p(std::exp(zr)) - zr * y[r];  // exact in double for |z| < 700
    correct += (zr > 0) == (y[r] == 1);
    EXPECT_NEAR(grad[r], (1 / (1 + std::exp(-zr)) - y[r]) / rows, 1e-7) << r;
  }
  EXPECT_EQ(correct, 2);  // z = 0 with y = 1 is wrong: a prediction is a click when z > 0
  EXPECT_NEAR(stats[0], 1.0 + loss, 1e-4 * loss);
  EXPECT_EQ(stats[1], 1.0f + correct);
  EXPECT_NEAR(only[0], loss, 1e-4 * loss);
  EXPECT_EQ(only[1], static_cast<float>(correct));
}

TEST(CpuDevice, PairwiseDotWritesTheUpperTriangleInTorchOrder) {
  auto d = MakeCpuDevice();
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(-1, 1);
  const int rows = 3, n = 4, dim = 3, stride = 10, at = 2;  // 6 pairs at columns 2 .. 7 of 10
  std::vector<float> v(rows * n * dim), out(rows * stride, -7.0f);
  for (auto& x : v) x = u(rng);
  d->PairwiseDot(v.data(), rows, n, dim, out.data() + at, stride);
  const int order[6][2] = {{0, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 3}};  // torch.triu_indices(4, 4, 1)
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < stride; ++c) {
      const int p = c - at;
      if (p < 0 || p >= PairCount(n)) {
        EXPECT_EQ(out[r * stride + c], -7.0f) << "column " << c << " is not z's";
        continue;
      }
      double dot = 0;
      for (int k = 0; k < dim; ++k) dot += v[(r * n + order[p][0]) * dim + k] * v[(r * n + order[p][1]) * dim + k];
      EXPECT_NEAR(out[r * stride + c], dot, 1e-6) << r << " " << p;
    }
}

TEST(CpuDevice, PairwiseDotBackwardIsTheSymmetricProduct) {
  auto d = MakeCpuDevice();
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  const int rows = 2, n = 5, dim = 3, stride = 13, at = 1;  // dz: 10 pairs at columns 1 .. 10
  std::vector<float> v(rows * n * dim), dz(rows * stride), dv(rows * n * dim, 99.0f);
  for (auto& x : v) x = u(rng);
  for (auto& x : dz) x = u(rng);
  d->PairwiseDotBackward(v.data(), dz.data() + at, stride, rows, n, dim, dv.data());
  for (int r = 0; r < rows; ++r) {
    std::vector<double> g(n * n, 0.0);  // dz as a symmetric matrix with a zero diagonal
    int p = at;
    for (int i = 0; i < n; ++i)
      for (int j = i + 1; j < n; ++j, ++p) g[i * n + j] = g[j * n + i] = dz[r * stride + p];
    for (int i = 0; i < n; ++i)
      for (int k = 0; k < dim; ++k) {
        double want = 0;
        for (int j = 0; j < n; ++j) want += g[i * n + j] * v[(r * n + j) * dim + k];
        EXPECT_NEAR(dv[(r * n + i) * dim + k], want, 1e-6) << r << " " << i << " " << k;
      }
  }
}

TEST(CpuDevice, CopyColumnsCopiesOrAddsOnlyTheBlock) {
  auto d = MakeCpuDevice();
  const int rows = 3;
  std::vector<float> src(rows * 6), dst(rows * 5, 1.0f);
  for (int i = 0; i < rows * 6; ++i) src[i] = static_cast<float>(i);
  d->CopyColumns(src.data() + 1, 6, rows, 2, dst.data() + 3, 5, false);  // src columns 1-2 to dst columns 3-4
  d->CopyColumns(src.data(), 6, rows, 2, dst.data(), 5, true);           // src columns 0-1 added to dst 0-1
  for (int r = 0; r < rows; ++r)
    EXPECT_EQ(std::vector<float>(dst.begin() + r * 5, dst.begin() + r * 5 + 5),
              (std::vector<float>{1.0f + 6 * r, 2.0f + 6 * r, 1.0f, 1.0f + 6 * r, 2.0f + 6 * r}))
        << r;
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
