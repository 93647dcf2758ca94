#include "worker/models/mlp.h"

namespace shardps::worker {

Mlp::Mlp(Device* dev, std::vector<int> dims) : dev_(dev), stack_(dev, std::move(dims), /*relu_last=*/false) {}

void Mlp::EnsureRows(int rows) {
  if (rows <= rows_) return;
  dlogits_ = DeviceBuffer(dev_, static_cast<size_t>(rows) * stack_.out_dim());
  rows_ = rows;
}

void Mlp::Backward(const float* x, const float* labels, int rows, float* stats,
                   const std::function<void(int)>& layer_ready) {
  EnsureRows(rows);
  dev_->SoftmaxCrossEntropy(stack_.output(), labels, rows, stack_.out_dim(), dlogits_.data(), stats);
  stack_.Backward(x, dlogits_.data(), rows, nullptr, layer_ready);
}

void Mlp::Evaluate(const float* x, const float* labels, int rows, float* stats) {
  EnsureRows(rows);
  const float* logits = Forward(x, rows);
  dev_->SoftmaxCrossEntropy(logits, labels, rows, stack_.out_dim(), dlogits_.data(), stats);
}

}  // namespace shardps::worker
