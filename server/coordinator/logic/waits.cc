#include "server/coordinator/logic/waits.h"

#include <algorithm>
#include <map>

namespace shardps {

std::vector<Wait> WhoWaitsOnWhom(uint32_t staleness, const std::vector<ServerWaitView>& servers,
                                 const std::vector<bool>& live) {
  std::map<std::pair<int, int>, Wait> pairs;
  for (const auto& s : servers)
    for (const auto& [worker, need] : s.parked)
      for (size_t v = 0; v < s.clocks.size() && v < live.size(); ++v) {
        if (!live[v] || static_cast<int>(v) == worker || s.clocks[v] >= need) continue;
        Wait w{worker, need + staleness, static_cast<int>(v), s.clocks[v]};
        auto [it, fresh] = pairs.emplace(std::make_pair(worker, w.waits_for), w);
        if (!fresh && w.clock > it->second.clock) it->second = w;
      }
  std::vector<Wait> out;
  for (const auto& [k, w] : pairs) out.push_back(w);
  return out;
}

}  // namespace shardps
