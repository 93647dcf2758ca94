// The batch on the device (CPU backend): a batch's examples gathered in
// the epoch's order, a dead worker's batch of an earlier epoch in that
// epoch's order, the stats zeroed for each batch and the mean loss.
#include "worker/dense_step/device_batch.h"

#include <gtest/gtest.h>

#include <vector>

namespace shardps::worker {
namespace {

// `rows` examples of 3 features: example i is (i, i + 0.5, -i), label i % 10.
Dataset Numbered(int rows) {
  Dataset d;
  d.rows = rows;
  d.cols = 3;
  for (int i = 0; i < rows; ++i) {
    d.x.insert(d.x.end(), {static_cast<float>(i), i + 0.5f, -static_cast<float>(i)});
    d.y.push_back(static_cast<float>(i % 10));
  }
  return d;
}

// The examples (by their first feature) and labels on the device.
std::pair<std::vector<int>, std::vector<float>> OnDevice(Device& dev, const DeviceBatch& b, const Dataset& d) {
  std::vector<float> x(static_cast<size_t>(b.n()) * d.cols), y(b.n());
  dev.Download(x.data(), b.x(), x.size());
  dev.Download(y.data(), b.y(), y.size());
  std::vector<int> ids;
  for (int i = 0; i < b.n(); ++i) {
    const int ex = static_cast<int>(x[static_cast<size_t>(i) * d.cols]);
    EXPECT_EQ(x[static_cast<size_t>(i) * d.cols + 1], ex + 0.5f);
    EXPECT_EQ(x[static_cast<size_t>(i) * d.cols + 2], -static_cast<float>(ex));
    ids.push_back(ex);
  }
  return {ids, y};
}

TEST(DeviceBatch, ABatchIsItsPositionsOfTheEpochsOrder) {
  auto dev = MakeCpuDevice();
  const Dataset d = Numbered(40);
  DeviceBatch b(*dev, d, 8, /*seed=*/3, /*shuffle=*/true);
  b.StartEpoch(2, 1, 4);  // shard 1 of 4
  const std::vector<uint32_t> order = EpochShard(40, 1, 4, 3, 2, true);
  Batch x;
  x.epoch = 2;
  x.first = 3;
  x.n = 5;
  b.Load(x);
  ASSERT_EQ(b.n(), 5);
  const auto [ids, labels] = OnDevice(*dev, b, d);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(ids[i], static_cast<int>(order[3 + i])) << i;
    EXPECT_EQ(labels[i], static_cast<float>(order[3 + i] % 10)) << i;
  }
}

TEST(DeviceBatch, AnEarlierEpochsBatchIsReadInThatEpochsOrderOfAll) {
  auto dev = MakeCpuDevice();
  const Dataset d = Numbered(40);
  DeviceBatch b(*dev, d, 8, 5, true);
  b.StartEpoch(3, 0, 1);
  Batch x;
  x.epoch = 2;  // handed back by a dead worker
  x.first = 16;
  x.n = 8;
  b.Load(x);
  const std::vector<uint32_t> earlier = EpochShard(40, 0, 1, 5, 2, true);
  const std::vector<uint32_t> now = EpochShard(40, 0, 1, 5, 3, true);
  ASSERT_NE(earlier, now);
  std::vector<int> want(earlier.begin() + 16, earlier.begin() + 24);
  EXPECT_EQ(OnDevice(*dev, b, d).first, want);
  x.epoch = 3;  // and this epoch's again
  b.Load(x);
  EXPECT_EQ(OnDevice(*dev, b, d).first, std::vector<int>(now.begin() + 16, now.begin() + 24));
}

TEST(DeviceBatch, EachLoadZeroesTheStatsAndTheMeanLossIsPerExample) {
  auto dev = MakeCpuDevice();
  const Dataset d = Numbered(10);
  DeviceBatch b(*dev, d, 4, 1, false);
  b.StartEpoch(1, 0, 1);
  Batch x;
  x.epoch = 1;
  x.n = 4;
  b.Load(x);
  EXPECT_EQ(OnDevice(*dev, b, d).first, (std::vector<int>{0, 1, 2, 3}));  // no shuffle: the file order
  const float stats[2] = {6.0f, 3.0f};
  dev->Upload(b.stats(), stats, 2);
  EXPECT_DOUBLE_EQ(b.MeanLoss(), 1.5);
  x.first = 4;
  x.n = 2;
  b.Load(x);
  EXPECT_EQ(b.MeanLoss(), 0.0);
}

}  // namespace
}  // namespace shardps::worker
