#include "tools/ctl_status.h"

namespace shardps::ctl {

std::vector<Wait> WhoWaitsOnWhom(Consistency c, uint32_t staleness, const std::vector<WorkerClock>& workers) {
  std::vector<Wait> out;
  if (c == Consistency::kAsync) return out;
  const int64_t s = c == Consistency::kSync ? 0 : static_cast<int64_t>(staleness);
  for (const auto& w : workers) {
    if (!w.alive || w.clock < 0) continue;
    for (const auto& v : workers) {
      if (!v.alive || v.clock < 0 || v.rank == w.rank) continue;
      if (v.clock < w.clock - s) out.push_back({w.rank, w.clock, v.rank, v.clock});
    }
  }
  return out;
}

}  // namespace shardps::ctl
