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

#include "worker/devices/device.h"
#include "worker/models/dense_stack.h"

namespace shardps::worker {

// The layers are a DenseStack (no ReLU after the last); the head is the
// softmax cross-entropy.
// Thread: one (the trainer's); every member is its.
class Mlp {
 public:
  Mlp(Device* dev, std::vector<int> dims);

  int num_layers() const { return stack_.num_layers(); }
  const std::vector<int>& dims() const { return stack_.dims(); }
  size_t weight_size(int l) const { return stack_.weight_size(l); }
  size_t bias_size(int l) const { return stack_.bias_size(l); }
  DeviceBuffer& weight(int l) { return stack_.weight(l); }
  DeviceBuffer& bias(int l) { return stack_.bias(l); }
  DeviceBuffer& grad_weight(int l) { return stack_.grad_weight(l); }
  DeviceBuffer& grad_bias(int l) { return stack_.grad_bias(l); }

  // x: rows x dims[0] on the device. Returns the logits (rows x dims.back()).
  const float* Forward(const float* x, int rows) { return stack_.Forward(x, rows); }
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
  DenseStack stack_;
  DeviceBuffer dlogits_;  // rows_ x classes: d(mean cross-entropy)/d(logits)
  int rows_ = 0;
};

}  // namespace shardps::worker
