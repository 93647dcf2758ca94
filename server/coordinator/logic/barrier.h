// The job's barrier (Barrier requests of workers): released, every waiting
// request answered, once every live worker arrived. Generations follow one
// another; a worker that died is no longer waited for (the coordinator asks
// again after each membership change).
//
// Thread: not thread-safe; the coordinator's Run() thread owns its Barrier.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "server/coordinator/logic/waiter.h"

namespace shardps {

class Barrier {
 public:
  // Worker `rank` arrived with request `w` (a second request of the same
  // rank replaces its first).
  void Arrive(uint32_t rank, Waiter w);
  // When every worker of `live` arrived (and one did): the requests to
  // answer, and the next generation begins; else nothing.
  std::vector<Waiter> MaybeRelease(const std::vector<uint32_t>& live);
  // A rollback: the requests waiting, to be refused; none waits now.
  std::vector<Waiter> Cancel();

  uint64_t generation() const { return generation_; }

 private:
  // Run()'s thread owns these.
  uint64_t generation_ = 0;
  std::map<uint32_t, Waiter> arrived_;  // worker rank -> its request
};

}  // namespace shardps
