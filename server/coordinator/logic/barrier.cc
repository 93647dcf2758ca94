#include "server/coordinator/logic/barrier.h"

#include "common/base/log.h"

namespace shardps {

void Barrier::Arrive(uint32_t rank, Waiter w) { arrived_[rank] = std::move(w); }

std::vector<Waiter> Barrier::MaybeRelease(const std::vector<uint32_t>& live) {
  std::vector<Waiter> released;
  // Fewer arrivals than live workers: not yet (a scan of every live rank
  // at each arrival made a barrier quadratic in the workers).
  if (arrived_.empty() || arrived_.size() < live.size()) return released;
  for (uint32_t r : live)
    if (!arrived_.count(r)) return released;
  LOG_DEBUG << "barrier " << generation_ << " released";
  for (auto& [rank, w] : arrived_) released.push_back(std::move(w));
  arrived_.clear();
  ++generation_;
  return released;
}

std::vector<Waiter> Barrier::Cancel() {
  std::vector<Waiter> waiting;
  for (auto& [rank, w] : arrived_) waiting.push_back(std::move(w));
  arrived_.clear();
  return waiting;
}

}  // namespace shardps
