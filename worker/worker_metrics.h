// What shardps-worker serves on GET /metrics (docs/operations.md,
// "Metrics"): the trainer's own view, read from its Client at each scrape.
//
//   WorkerMetrics m;
//   if (Status s = m.Start(coordinator, "", 0); !s.ok()) ...  // before Connect
//   options.metrics_url = m.url();                            // registered with the worker
//   ... Client::Connect(options, &ps) ...
//   m.Watch(ps.get());                                        // series follow ps from now on
//   ...
//   m.Stop();                                                 // before ps goes
//
// Series (no labels: the target's own labels say which worker):
//   shardps_trainer_samples_total          counter  Client::samples()
//   shardps_trainer_clock                  gauge    Client::clock()
//   shardps_trainer_row_cache_lookups_total, _hits_total  counter
//   shardps_trainer_row_cache_bytes        gauge    Client::row_cache_stats()
//   shardps_trainer_up_seconds             gauge    since Start
//
// Threads: Start, Watch and Stop on one owning thread; the series are
// copied from the client by the HTTP thread as it renders (Client's
// accessors are thread-safe). The watched client must outlive Stop().
#pragma once

#include <atomic>
#include <chrono>
#include <string>

#include "common/metrics/metrics.h"
#include "common/metrics/metrics_http.h"
#include "shardps/client.h"

namespace shardps::worker {

class WorkerMetrics {
 public:
  WorkerMetrics();
  ~WorkerMetrics();  // Stop()
  WorkerMetrics(const WorkerMetrics&) = delete;
  WorkerMetrics& operator=(const WorkerMetrics&) = delete;

  // Serves /metrics on address:port (port 0: a free one). `address` empty:
  // this host's address on the route to `coordinator` (127.0.0.1 when none
  // is found), the address the other processes of the job can dial. A
  // wildcard address binds every interface and names that routed address in
  // url(). Unavailable naming address:port and why, where it cannot bind.
  Status Start(const std::string& coordinator, const std::string& address, int port);
  // "http://HOST:PORT/metrics" once started; empty before.
  const std::string& url() const { return url_; }
  // From now on the series are read from `ps` (null: no longer).
  void Watch(const Client* ps) { ps_.store(ps, std::memory_order_release); }
  void Stop();

 private:
  void Collect();

  metrics::Registry reg_;
  metrics::MetricsServer http_;
  std::string url_;
  std::atomic<const Client*> ps_{nullptr};
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  metrics::Counter& samples_;
  metrics::Gauge& clock_;
  metrics::Counter& cache_lookups_;
  metrics::Counter& cache_hits_;
  metrics::Gauge& cache_bytes_;
  metrics::Gauge& up_;
};

}  // namespace shardps::worker
