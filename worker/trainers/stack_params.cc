#include "worker/trainers/stack_params.h"

#include <cmath>

namespace shardps::worker {

void StackTableSpecs(const std::string& prefix, const std::vector<int>& dims, OptimizerKind optimizer, float lr,
                     float eps, uint64_t seed, std::vector<TableSpec>* out) {
  out->clear();
  for (size_t l = 0; l + 1 < dims.size(); ++l) {
    const float bound = 1.0f / std::sqrt(static_cast<float>(dims[l]));
    for (int bias = 0; bias < 2; ++bias) {
      TableSpec t;
      t.name = prefix + (bias ? ".b" : ".w") + std::to_string(l);
      t.rows = bias ? 1 : static_cast<uint64_t>(dims[l]);
      t.cols = static_cast<uint32_t>(dims[l + 1]);
      t.init = InitKind::kUniform;
      t.init_a = -bound;
      t.init_b = bound;
      t.seed = seed * 100 + l * 2 + bias;
      t.optimizer = optimizer;
      t.lr = lr;
      t.eps = eps;
      out->push_back(t);
    }
  }
}

StackParams::StackParams(Client& ps, Device& dev, DenseStack& stack) : ps_(ps), dev_(dev), stack_(stack) {}

StackParams::~StackParams() { Drain(); }

void StackParams::Drain() {
  // A round still in flight writes into the buffers: it lands first (its
  // error, if any, is the next round's to find again).
  for (auto& r : pulls_) (void)r.Wait();
  pulls_.clear();
}

Status StackParams::Create(const std::vector<TableSpec>& specs) {
  const int n = stack_.num_layers();
  if (specs.size() != static_cast<size_t>(2 * n))
    return Status::Internal("a stack of " + std::to_string(n) + " layers takes " + std::to_string(2 * n) +
                            " tables, given " + std::to_string(specs.size()));
  w_.assign(n, Table());
  b_.assign(n, Table());
  for (int l = 0; l < n; ++l) {
    SHARDPS_RETURN_IF_ERROR(ps_.CreateTable(specs[2 * l], &w_[l]));
    SHARDPS_RETURN_IF_ERROR(ps_.CreateTable(specs[2 * l + 1], &b_[l]));
    if (w_[l].size() != stack_.weight_size(l) || b_[l].size() != stack_.bias_size(l))
      return Status::Conflict("table '" + w_[l].spec.name + "' is not shaped as layer " + std::to_string(l));
    wv_.emplace_back(&dev_, stack_.weight_size(l));
    bv_.emplace_back(&dev_, stack_.bias_size(l));
    wg_.emplace_back(&dev_, stack_.weight_size(l));
    bg_.emplace_back(&dev_, stack_.bias_size(l));
  }
  return Status::OK();
}

void StackParams::Pull() {
  Drain();
  for (size_t l = 0; l < w_.size(); ++l) {
    pulls_.push_back(ps_.Pull(w_[l], std::span<float>(wv_[l].data(), wv_[l].size())));
    pulls_.push_back(ps_.Pull(b_[l], std::span<float>(bv_[l].data(), bv_[l].size())));
  }
}

Status StackParams::Await() {
  for (auto& r : pulls_) SHARDPS_RETURN_IF_ERROR(r.Wait());
  pulls_.clear();
  for (size_t l = 0; l < w_.size(); ++l) {
    const int li = static_cast<int>(l);
    dev_.Upload(stack_.weight(li).data(), wv_[l].data(), wv_[l].size());
    dev_.Upload(stack_.bias(li).data(), bv_[l].data(), bv_[l].size());
  }
  return Status::OK();
}

void StackParams::PushLayer(int l) {
  dev_.Download(wg_[l].data(), stack_.grad_weight(l).data(), wg_[l].size());
  dev_.Download(bg_[l].data(), stack_.grad_bias(l).data(), bg_[l].size());
  pushes_.push_back(ps_.Push(w_[l], std::span<const float>(wg_[l].data(), wg_[l].size())));
  pushes_.push_back(ps_.Push(b_[l], std::span<const float>(bg_[l].data(), bg_[l].size())));
}

Status StackParams::AwaitPushes() {
  Status first;
  for (auto& r : pushes_) {
    Status s = r.Wait();
    if (first.ok() && !s.ok()) first = s;
  }
  pushes_.clear();
  return first;
}

}  // namespace shardps::worker
