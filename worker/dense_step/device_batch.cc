#include "worker/dense_step/device_batch.h"

#include <algorithm>

namespace shardps::worker {

DeviceBatch::DeviceBatch(Device& dev, const Dataset& train, int capacity, uint64_t seed, bool shuffle)
    : dev_(dev),
      train_(train),
      seed_(seed),
      shuffle_(shuffle),
      hx_(&dev, static_cast<size_t>(capacity) * train.cols),
      hy_(&dev, capacity),
      dx_(&dev, static_cast<size_t>(capacity) * train.cols),
      dy_(&dev, capacity),
      dstats_(&dev, 2) {}

void DeviceBatch::StartEpoch(int epoch, int shard, int shards) {
  order_ = EpochShard(static_cast<uint32_t>(train_.rows), shard, shards, seed_, epoch, shuffle_);
  order_epoch_ = epoch;
}

void DeviceBatch::Load(const Batch& b) {
  const std::vector<uint32_t>* order = &order_;
  if (b.epoch != order_epoch_) {  // a dead worker's batch of an earlier epoch
    if (b.epoch != other_epoch_) {
      other_order_ = EpochShard(static_cast<uint32_t>(train_.rows), 0, 1, seed_, b.epoch, shuffle_);
      other_epoch_ = b.epoch;
    }
    order = &other_order_;
  }
  const int cols = train_.cols;
  n_ = b.n;
  for (int i = 0; i < n_; ++i) {
    const uint32_t ex = (*order)[b.first + static_cast<uint64_t>(i)];
    std::copy_n(&train_.x[static_cast<size_t>(ex) * cols], cols, &hx_[static_cast<size_t>(i) * cols]);
    hy_[i] = train_.y[ex];
  }
  dev_.Upload(dx_.data(), hx_.data(), static_cast<size_t>(n_) * cols);
  dev_.Upload(dy_.data(), hy_.data(), n_);
  dev_.Zero(dstats_.data(), 2);
}

double DeviceBatch::MeanLoss() const {
  float stats[2];
  dev_.Download(stats, dstats_.data(), 2);
  return stats[0] / n_;
}

}  // namespace shardps::worker
