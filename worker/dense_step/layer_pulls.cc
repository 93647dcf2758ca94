#include "worker/dense_step/layer_pulls.h"

#include <algorithm>
#include <span>

namespace shardps::worker {

LayerPulls::LayerPulls(Client& ps, Device& dev, const Mlp& mlp, const std::vector<Table>& wt,
                       const std::vector<Table>& bt)
    : ps_(ps), wt_(wt), bt_(bt) {
  for (int l = 0; l < mlp.num_layers(); ++l) {
    w_.emplace_back(&dev, mlp.weight_size(l));
    b_.emplace_back(&dev, mlp.bias_size(l));
  }
}

void LayerPulls::Issue(int l, Kind k) {
  std::span<float> w(w_[l].data(), w_[l].size()), b(b_[l].data(), b_[l].size());
  switch (k) {
    case Kind::kPull:
      reqs_[2 * l] = ps_.Pull(wt_[l], w);
      reqs_[2 * l + 1] = ps_.Pull(bt_[l], b);
      break;
    case Kind::kPrefetch:
      reqs_[2 * l] = ps_.Prefetch(wt_[l], w);
      reqs_[2 * l + 1] = ps_.Prefetch(bt_[l], b);
      break;
    case Kind::kCurrent:
      reqs_[2 * l] = ps_.PullCurrent(wt_[l], w);
      reqs_[2 * l + 1] = ps_.PullCurrent(bt_[l], b);
      break;
  }
}

void LayerPulls::IssueAll(Kind k) {
  Start();
  HeldRequests together = ps_.HoldRequests();  // one message per server (docs/protocol.md, "Envelopes")
  for (size_t l = 0; l < wt_.size(); ++l) Issue(static_cast<int>(l), k);
}

Status LayerPulls::Wait(int64_t* min_clock) {
  for (auto& r : reqs_) {
    SHARDPS_RETURN_IF_ERROR(r.Wait());
    if (min_clock) *min_clock = std::min(*min_clock, r.min_clock());
  }
  return Status::OK();
}

Status LayerPulls::Drop() {
  SHARDPS_RETURN_IF_ERROR(Wait(nullptr));
  Clear();
  return Status::OK();
}

bool LayerPulls::Outstanding() const {
  return std::any_of(reqs_.begin(), reqs_.end(), [](const Request& q) { return !q.Done(); });
}

}  // namespace shardps::worker
