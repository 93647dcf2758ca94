#include "worker/dense_step/extra_batches.h"

#include <algorithm>
#include <span>

namespace shardps::worker {

ExtraBatches::ExtraBatches(Client& ps, Device& dev, Mlp& mlp, const std::vector<Table>& wt,
                           const std::vector<Table>& bt, DeviceBatch& batch, ParamLoader& params,
                           GradientPushes& pushes, const FillOptions& o)
    : mlp_(mlp), batch_(batch), params_(params), pushes_(pushes), dev_(dev), o_(o),
      policy_(o.max_fill, o.fill_when_held) {
  const int max_fill = std::max(0, o.max_fill);
  if (max_fill > 0 && o.fill_fresh) fresh_ = std::make_unique<LayerPulls>(ps, dev, mlp, wt, bt);
  fill_w_.resize(max_fill);
  fill_b_.resize(max_fill);
  fill_based_.resize(max_fill);
  for (int f = 0; f < max_fill; ++f)
    for (int l = 0; l < mlp.num_layers(); ++l) {
      fill_w_[f].emplace_back(&dev, mlp.weight_size(l));
      fill_b_[f].emplace_back(&dev, mlp.bias_size(l));
    }
}

// The newest values the servers hold, at the clock already read (no wait
// for the slowest): the batch's gradient is then about as stale as a
// step's, not 2-4 updates (the parameters at hand miss this worker's last
// step and everything since its last pull). Usually sent ahead, layer by
// layer behind the last pushes (Train and the trainer's step).
Status ExtraBatches::LoadFresh() {
  if (fresh_->empty()) fresh_->IssueAll(LayerPulls::Kind::kCurrent);
  SHARDPS_RETURN_IF_ERROR(fresh_->Wait(nullptr));
  params_.Load(*fresh_, true, pushes_.staleness().tau());
  fresh_->Clear();
  return Status::OK();
}

Status ExtraBatches::Train() {
  SHARDPS_RETURN_IF_ERROR(pushes_.Drain());  // the fill buffers of earlier pushes must be free
  // The buffers of the fills not pushed yet (with-next) are taken; pushed
  // ones (at once, or flushed at an epoch's end) are free again.
  const int f = pending_;
  if (o_.fill_fresh) SHARDPS_RETURN_IF_ERROR(LoadFresh());
  // Another extra batch may follow: its values go behind this one's pushes.
  const bool fresh_ahead = o_.fill_fresh && o_.fill_at_once && policy_.AnotherMayFollow();
  if (fresh_ahead) StartFresh();
  fill_based_[f] = params_.on_device();
  const std::vector<PullStamp>& on = params_.on_device();
  mlp_.Forward(batch_.x(), batch_.n());
  mlp_.Backward(batch_.x(), batch_.y(), batch_.n(), batch_.stats(), [&](int l) {
    dev_.Download(fill_w_[f][l].data(), mlp_.grad_weight(l).data(), fill_w_[f][l].size());
    dev_.Download(fill_b_[f][l].data(), mlp_.grad_bias(l).data(), fill_b_[f][l].size());
    if (o_.fill_at_once) {
      const PushStep sw[] = {{std::span<const float>(fill_w_[f][l].data(), fill_w_[f][l].size()), on[2 * l]}};
      const PushStep sb[] = {{std::span<const float>(fill_b_[f][l].data(), fill_b_[f][l].size()), on[2 * l + 1]}};
      pushes_.PushSteps(l, sw, sb);
    }
    if (fresh_ahead) IssueFresh(l);  // (the download above waited for the device)
  });
  if (!o_.fill_at_once) ++pending_;
  return Status::OK();
}

void ExtraBatches::AppendPending(int l, std::vector<PushStep>* w, std::vector<PushStep>* b) const {
  for (int f = 0; f < pending_; ++f) {
    w->push_back({std::span<const float>(fill_w_[f][l].data(), fill_w_[f][l].size()), fill_based_[f][2 * l]});
    b->push_back({std::span<const float>(fill_b_[f][l].data(), fill_b_[f][l].size()), fill_based_[f][2 * l + 1]});
  }
}

Status ExtraBatches::Flush() {
  if (pending_ == 0) return Status::OK();
  SHARDPS_RETURN_IF_ERROR(pushes_.Drain());
  for (int l = 0; l < mlp_.num_layers(); ++l) {
    std::vector<PushStep> sw, sb;
    AppendPending(l, &sw, &sb);
    pushes_.PushSteps(l, sw, sb);
  }
  pending_ = 0;
  return Status::OK();
}

}  // namespace shardps::worker
