// The parameters on the device (CPU backend): uploaded as pulled, or
// extrapolated along their drift when predicting (w + a (w - w_prev),
// a = PredictionFactor), with nothing to extrapolate from at first.
#include "worker/dense_step/param_loader.h"

#include <gtest/gtest.h>

#include <vector>

namespace shardps::worker {
namespace {

struct Values {
  std::vector<HostBuffer> w, b;
};

// Layer l's weights all `v + l`, its bias all `-v - l`.
Values Fill(Device& dev, const Mlp& mlp, float v) {
  Values x;
  for (int l = 0; l < mlp.num_layers(); ++l) {
    x.w.emplace_back(&dev, mlp.weight_size(l));
    x.b.emplace_back(&dev, mlp.bias_size(l));
    for (size_t i = 0; i < x.w[l].size(); ++i) x.w[l][i] = v + l;
    for (size_t i = 0; i < x.b[l].size(); ++i) x.b[l][i] = -v - l;
  }
  return x;
}

void ExpectOnDevice(Mlp& mlp, int l, float w, float b) {
  for (size_t i = 0; i < mlp.weight_size(l); ++i) ASSERT_FLOAT_EQ(mlp.weight(l).data()[i], w) << l << " " << i;
  for (size_t i = 0; i < mlp.bias_size(l); ++i) ASSERT_FLOAT_EQ(mlp.bias(l).data()[i], b) << l << " " << i;
}

TEST(ParamLoader, WithoutPredictionTheValuesAsPulled) {
  auto dev = MakeCpuDevice();
  Mlp mlp(dev.get(), {3, 4, 2});
  ParamLoader p(*dev, mlp, 2.0);
  EXPECT_FALSE(p.predicting());
  EXPECT_EQ(p.on_device().size(), 4u);
  const Values v = Fill(*dev, mlp, 1);
  p.Upload(v.w, v.b, nullptr, 1.0);
  ExpectOnDevice(mlp, 0, 1, -1);
  ExpectOnDevice(mlp, 1, 2, -2);
  EXPECT_EQ(p.last_ahead(), 0.0);
}

TEST(ParamLoader, PredictingEachTableGoesAlongItsOwnDrift) {
  auto dev = MakeCpuDevice();
  Mlp mlp(dev.get(), {3, 4, 2});
  ParamLoader p(*dev, mlp, 1.0);
  p.SetPredicting(true);
  const Values first = Fill(*dev, mlp, 1), second = Fill(*dev, mlp, 3);
  const int64_t unknown[4] = {-1, -1, -1, -1};  // the first load: nothing to extrapolate from
  p.Upload(first.w, first.b, unknown, 1.0);
  ExpectOnDevice(mlp, 0, 1, -1);
  ExpectOnDevice(mlp, 1, 2, -2);
  EXPECT_EQ(p.last_ahead(), 0.0);
  // tau 1, k 1: w0 drifted over 2 updates (a = 1/2), b0 over 4 (a = 1/4),
  // layer 1's weights over 1 (a = 1: at most k), its bias not known (a = 0).
  const int64_t between[4] = {2, 4, 1, -1};
  p.Upload(second.w, second.b, between, 1.0);
  for (size_t i = 0; i < mlp.weight_size(0); ++i) ASSERT_FLOAT_EQ(mlp.weight(0).data()[i], 3 + 0.5f * (3 - 1));
  for (size_t i = 0; i < mlp.bias_size(0); ++i) ASSERT_FLOAT_EQ(mlp.bias(0).data()[i], -3 + 0.25f * (-3 + 1));
  for (size_t i = 0; i < mlp.weight_size(1); ++i) ASSERT_FLOAT_EQ(mlp.weight(1).data()[i], 4 + 1.0f * (4 - 2));
  for (size_t i = 0; i < mlp.bias_size(1); ++i) ASSERT_FLOAT_EQ(mlp.bias(1).data()[i], -4);
  EXPECT_DOUBLE_EQ(p.last_ahead(), 0.5 * 2);  // layer 0's weights: a * between updates ahead
  // The previous values are the ones pulled, not the extrapolated ones.
  const int64_t again[4] = {2, 2, 2, 2};
  p.Upload(second.w, second.b, again, 1.0);
  ExpectOnDevice(mlp, 0, 3, -3);
  ExpectOnDevice(mlp, 1, 4, -4);
}

TEST(ParamLoader, NothingStaleNothingPredicted) {
  auto dev = MakeCpuDevice();
  Mlp mlp(dev.get(), {2, 2});
  ParamLoader p(*dev, mlp, 2.0);
  p.SetPredicting(true);
  const Values first = Fill(*dev, mlp, 1), second = Fill(*dev, mlp, 5);
  const int64_t between[2] = {3, 3};
  p.Upload(first.w, first.b, between, 0.0);
  p.Upload(second.w, second.b, between, 0.0);  // tau 0: every push fresh, nothing to predict
  ExpectOnDevice(mlp, 0, 5, -5);
  EXPECT_EQ(p.last_ahead(), 0.0);
}

}  // namespace
}  // namespace shardps::worker
