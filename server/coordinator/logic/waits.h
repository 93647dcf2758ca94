// Who waits on whom in a running job, from what the servers hold: a pull a
// server parks names its worker and the clock every live worker must reach;
// the workers below that clock (in that server's view) are the ones waited
// for. Reported by `shardps-ctl status`.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace shardps {

struct ServerWaitView {
  std::vector<int64_t> clocks;                    // per worker rank, as the server saw its ticks
  std::vector<std::pair<int, int64_t>> parked;    // (worker, the clock its held pull needs)
};

struct Wait {
  int worker = 0;
  int64_t clock = 0;        // the waiting worker's clock (its pull's)
  int waits_for = 0;
  int64_t their_clock = 0;  // the clock of the worker waited for
};

// `staleness`: the bound (0 under sync): a pull at clock c needs c - s.
// Only live workers are waited for. One entry per (waiting, waited-for)
// pair, the largest clock over the servers; ordered by those two ranks.
std::vector<Wait> WhoWaitsOnWhom(uint32_t staleness, const std::vector<ServerWaitView>& servers,
                                 const std::vector<bool>& live);

}  // namespace shardps
