// A multi-layer perceptron with ReLU hidden layers and a softmax
// cross-entropy head, on a Device. dims = {784, 10} is softmax regression;
// {784, 256, 128, 10} the MLP of the benchmarks.
//
// Parameters of layer l: weight (dims[l] x dims[l+1], row-major) and bias
// (dims[l+1]). The trainer uploads pulled parameters into weight(l)/bias(l),
// runs Forward and Backward, and pushes grad_weight(l)/grad_bias(l) as
// Backward produces them (last layer first).
#pragma once

#include <functional>
#include <vector>

#include "worker/device.h"

namespace shardps::worker {

class Mlp {
 public:
  Mlp(Device* dev, std::vector<int> dims);

  int num_layers() const { return static_cast<int>(dims_.size()) - 1; }
  const std::vector<int>& dims() const { return dims_; }
  size_t weight_size(int l) const { return static_cast<size_t>(dims_[l]) * dims_[l + 1]; }
  size_t bias_size(int l) const { return static_cast<size_t>(dims_[l + 1]); }
  DeviceBuffer& weight(int l) { return w_[l]; }
  DeviceBuffer& bias(int l) { return b_[l]; }
  DeviceBuffer& grad_weight(int l) { return gw_[l]; }
  DeviceBuffer& grad_bias(int l) { return gb_[l]; }

  // x: rows x dims[0] on the device. Returns the logits (rows x dims.back()).
  const float* Forward(const float* x, int rows);
  // After Forward on the same x: gradients of the mean cross-entropy against
  // `labels` (rows floats on the device). Calls layer_ready(l) as soon as
  // layer l's gradients are complete, from the last layer down. Adds the
  // summed loss and correct count into stats (2 floats on the device).
  void Backward(const float* x, const float* labels, int rows, float* stats,
                const std::function<void(int)>& layer_ready);
  // Loss and correct count only (evaluation): adds into stats.
  void Evaluate(const float* x, const float* labels, int rows, float* stats);

 private:
  void EnsureRows(int rows);
  Device* dev_;
  std::vector<int> dims_;
  std::vector<DeviceBuffer> w_, b_, gw_, gb_;
  std::vector<DeviceBuffer> act_;   // act_[l] = output of layer l-1 (l >= 1)
  std::vector<DeviceBuffer> delta_; // delta_[l]: gradient w.r.t. layer l's pre-activation
  DeviceBuffer scratch_;
  int rows_ = 0;
};

}  // namespace shardps::worker
