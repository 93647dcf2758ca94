#include "server/server_metrics.h"

#include <span>

#include "server/tables/table.h"

namespace shardps {

namespace {
std::span<const double> StalenessBuckets() {
  static const double b[] = {0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128, 256};
  return b;
}
}  // namespace

ServerMetrics::ServerMetrics(metrics::Registry& r)
    : registry(r),
      pushes(r.GetCounter("shardps_push_requests_total", "Push requests applied or buffered")),
      pulls(r.GetCounter("shardps_pull_requests_total", "Pull requests answered")),
      push_bytes(r.GetCounter("shardps_push_bytes_total", "Gradient bytes received in pushes")),
      pull_bytes(r.GetCounter("shardps_pull_bytes_total", "Parameter bytes sent in pull replies")),
      ticks(r.GetCounter("shardps_ticks_total", "Clock ticks received from workers")),
      messages(r.GetCounter("shardps_data_messages_total",
                            "ZeroMQ messages read on the data socket: requests, or envelopes of several")),
      errors(r.GetCounter("shardps_request_errors_total", "Requests answered with an error")),
      push_steps(r.GetCounter("shardps_push_steps_total",
                              "Optimizer steps applied from pushes (a push may carry several batches' gradients)")),
      dc_uncompensated(r.GetCounter("shardps_push_dc_uncompensated_total",
                                    "Steps of delay-compensated tables applied as they came: the values their "
                                    "gradient was computed on were no longer kept")),
      stale_unknown(r.GetCounter("shardps_push_staleness_unknown_total",
                                 "Push steps based on a pull from before this server (re)started: applied as fresh")),
      fills(r.GetCounter("shardps_replica_fills_total",
                         "Copies of replica groups filled on this server (re-replication, drains)")),
      fill_bytes(r.GetCounter("shardps_replica_fill_bytes_total",
                              "Bytes of table partitions sent to fill a copy of a group on another server")),
      push_seconds(r.GetHistogram("shardps_push_duration_seconds",
                                  "Time from receiving a push to its reply (applying it, or buffering it under sync)",
                                  metrics::LatencyBuckets())),
      pull_seconds(r.GetHistogram("shardps_pull_duration_seconds",
                                  "Time from receiving a pull to its reply, waiting for slower workers included",
                                  metrics::LatencyBuckets())),
      wait_seconds(r.GetHistogram("shardps_consistency_wait_seconds",
                                  "Time pulls were held for slower workers (sync, bounded staleness)",
                                  metrics::LatencyBuckets())),
      staleness(r.GetHistogram("shardps_push_staleness",
                               "Per applied step of a worker's push (bounded staleness, async): updates its rows took "
                               "between the pull its gradient was computed on and the push",
                               StalenessBuckets())),
      parked(r.GetGauge("shardps_parked_pulls", "Pulls waiting for slower workers now")),
      buffered(r.GetGauge("shardps_buffered_pushes", "Synchronous pushes waiting for the end of their clock")),
      applied_clock(r.GetGauge("shardps_applied_clock", "Sync: clocks below this one are applied")),
      min_clock(r.GetGauge("shardps_min_clock", "Slowest live worker's clock as this server sees it")) {}

void ServerMetrics::SetGroup(uint32_t group, bool primary, uint64_t forwarded, uint64_t lag) {
  if (group_series.size() <= group) group_series.resize(group + 1);
  GroupSeries& g = group_series[group];
  if (!g.lag) {
    const metrics::Labels l = {{"group", std::to_string(group)}};
    g.forwarded = &registry.GetCounter("shardps_replica_inputs_forwarded_total",
                                       "Inputs of a replica group this server, its primary, sent to its backups", l);
    g.lag = &registry.GetGauge("shardps_replica_lag_inputs",
                               "Inputs of a replica group its backups have not acknowledged yet (this server its primary)",
                               l);
    g.primary = &registry.GetGauge("shardps_replica_primary",
                                   "1: this server serves the replica group (its primary); 0: it holds a backup copy", l);
  }
  g.forwarded->SetTotal(forwarded);
  g.lag->Set(static_cast<double>(lag));
  g.primary->Set(primary ? 1 : 0);
}

void ServerMetrics::SetColdBytes(uint64_t read, uint64_t written) {
  if (!cold_bytes_read) {
    cold_bytes_read = &registry.GetCounter("shardps_cold_bytes_read_total",
                                           "Bytes of rows this server read from its cold tier (RocksDB values)");
    cold_bytes_written = &registry.GetCounter("shardps_cold_bytes_written_total",
                                              "Bytes of rows this server wrote to its cold tier (RocksDB values)");
  }
  cold_bytes_read->SetTotal(read);
  cold_bytes_written->SetTotal(written);
}

void ServerMetrics::SetTables(const std::vector<std::unique_ptr<ServerTable>>& tables) {
  for (size_t i = table_series.size(); i < tables.size(); ++i) {
    if (!tables[i]) break;
    const metrics::Labels labels{{"table", tables[i]->spec().name}};
    TableSeries s;
    s.rows = &registry.GetGauge("shardps_table_rows", "Rows of each table held by this server", labels);
    s.bytes = &registry.GetGauge("shardps_table_bytes",
                                 "Bytes of parameters, optimizer state and sparse indexes held by this server", labels);
    if (tables[i]->spec().kind == TableKind::kSparse) {
      s.created = &registry.GetCounter("shardps_sparse_rows_created_total",
                                       "Sparse rows made by a push (an id's first, or admit_after-th)", labels);
      s.not_admitted = &registry.GetCounter("shardps_sparse_not_admitted_total",
                                            "Gradients of ids not admitted yet (admit_after), dropped", labels);
      s.evicted = &registry.GetCounter("shardps_sparse_rows_evicted_total",
                                       "Sparse rows removed after evict_after_clocks / evict_after_sec idle", labels);
    }
    if (tables[i]->tiered()) {
      s.cold_rows = &registry.GetGauge("shardps_cold_rows", "Rows of a tiered table in this server's cold tier (disk)",
                                       labels);
      s.cold_hits = &registry.GetCounter("shardps_cold_hits_total",
                                         "Ids of pulls and pushes of a tiered table found in memory", labels);
      s.cold_reads = &registry.GetCounter("shardps_cold_reads_total",
                                          "Rows of a tiered table read from the cold tier (then moved up)", labels);
      s.moved_down = &registry.GetCounter("shardps_cold_moved_down_total",
                                          "Rows of a tiered table moved down to the cold tier", labels);
    }
    table_series.push_back(s);
  }
  auto sync = [](metrics::Counter* c, uint64_t v) {
    if (c && v > c->Value()) c->SingleWriterAdd(v - c->Value());
  };
  for (size_t i = 0; i < table_series.size(); ++i) {
    const ServerTable& t = *tables[i];
    table_series[i].rows->Set(static_cast<double>(t.rows_held()));
    table_series[i].bytes->Set(static_cast<double>(t.bytes()));
    sync(table_series[i].created, t.sparse_counts().created);
    sync(table_series[i].not_admitted, t.sparse_counts().not_admitted);
    sync(table_series[i].evicted, t.sparse_counts().evicted);
    if (table_series[i].cold_rows) {
      table_series[i].cold_rows->Set(static_cast<double>(t.tier_counts().cold_rows));
      sync(table_series[i].cold_hits, t.tier_counts().hits);
      sync(table_series[i].cold_reads, t.tier_counts().reads);
      sync(table_series[i].moved_down, t.tier_counts().moved_down);
    }
  }
}

}  // namespace shardps
