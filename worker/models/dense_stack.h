// A chain of fully connected layers on a Device, with no loss of its own:
// the layers of worker/models/mlp.h's Mlp, and the bottom and top MLPs of a DLRM
// (worker/models/dlrm.h). Layer l maps dims[l] to dims[l+1]: out = in W + b, then
// a ReLU after every hidden layer, and after the last too when `relu_last`
// (the DLRM's bottom MLP ends in one).
//
// Parameters of layer l: weight (dims[l] x dims[l+1], row-major) and bias
// (dims[l+1]). The trainer uploads pulled parameters into weight(l)/bias(l),
// runs Forward and Backward, and pushes grad_weight(l)/grad_bias(l) as
// Backward produces them (last layer first).
#pragma once

#include <functional>
#include <vector>

#include "worker/devices/device.h"

namespace shardps::worker {

// Thread: one (the trainer's); every member is its.
class DenseStack {
 public:
  // REQUIRES: dims has at least 2 entries, each positive.
  DenseStack(Device* dev, std::vector<int> dims, bool relu_last);
  DenseStack(const DenseStack&) = delete;
  DenseStack& operator=(const DenseStack&) = delete;

  int num_layers() const { return static_cast<int>(dims_.size()) - 1; }
  const std::vector<int>& dims() const { return dims_; }
  int in_dim() const { return dims_.front(); }
  int out_dim() const { return dims_.back(); }
  bool relu_last() const { return relu_last_; }
  size_t weight_size(int l) const { return static_cast<size_t>(dims_[l]) * dims_[l + 1]; }
  size_t bias_size(int l) const { return static_cast<size_t>(dims_[l + 1]); }
  DeviceBuffer& weight(int l) { return w_[l]; }
  DeviceBuffer& bias(int l) { return b_[l]; }
  DeviceBuffer& grad_weight(int l) { return gw_[l]; }
  DeviceBuffer& grad_bias(int l) { return gb_[l]; }

  // x: rows x in_dim() on the device; it must stay unchanged until Backward.
  // Returns the output, rows x out_dim() on the device (valid until the next
  // Forward).
  const float* Forward(const float* x, int rows);
  // The last Forward's output.
  const float* output() const { return act_.back().data(); }
  // After Forward(x, rows): from dout (rows x out_dim() on the device, the
  // gradient of the loss w.r.t. the output; not modified), writes every
  // layer's grad_weight/grad_bias and calls layer_ready(l) (may be empty)
  // as soon as layer l's are complete, from the last layer down. With dx
  // non-null, also writes the gradient w.r.t. x (rows x in_dim(), device)
  // into it, before layer_ready(0).
  void Backward(const float* x, const float* dout, int rows, float* dx, const std::function<void(int)>& layer_ready);

 private:
  void EnsureRows(int rows);
  Device* dev_;
  const std::vector<int> dims_;
  const bool relu_last_;
  std::vector<DeviceBuffer> w_, b_, gw_, gb_;
  std::vector<DeviceBuffer> act_;    // act_[l] = output of layer l-1 (l >= 1)
  std::vector<DeviceBuffer> delta_;  // delta_[l]: gradient w.r.t. layer l-1's pre-activation (l >= 1)
  int rows_ = 0;                     // the batch the buffers hold
};

}  // namespace shardps::worker
