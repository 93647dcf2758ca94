#include "server/coordinator/coordinator_options.h"

#include <set>

namespace shardps {

Status CoordinatorOptions::Validate() const {
  if (num_servers == 0 || num_servers > 4096)
    return Status::InvalidArgument("servers must be in [1, 4096], got " + std::to_string(num_servers));
  if (num_workers > 65536)
    return Status::InvalidArgument("workers must be in [0, 65536], got " + std::to_string(num_workers));
  if (max_workers != 0 && (max_workers < num_workers || max_workers > 65536))
    return Status::InvalidArgument("max_workers must be 0 (= workers) or in [workers, 65536], got " +
                                   std::to_string(max_workers) + " with " + std::to_string(num_workers) + " workers");
  if (partitions < num_servers || partitions > (1u << 20))
    return Status::InvalidArgument("partitions must be in [servers, 2^20], got " +
                                   std::to_string(partitions));
  if (replicas == 0 || replicas > num_servers)
    return Status::InvalidArgument("replicas must be in [1, servers], got " + std::to_string(replicas) + " with " +
                                   std::to_string(num_servers) + " servers");
  if (groups != 0 && (groups < num_servers || groups > partitions))
    return Status::InvalidArgument("groups must be 0 (= servers) or in [servers, partitions], got " +
                                   std::to_string(groups) + " with " + std::to_string(num_servers) + " servers and " +
                                   std::to_string(partitions) + " partitions");
  if (consistency == Consistency::kSync && staleness != 0)
    return Status::InvalidArgument("staleness applies to 'bounded' consistency only (sync is 0)");
  if (heartbeat_timeout.count() <= 0) return Status::InvalidArgument("heartbeat timeout must be > 0");
  if (snapshot_dir.empty() && (snapshot_every_clocks || snapshot_every_sec || restore))
    return Status::InvalidArgument("snapshot and restore options need --snapshot-dir");
  if (snapshots.keep == 0) return Status::InvalidArgument("keep_snapshots must be at least 1");
  if (standby && state_dir.rfind("etcd://", 0) != 0)
    return Status::InvalidArgument("--standby needs the job's state in etcd (--store etcd://HOST:PORT/PREFIX)");
  if (snapshots.full_every == 0)
    return Status::InvalidArgument("snapshot_full_every must be at least 1 (1: every snapshot writes every row)");
  std::set<std::string> names;
  for (const auto& t : tables) {
    Status s = t.Validate();
    if (s.ok()) s = CheckReplicable(t, replicas);
    if (!s.ok()) return s;
    if (!names.insert(t.name).second)
      return Status::InvalidArgument("table '" + t.name + "' is defined twice");
  }
  return Status::OK();
}

Status CheckReplicable(const TableSpec& t, uint32_t replicas) {
  if (replicas > 1 && (t.evict_after_clocks || t.evict_after_sec))
    return Status::InvalidArgument("table '" + t.name + "': evicting idle rows (evict_after_clocks/_sec) is not "
                                   "supported with replicas = " + std::to_string(replicas) +
                                   " yet: each copy would evict on its own clock and the copies would differ");
  return Status::OK();
}

}  // namespace shardps
