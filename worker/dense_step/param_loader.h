// The parameters on the device: pulled values uploaded into the model's
// layers, with the stamps of the pulls they came from (what a gradient
// computed on them is based on), extrapolated along their drift when
// predicting (weight prediction, PredictionFactor).
#pragma once

#include <cstdint>
#include <vector>

#include "shardps/client.h"
#include "worker/dense_step/layer_pulls.h"
#include "worker/devices/device.h"
#include "worker/models/mlp.h"

namespace shardps::worker {

// Thread: one (the trainer's); every member is its.
class ParamLoader {
 public:
  // `k`: the prediction's lookahead (--predict).
  ParamLoader(Device& dev, Mlp& mlp, double k);
  ParamLoader(const ParamLoader&) = delete;
  ParamLoader& operator=(const ParamLoader&) = delete;

  // Weight prediction on or off (on: the previous values are kept on the
  // device from the next load on).
  void SetPredicting(bool on);
  bool predicting() const { return predicting_; }

  // The values of the (answered) pulls `from` onto the device, with their
  // stamps: what the next batch is computed on (to_train: extrapolated
  // when predicting, by the recent push staleness `tau`; the evaluation
  // takes them as read).
  void Load(const LayerPulls& from, bool to_train, double tau);
  // Load's upload: w/b (host, per layer) onto the device; predicting, each
  // table extrapolated by its drift since the previous load, `between[t]`
  // updates for table t (w0, b0, w1, ...; -1: not known), and the values
  // kept as the next load's previous ones. REQUIRES: predicting() when
  // `between` is not null.
  void Upload(const std::vector<HostBuffer>& w, const std::vector<HostBuffer>& b, const int64_t* between, double tau);

  // The stamps of the parameters on the device, per table (w0, b0, w1, ...).
  const std::vector<PullStamp>& on_device() const { return on_device_; }
  // Predicting: how many updates ahead the last load put layer 0's weights.
  double last_ahead() const { return last_ahead_; }

 private:
  Device& dev_;
  Mlp& mlp_;
  const double k_;
  std::vector<PullStamp> on_device_;
  bool predicting_ = false;
  std::vector<DeviceBuffer> prev_w_, prev_b_;  // predicting: the values of the previous load, per layer
  std::vector<PullStamp> prev_stamps_;         // ... and their stamps, as on_device_
  double last_ahead_ = 0;
};

}  // namespace shardps::worker
