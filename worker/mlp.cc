#include "worker/mlp.h"

namespace shardps::worker {

Mlp::Mlp(Device* dev, std::vector<int> dims) : dev_(dev), dims_(std::move(dims)) {
  for (int l = 0; l < num_layers(); ++l) {
    w_.emplace_back(dev_, weight_size(l));
    b_.emplace_back(dev_, bias_size(l));
    gw_.emplace_back(dev_, weight_size(l));
    gb_.emplace_back(dev_, bias_size(l));
  }
  act_.resize(dims_.size());
  delta_.resize(dims_.size());
}

void Mlp::EnsureRows(int rows) {
  if (rows <= rows_) return;
  for (size_t l = 1; l < dims_.size(); ++l) {
    act_[l] = DeviceBuffer(dev_, static_cast<size_t>(rows) * dims_[l]);
    delta_[l] = DeviceBuffer(dev_, static_cast<size_t>(rows) * dims_[l]);
  }
  scratch_ = DeviceBuffer(dev_, static_cast<size_t>(rows) * dims_.back());
  rows_ = rows;
}

const float* Mlp::Forward(const float* x, int rows) {
  EnsureRows(rows);
  const float* in = x;
  for (int l = 0; l < num_layers(); ++l) {
    float* out = act_[l + 1].data();
    dev_->Gemm(false, false, rows, dims_[l + 1], dims_[l], 1.0f, in, w_[l].data(), 0.0f, out);
    dev_->AddBias(out, b_[l].data(), rows, dims_[l + 1]);
    if (l + 1 < num_layers()) dev_->Relu(out, static_cast<size_t>(rows) * dims_[l + 1]);
    in = out;
  }
  return act_.back().data();
}

void Mlp::Backward(const float* x, const float* labels, int rows, float* stats,
                   const std::function<void(int)>& layer_ready) {
  const int L = num_layers();
  dev_->SoftmaxCrossEntropy(act_[L].data(), labels, rows, dims_[L], delta_[L].data(), stats);
  for (int l = L - 1; l >= 0; --l) {
    const float* in = l == 0 ? x : act_[l].data();
    const float* d = delta_[l + 1].data();
    // dW = in^T d (dims[l] x dims[l+1]); db = column sums of d.
    dev_->Gemm(true, false, dims_[l], dims_[l + 1], rows, 1.0f, in, d, 0.0f, gw_[l].data());
    dev_->ColumnSum(d, rows, dims_[l + 1], gb_[l].data());
    if (l > 0) {
      // d(in) = d W^T, through the ReLU that produced `in`.
      dev_->Gemm(false, true, rows, dims_[l], dims_[l + 1], 1.0f, d, w_[l].data(), 0.0f, delta_[l].data());
      dev_->ReluBackward(delta_[l].data(), act_[l].data(), static_cast<size_t>(rows) * dims_[l]);
    }
    if (layer_ready) layer_ready(l);
  }
}

void Mlp::Evaluate(const float* x, const float* labels, int rows, float* stats) {
  Forward(x, rows);
  dev_->SoftmaxCrossEntropy(act_.back().data(), labels, rows, dims_.back(), scratch_.data(), stats);
}

}  // namespace shardps::worker
