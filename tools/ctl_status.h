// What `shardps-ctl status` derives from the coordinator's JobStatus: who
// waits on whom under the job's consistency model.
#pragma once

#include <cstdint>
#include <vector>

#include "shardps/types.h"

namespace shardps::ctl {

struct WorkerClock {
  int rank = 0;
  int64_t clock = -1;  // iterations finished; -1 = not known yet
  bool alive = false;
};

struct Wait {
  int worker = 0;
  int64_t clock = 0;
  int waits_for = 0;
  int64_t their_clock = 0;
};

// A worker that finished c iterations reads parameters that need every live
// worker to have finished c - s (s = 0 under sync; nobody waits under
// async): it waits for each live worker whose clock is below that. Ordered
// by waiting worker, then by the one waited for.
std::vector<Wait> WhoWaitsOnWhom(Consistency c, uint32_t staleness, const std::vector<WorkerClock>& workers);

}  // namespace shardps::ctl
