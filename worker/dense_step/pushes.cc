#include "worker/dense_step/pushes.h"

namespace shardps::worker {

GradientPushes::GradientPushes(Client& ps, Device& dev, const Mlp& mlp, const std::vector<Table>& wt,
                               const std::vector<Table>& bt)
    : ps_(ps), wt_(wt), bt_(bt) {
  for (int l = 0; l < mlp.num_layers(); ++l) {
    gw_.emplace_back(&dev, mlp.weight_size(l));
    gb_.emplace_back(&dev, mlp.bias_size(l));
  }
}

void GradientPushes::Push(int l) {
  pushes_.push_back(ps_.Push(wt_[l], std::span<const float>(gw_[l].data(), gw_[l].size())));
  pushes_.push_back(ps_.Push(bt_[l], std::span<const float>(gb_[l].data(), gb_[l].size())));
}

void GradientPushes::PushSteps(int l, std::span<const PushStep> w, std::span<const PushStep> b) {
  pushes_.push_back(ps_.PushSteps(wt_[l], w));
  pushes_.push_back(ps_.PushSteps(bt_[l], b));
}

Status GradientPushes::Drain() {
  for (auto& r : pushes_) {
    SHARDPS_RETURN_IF_ERROR(r.Wait());
    staleness_.Add(r.staleness());
  }
  pushes_.clear();
  return Status::OK();
}

Status GradientPushes::Tick(bool trained) {
  SHARDPS_RETURN_IF_ERROR(tick_.Wait());
  tick_ = ps_.ClockAsync(trained);
  return Status::OK();
}

}  // namespace shardps::worker
