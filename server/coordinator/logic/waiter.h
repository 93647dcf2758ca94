// A request the coordinator answers later (a GetCluster before the cluster
// is ready, a barrier, a table definition the servers have not all
// confirmed, a SnapshotNow, a Stop): who sent it and its id.
#pragma once

#include <cstdint>
#include <string>

namespace shardps {

struct Waiter {
  std::string routing_id;  // the sender's ROUTER identity
  uint64_t request_id = 0;
};

}  // namespace shardps
