#include "worker/models/dense_stack.h"

namespace shardps::worker {

DenseStack::DenseStack(Device* dev, std::vector<int> dims, bool relu_last)
    : dev_(dev), dims_(std::move(dims)), relu_last_(relu_last) {
  for (int l = 0; l < num_layers(); ++l) {
    w_.emplace_back(dev_, weight_size(l));
    b_.emplace_back(dev_, bias_size(l));
    gw_.emplace_back(dev_, weight_size(l));
    gb_.emplace_back(dev_, bias_size(l));
  }
  act_.resize(dims_.size());
  delta_.resize(dims_.size());
}

void DenseStack::EnsureRows(int rows) {
  if (rows <= rows_) return;
  for (size_t l = 1; l < dims_.size(); ++l) {
    act_[l] = DeviceBuffer(dev_, static_cast<size_t>(rows) * dims_[l]);
    delta_[l] = DeviceBuffer(dev_, static_cast<size_t>(rows) * dims_[l]);
  }
  rows_ = rows;
}

const float* DenseStack::Forward(const float* x, int rows) {
  EnsureRows(rows);
  const float* in = x;
  for (int l = 0; l < num_layers(); ++l) {
    float* out = act_[l + 1].data();
    dev_->Gemm(false, false, rows, dims_[l + 1], dims_[l], 1.0f, in, w_[l].data(), 0.0f, out);
    dev_->AddBias(out, b_[l].data(), rows, dims_[l + 1]);
    if (l + 1 < num_layers() || relu_last_) dev_->Relu(out, static_cast<size_t>(rows) * dims_[l + 1]);
    in = out;
  }
  return act_.back().data();
}

void DenseStack::Backward(const float* x, const float* dout, int rows, float* dx,
                          const std::function<void(int)>& layer_ready) {
  const int L = num_layers();
  const float* d = dout;  // the gradient w.r.t. layer l's pre-activation
  if (relu_last_) {
    dev_->CopyColumns(dout, out_dim(), rows, out_dim(), delta_[L].data(), out_dim(), false);
    dev_->ReluBackward(delta_[L].data(), act_[L].data(), static_cast<size_t>(rows) * out_dim());
    d = delta_[L].data();
  }
  for (int l = L - 1; l >= 0; --l) {
    const float* in = l == 0 ? x : act_[l].data();
    // dW = in^T d (dims[l] x dims[l+1]); db = column sums of d.
    dev_->Gemm(true, false, dims_[l], dims_[l + 1], rows, 1.0f, in, d, 0.0f, gw_[l].data());
    dev_->ColumnSum(d, rows, dims_[l + 1], gb_[l].data());
    // d(in) = d W^T; through the ReLU that produced `in` (x has none).
    float* din = l > 0 ? delta_[l].data() : dx;
    if (din) dev_->Gemm(false, true, rows, dims_[l], dims_[l + 1], 1.0f, d, w_[l].data(), 0.0f, din);
    if (l > 0) dev_->ReluBackward(din, act_[l].data(), static_cast<size_t>(rows) * dims_[l]);
    if (layer_ready) layer_ready(l);
    d = din;
  }
}

}  // namespace shardps::worker
