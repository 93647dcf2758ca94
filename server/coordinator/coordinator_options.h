// What a coordinator serves: the job's shape, its tables, its timeouts,
// snapshots, durable state and security (the job file's [job] section and
// shardps-coordinator's flags, server/coordinator/job_config.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/net/net.h"
#include "common/net/security.h"
#include "shardps/status.h"
#include "shardps/types.h"

namespace shardps {

namespace metrics {
class Registry;
}

struct CoordinatorOptions {
  std::string bind = "tcp://127.0.0.1:0";  // port 0: any free port
  struct Published {
    std::string endpoint_file;             // if set, the bound endpoint is written here
    std::string advertise;                 // host put in the endpoint for a wildcard bind
  } published;
  struct Metrics {
    std::string url;                       // where its /metrics is served, for status
    metrics::Registry* registry = nullptr; // publishes the job's gauges there (not owned)
  } metrics;
  uint32_t num_servers = 1;
  uint32_t num_workers = 1;
  uint32_t max_workers = 0;                 // ranks [num_workers, max_workers) may join later (elastic); 0 = none
  uint32_t partitions = 64;                 // virtual partitions
  Consistency consistency = Consistency::kSync;
  uint32_t staleness = 0;                   // bounded only
  // Copies of each replica group of partitions, on different servers
  // (docs/fault-tolerance.md, "Replicas"): 1 none; 2 a dead server's
  // partitions are served by their backups without a rollback.
  uint32_t replicas = 1;
  // Replica groups: the unit a move copies (add-server, rebalance, drain);
  // 0 = one per server. More groups than servers let a server added later
  // take a fair share of them (docs/fault-tolerance.md).
  uint32_t groups = 0;
  uint32_t Groups() const { return groups ? groups : num_servers; }
  std::vector<TableSpec> tables;            // defined at start
  uint64_t server_memory_mb = 0;            // job file: each server's budget (the launcher passes it; 0: theirs)
  Millis heartbeat_timeout{5000};           // silent this long = dead
  Millis join_timeout{120000};              // a worker rank never seen this long = dead
  Millis ack_timeout{30000};                // servers must ack a table definition
  // Snapshots (docs/snapshots.md).
  std::string snapshot_dir;                 // "" = no snapshots
  uint32_t snapshot_every_clocks = 0;       // 0 = not by clock
  uint32_t snapshot_every_sec = 0;          // 0 = not by time
  struct SnapshotLimits {
    uint32_t keep = 3;                      // newest complete ones kept (and the snapshots they read)
    uint32_t full_every = 8;                // a partition's part is full at least every k snapshots (1: always)
    Millis timeout{600000};                 // a snapshot not complete by then fails
  } snapshots;
  bool restore = false;                     // start from a snapshot in snapshot_dir
  int64_t restore_clock = -1;               // -1: the newest good one
  // Durable state (docs/fault-tolerance.md): "" = none; a directory
  // (RocksDB) or etcd://HOST:PORT[,...]/PREFIX (--store). A coordinator
  // started on a store that holds a running job's state resumes it.
  std::string state_dir;
  bool standby = false;                     // --standby: wait to lead (etcd) for as long as it takes
  SecurityOptions security;                 // CURVE + roles (docs/security.md)

  Status Validate() const;
};

// A table a job with `replicas` copies can hold: with more than one, no
// eviction of idle sparse rows (each copy would evict on its own clock and
// the copies would differ; docs/fault-tolerance.md, "Replicas").
Status CheckReplicable(const TableSpec& t, uint32_t replicas);

}  // namespace shardps
