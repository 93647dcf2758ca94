// ServerMetrics: everything a server counts, as series of its registry
// (docs/operations.md, "Metrics"): request and byte totals, latencies,
// staleness, the pulls and pushes held, and per table the rows and bytes
// held (and, for sparse tables, the rows made, admissions refused and rows
// evicted).
//
// Thread: the event loop writes every series (SingleWriter* updates and
// Set) and calls SetTables; any thread may render the registry.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "common/metrics/metrics.h"

namespace shardps {

class ServerTable;

struct ServerMetrics {
  explicit ServerMetrics(metrics::Registry& r);
  // The per-table series from the tables held (by table id): a table's
  // two series are created the first time (that takes the registry's lock,
  // which a scrape holds), afterwards only set.
  void SetTables(const std::vector<std::unique_ptr<ServerTable>>& tables);

  metrics::Registry& registry;
  metrics::Counter &pushes, &pulls, &push_bytes, &pull_bytes, &ticks, &messages, &errors, &push_steps, &dc_uncompensated,
      &stale_unknown, &fills, &fill_bytes;
  metrics::Histogram &push_seconds, &pull_seconds, &wait_seconds, &staleness;
  metrics::Gauge &parked, &buffered, &applied_clock, &min_clock;
  struct TableSeries {
    metrics::Gauge* rows = nullptr;
    metrics::Gauge* bytes = nullptr;
    // Sparse tables only (null otherwise).
    metrics::Counter* created = nullptr;
    metrics::Counter* not_admitted = nullptr;
    metrics::Counter* evicted = nullptr;
    // Tiered tables only (cold_tier): rows on disk, ids found in memory
    // or read from disk, rows moved down.
    metrics::Gauge* cold_rows = nullptr;
    metrics::Counter* cold_hits = nullptr;
    metrics::Counter* cold_reads = nullptr;
    metrics::Counter* moved_down = nullptr;
  };
  std::vector<TableSeries> table_series;  // by table id
  // Replica groups (docs/fault-tolerance.md, "Replicas"), made as a group
  // is first held: per group, the inputs forwarded to its backups (as its
  // primary), those its backups have yet to take, and whether this server
  // is its primary (1) or a backup (0).
  struct GroupSeries {
    metrics::Counter* forwarded = nullptr;
    metrics::Gauge* lag = nullptr;
    metrics::Gauge* primary = nullptr;
  };
  void SetGroup(uint32_t group, bool primary, uint64_t forwarded, uint64_t lag);
  // The cold tier's bytes of rows read and written so far (a server with one).
  void SetColdBytes(uint64_t read, uint64_t written);
  metrics::Counter* cold_bytes_read = nullptr;
  metrics::Counter* cold_bytes_written = nullptr;
  std::vector<GroupSeries> group_series;  // by group
};

}  // namespace shardps
