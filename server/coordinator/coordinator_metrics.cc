#include "server/coordinator/coordinator_metrics.h"

#include <algorithm>
#include <string>

#include "common/metrics/metrics.h"
#include "server/coordinator/logic/membership.h"

namespace shardps {

CoordinatorMetrics::CoordinatorMetrics(metrics::Registry* m, uint32_t worker_ranks) {
  if (!m) return;
  registry_ = m;
  live_workers_ = &m->GetGauge("shardps_live_workers", "Workers alive (joined, not left, not declared dead)");
  live_servers_ = &m->GetGauge("shardps_live_servers", "Servers registered and answering heartbeats");
  min_clock_ = &m->GetGauge("shardps_min_worker_clock", "Clock of the slowest live worker (iterations finished)");
  max_clock_ = &m->GetGauge("shardps_max_worker_clock", "Clock of the fastest live worker (iterations finished)");
  for (uint32_t r = 0; r < worker_ranks; ++r)
    worker_clock_.push_back(&m->GetGauge("shardps_worker_clock", "Iterations each worker finished, from its heartbeats",
                                         {{"worker", std::to_string(r)}}));
  snapshots_ = &m->GetCounter("shardps_snapshots_total", "Snapshots completed (manifest written)");
  snapshot_failures_ = &m->GetCounter("shardps_snapshot_failures_total", "Snapshots that failed");
  snapshot_seconds_ = &m->GetHistogram("shardps_snapshot_duration_seconds",
                                       "Time from starting a snapshot to its manifest",
                                       std::vector<double>{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300});
  failovers_ = &m->GetCounter("shardps_failovers_total",
                              "Servers declared dead whose groups went to their backups (replicas), no rollback");
  dead_servers_ = &m->GetGauge("shardps_dead_servers", "Servers declared dead (their groups served by backups)");
  fills_ = &m->GetCounter("shardps_replica_fills_total",
                          "Copies of replica groups filled into a server while the job ran (re-replication, drains)");
  drains_ = &m->GetCounter("shardps_drained_servers_total", "Servers drained: their groups moved to others, then exited");
  added_ = &m->GetCounter("shardps_added_servers_total", "Servers that joined the running job in a rank opened by add-server");
  moves_ = &m->GetCounter("shardps_group_moves_total",
                          "Copies of replica groups moved from one server to another while the job ran (rebalance)");
}

void CoordinatorMetrics::Added() {
  if (added_) added_->Inc();
}

void CoordinatorMetrics::Moved() {
  if (moves_) moves_->Inc();
}

void CoordinatorMetrics::Filled() {
  if (fills_) fills_->Inc();
}

void CoordinatorMetrics::Drained() {
  if (drains_) drains_->Inc();
}

void CoordinatorMetrics::Replaced() {
  if (dead_servers_) dead_servers_->Add(-1);
}

void CoordinatorMetrics::FailedOver() {
  if (!failovers_) return;
  failovers_->Inc();
  dead_servers_->Add(1);
}

void CoordinatorMetrics::Publish(const Membership& m) {
  if (!live_workers_) return;
  int64_t lo = -1, hi = -1;
  double live = 0;
  const auto& workers = m.workers();
  for (uint32_t r = 0; r < workers.size(); ++r) {
    const WorkerSlot& w = workers[r];
    if (r < worker_clock_.size() && w.clock >= 0) worker_clock_[r]->Set(static_cast<double>(w.clock));
    if (w.state != WorkerState::kAlive) continue;
    ++live;
    if (w.clock < 0) continue;
    lo = lo < 0 ? w.clock : std::min(lo, w.clock);
    hi = std::max(hi, w.clock);
  }
  live_workers_->Set(live);
  double servers = 0;
  for (const auto& s : m.servers()) servers += s.registered && s.alive;
  live_servers_->Set(servers);
  min_clock_->Set(static_cast<double>(lo));
  max_clock_->Set(static_cast<double>(hi));
}

void CoordinatorMetrics::Reported::Update(uint64_t total) {
  // Totals since the worker's start: WorkerStarted set `last` to 0 for a
  // new process; a total below the last one is a new process the
  // registration did not tell (WorkerStarted), counting from 0 too.
  counter->Add(total >= last ? total - last : total);
  last = total;
}

void CoordinatorMetrics::WorkerStarted(int rank) {
  if (!registry_ || rank < 0 || static_cast<size_t>(rank) >= worker_stats_.size()) return;
  WorkerSeries& w = worker_stats_[rank];
  w.lookups.last = w.hits.last = w.samples.last = 0;
}

void CoordinatorMetrics::WorkerStats(int rank, uint64_t lookups, uint64_t hits, uint64_t samples) {
  if (!registry_ || rank < 0) return;
  if (worker_stats_.size() <= static_cast<size_t>(rank)) worker_stats_.resize(rank + 1);
  WorkerSeries& w = worker_stats_[rank];
  const metrics::Labels labels{{"worker", std::to_string(rank)}};
  if (samples && !w.samples.counter)
    w.samples.counter = &registry_->GetCounter("shardps_worker_samples_total",
                                               "Training examples a worker finished (its heartbeats)", labels);
  if ((lookups || hits) && !w.lookups.counter) {
    w.lookups.counter =
        &registry_->GetCounter("shardps_worker_row_cache_lookups_total",
                               "Embedding rows a worker's pulls looked up in its row cache (its heartbeats)", labels);
    w.hits.counter = &registry_->GetCounter("shardps_worker_row_cache_hits_total",
                                            "... of them served from the cache, without asking the servers", labels);
  }
  if (w.samples.counter) w.samples.Update(samples);
  if (w.lookups.counter) {
    w.lookups.Update(lookups);
    w.hits.Update(hits);
  }
}

void CoordinatorMetrics::SnapshotCompleted(double ms) {
  if (snapshots_) snapshots_->Inc();
  if (snapshot_seconds_) snapshot_seconds_->Observe(ms / 1000);
}

void CoordinatorMetrics::SnapshotFailed() {
  if (snapshot_failures_) snapshot_failures_->Inc();
}

}  // namespace shardps
