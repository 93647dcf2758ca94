#include "worker/worker_metrics.h"

#include "common/net/net.h"

namespace shardps::worker {

WorkerMetrics::WorkerMetrics()
    : http_(reg_),
      samples_(reg_.GetCounter("shardps_trainer_samples_total",
                               "Training examples this worker finished (every batch its trainer counted).")),
      clock_(reg_.GetGauge("shardps_trainer_clock", "Iterations this worker finished (its clock).")),
      cache_lookups_(reg_.GetCounter("shardps_trainer_row_cache_lookups_total",
                                     "Embedding rows looked up in this worker's row cache (--row-cache-mb).")),
      cache_hits_(reg_.GetCounter("shardps_trainer_row_cache_hits_total",
                                  "Embedding rows served from this worker's row cache.")),
      cache_bytes_(reg_.GetGauge("shardps_trainer_row_cache_bytes", "Bytes of rows held in the row cache now.")),
      up_(reg_.GetGauge("shardps_trainer_up_seconds", "Seconds since this worker process started serving metrics.")) {
  reg_.SetCollector([this] { Collect(); });
}

WorkerMetrics::~WorkerMetrics() { Stop(); }

Status WorkerMetrics::Start(const std::string& coordinator, const std::string& address, int port) {
  std::string routed;
  if (!LocalAddressTowards(coordinator, &routed).ok()) routed = "127.0.0.1";
  const std::string bind = address.empty() ? routed : address;
  SHARDPS_RETURN_IF_ERROR(http_.Start(bind, port));
  url_ = metrics::IsWildcard(bind) ? metrics::Url(routed, http_.port()) : http_.url();
  return Status::OK();
}

void WorkerMetrics::Stop() {
  ps_.store(nullptr, std::memory_order_release);
  http_.Stop();
}

void WorkerMetrics::Collect() {
  up_.Set(std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count());
  const Client* ps = ps_.load(std::memory_order_acquire);
  if (!ps) return;
  samples_.SetTotal(ps->samples());
  clock_.Set(static_cast<double>(ps->clock()));
  const RowCacheStats rc = ps->row_cache_stats();
  cache_lookups_.SetTotal(rc.lookups);
  cache_hits_.SetTotal(rc.hits);
  cache_bytes_.Set(static_cast<double>(rc.bytes));
}

}  // namespace shardps::worker
