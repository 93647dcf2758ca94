#include "worker/dense_step/step_policy.h"

#include <algorithm>
#include <bit>

namespace shardps::worker {

bool HeldBack(Consistency c, int64_t clock, uint32_t staleness, int64_t last_min_clock) {
  return c == Consistency::kBounded && clock - static_cast<int64_t>(staleness) > last_min_clock;
}

void HoldHistory::Add(bool held) {
  bits_ = ((bits_ << 1) | (held ? 1u : 0u)) & ((1u << kWindow) - 1);
  n_ = std::min(n_ + 1, kWindow);
}

bool HoldHistory::Persistent() const {
  if (min_fraction_ <= 0) return true;
  return n_ == kWindow && std::popcount(bits_) >= min_fraction_ * kWindow;
}

bool FillPolicy::Decide(bool held, bool have_params) {
  if (this_clock_ == 0 && have_params) holds_.Add(held);  // once per clock
  const bool fill = held && this_clock_ < max_fill_ && holds_.Persistent();
  if (fill) {
    ++this_clock_;
    ++filled_;
  }
  return fill;
}

double PredictionFactor(double k, double tau, int64_t between) {
  if (k <= 0 || tau <= 0 || between <= 0) return 0.0;
  return std::min(k, k * tau / static_cast<double>(between));
}

void PushStaleness::Add(uint64_t staleness) {
  max_ = std::max(max_, staleness);
  sum_ += staleness;
  recent_.Add(staleness);
  ++n_;
}

double StragglerSleep(double own, double quickest_pull, double slowdown) {
  if (slowdown <= 1.0) return 0.0;
  return std::max(0.0, own + quickest_pull) * (slowdown - 1.0);
}

double RecentWaits::Quickest() const { return *std::min_element(waits_.begin(), waits_.end()); }

}  // namespace shardps::worker
