// What the coordinator tells every process about the job: consistency, the
// servers and where they listen, the shard map, the tables, the live workers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "common/cluster/partition.h"
#include "shardps/types.h"

namespace shardps {

// A worker's last clock on a replica group, or (group kAllGroups) the one
// the coordinator decided for every group (ClusterView::retired).
struct WorkerFinal {
  static constexpr uint32_t kAllGroups = 0xffffffffu;
  uint32_t rank = 0;
  uint32_t group = kAllGroups;
  int64_t clock = 0;     // the clock after its last tick
  bool trained = false;  // that tick said it trained a batch
};

struct ClusterView {
  Consistency consistency = Consistency::kAsync;
  uint32_t staleness = 0;  // bounded staleness only
  uint32_t num_servers = 0;
  uint32_t num_workers = 0;            // the job's workers (each epoch's share is computed for these)
  uint32_t max_workers = 0;            // ranks [0, max_workers) may join; >= num_workers (elastic jobs)
  ShardMap map;                        // empty until every server registered
  std::vector<std::string> servers;    // rank -> data endpoint ("" if absent)
  std::vector<TableSpec> tables;       // index = table id
  uint64_t membership_version = 0;
  std::vector<uint32_t> live_workers;  // ascending
  std::string snapshot_root;           // "" = no snapshots
  uint32_t snapshot_every_clocks = 0;  // 0 = not by clock
  uint32_t snapshot_full_every = 1;    // a full part at least every k snapshots (1: always)
  std::string restore_from;            // snapshot directory to load at start
  int64_t snapshot_clock_base = 0;     // snapshots are labelled base + clock
  std::vector<uint32_t> dead_servers;  // declared dead: their groups are served by others (replicas)
  // Sync: workers declared dead whose last clock is being found (still in
  // live_workers: waited for, their requests refused), and those whose last
  // clock was decided (every server takes their ticks up to it).
  std::vector<uint32_t> retiring;
  std::vector<WorkerFinal> retired;

  bool complete() const { return !map.owner.empty(); }
  uint32_t worker_ranks() const { return std::max(num_workers, max_workers); }
  const TableSpec* FindTable(const std::string& name) const {
    for (const auto& t : tables)
      if (t.name == name) return &t;
    return nullptr;
  }
};

}  // namespace shardps
