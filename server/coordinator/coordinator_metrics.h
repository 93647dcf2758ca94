// The coordinator's Prometheus series (docs/operations.md): live workers
// and servers, the slowest and fastest worker's clock, each worker's clock,
// snapshots taken and failed, and how long they took.
//
// Threads: the series live in the process's metrics::Registry, which its
// HTTP thread reads on every scrape; the values are relaxed atomics (see
// common/metrics/metrics.h), set here by the coordinator's Run() thread only. The
// series are created once, in the constructor (under the registry's mutex).
#pragma once

#include <cstdint>
#include <vector>

namespace shardps {

class Membership;
namespace metrics {
class Registry;
class Gauge;
class Counter;
class Histogram;
}  // namespace metrics

class CoordinatorMetrics {
 public:
  // `registry` null: the process serves no metrics and every call does
  // nothing. `worker_ranks`: one clock series per rank.
  CoordinatorMetrics(metrics::Registry* registry, uint32_t worker_ranks);

  // The live workers and servers and the workers' clocks, as `m` has them.
  void Publish(const Membership& m);
  // Worker `rank`'s totals since it started (its heartbeats: row cache
  // lookups and hits, examples trained), as counters that only go up.
  void WorkerStats(int rank, uint64_t lookups, uint64_t hits, uint64_t samples);
  // A new process registered as worker `rank` (a restart, or a rank joining
  // the running job): its totals start again at 0, and its counters go on
  // from where its predecessor's stopped. A restart the coordinator cannot
  // tell from the registration (the same host and pid: a container
  // restarted within the heartbeat timeout) shows as a total below the
  // last one, and is counted as one too.
  void WorkerStarted(int rank);
  void SnapshotCompleted(double ms);
  void SnapshotFailed();
  void FailedOver();  // a dead server's groups went to their backups
  void Filled();      // a server holds a full copy of a group it was filled with
  void Drained();     // a drained server left the job (its groups held by others)
  void Replaced();    // a new server took a dead one's rank
  void Added();       // a server took a rank opened by add-server
  void Moved();       // a copy of a group moved from one server to another (rebalance)

 private:
  // Not owned: the registry's series. Set on Run()'s thread, read by the
  // HTTP thread (atomics).
  metrics::Gauge* live_workers_ = nullptr;
  metrics::Gauge* live_servers_ = nullptr;
  metrics::Gauge* min_clock_ = nullptr;
  metrics::Gauge* max_clock_ = nullptr;
  std::vector<metrics::Gauge*> worker_clock_;  // by worker rank
  metrics::Registry* registry_ = nullptr;
  // By worker rank, made at its first report: row cache lookups, hits,
  // examples trained, each with the worker's last reported total.
  struct Reported {
    metrics::Counter* counter = nullptr;
    uint64_t last = 0;
    void Update(uint64_t total);  // adds what came since `last` (all of it after WorkerStarted)
  };
  struct WorkerSeries {
    Reported lookups, hits, samples;
  };
  std::vector<WorkerSeries> worker_stats_;
  metrics::Counter* snapshots_ = nullptr;
  metrics::Counter* fills_ = nullptr;
  metrics::Counter* drains_ = nullptr;
  metrics::Counter* added_ = nullptr;
  metrics::Counter* moves_ = nullptr;
  metrics::Counter* snapshot_failures_ = nullptr;
  metrics::Histogram* snapshot_seconds_ = nullptr;
  metrics::Counter* failovers_ = nullptr;
  metrics::Gauge* dead_servers_ = nullptr;
};

}  // namespace shardps
