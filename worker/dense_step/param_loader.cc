#include "worker/dense_step/param_loader.h"

#include <algorithm>

#include "worker/dense_step/step_policy.h"

namespace shardps::worker {

ParamLoader::ParamLoader(Device& dev, Mlp& mlp, double k)
    : dev_(dev), mlp_(mlp), k_(k), on_device_(2 * mlp.num_layers()) {}

void ParamLoader::SetPredicting(bool on) {
  predicting_ = on;
  if (!on || !prev_w_.empty()) return;
  prev_stamps_.assign(2 * mlp_.num_layers(), PullStamp());
  for (int l = 0; l < mlp_.num_layers(); ++l) {
    prev_w_.emplace_back(&dev_, mlp_.weight_size(l));
    prev_b_.emplace_back(&dev_, mlp_.bias_size(l));
  }
}

void ParamLoader::Load(const LayerPulls& from, bool to_train, double tau) {
  const std::vector<Request>& reqs = from.requests();
  for (size_t i = 0; i < reqs.size(); ++i) on_device_[i] = reqs[i].stamp();
  if (!(to_train && predicting_)) return Upload(from.w(), from.b(), nullptr, tau);
  // Each table by its own drift (the first load, with nothing to
  // extrapolate from, only keeps the values: a = 0).
  std::vector<int64_t> between(on_device_.size());
  for (size_t t = 0; t < on_device_.size(); ++t) between[t] = on_device_[t].UpdatesSince(prev_stamps_[t]);
  Upload(from.w(), from.b(), between.data(), tau);
  prev_stamps_ = on_device_;
}

void ParamLoader::Upload(const std::vector<HostBuffer>& w, const std::vector<HostBuffer>& b, const int64_t* between,
                         double tau) {
  for (int l = 0; l < mlp_.num_layers(); ++l) {
    dev_.Upload(mlp_.weight(l).data(), w[l].data(), w[l].size());
    dev_.Upload(mlp_.bias(l).data(), b[l].data(), b[l].size());
    if (!between) continue;
    float a[2];
    for (int k = 0; k < 2; ++k) {
      a[k] = static_cast<float>(PredictionFactor(k_, tau, between[2 * l + k]));
      if (l == 0 && k == 0) last_ahead_ = a[k] * static_cast<double>(std::max<int64_t>(0, between[2 * l + k]));
    }
    dev_.Extrapolate(mlp_.weight(l).data(), prev_w_[l].data(), w[l].size(), a[0]);
    dev_.Extrapolate(mlp_.bias(l).data(), prev_b_[l].data(), b[l].size(), a[1]);
  }
}

}  // namespace shardps::worker
