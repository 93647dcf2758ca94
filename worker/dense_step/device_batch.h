// The batch on the device: an epoch's example order, the examples of a
// Batch gathered from it onto the device (inputs, labels) and the loss
// and correct count the model adds up for them.
#pragma once

#include <cstdint>
#include <vector>

#include "worker/data/batches.h"
#include "worker/data/data.h"
#include "worker/devices/device.h"

namespace shardps::worker {

// Thread: one (the trainer's); every member is its.
class DeviceBatch {
 public:
  // Up to `capacity` examples of `train` (which must outlive it); the
  // order of an epoch is EpochShard(rows, ..., seed, epoch, shuffle).
  DeviceBatch(Device& dev, const Dataset& train, int capacity, uint64_t seed, bool shuffle);
  DeviceBatch(const DeviceBatch&) = delete;
  DeviceBatch& operator=(const DeviceBatch&) = delete;

  // The order of `epoch`: shard `shard` of `shards` (pooled: 0 of 1, all
  // the examples).
  void StartEpoch(int epoch, int shard, int shards);
  // Uploads b's examples (REQUIRES b.n <= capacity) and zeroes the stats.
  // A batch of an earlier epoch (a dead worker's, handed on by the
  // per-clock pool) is read in that epoch's order of all the examples.
  void Load(const Batch& b);
  // The mean loss the model added into stats() for the loaded batch.
  double MeanLoss() const;

  int n() const { return n_; }
  const float* x() const { return dx_.data(); }
  const float* y() const { return dy_.data(); }
  float* stats() const { return dstats_.data(); }  // loss sum, correct count (device)

 private:
  Device& dev_;
  const Dataset& train_;
  const uint64_t seed_;
  const bool shuffle_;
  std::vector<uint32_t> order_;  // the current epoch's example order (kShard: this worker's shard)
  int order_epoch_ = 0;
  std::vector<uint32_t> other_order_;  // an earlier epoch's (a dead worker's batch)
  int other_epoch_ = 0;
  HostBuffer hx_, hy_;  // staging (page-locked on a GPU, so uploads run asynchronously)
  DeviceBuffer dx_, dy_, dstats_;
  int n_ = 0;  // examples of the batch on the device
};

}  // namespace shardps::worker
