// shardps-coordinator: membership, tables, shard map, barriers.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>

#include "common/log.h"
#include "common/metrics.h"
#include "common/metrics_http.h"
#include "common/net.h"
#include "common/signals.h"
#include "server/coordinator.h"
#include "server/job_config.h"

int main(int argc, char** argv) {
  using namespace shardps;
  CLI::App app{"shardps coordinator: membership, tables, shard map and barriers of one job"};
  JobConfig job;
  CoordinatorOptions& o = job.job;
  std::vector<std::string> sets;
  bool print_config = false, no_metrics = false;
  int metrics_port = -1;
  std::string metrics_address;
  std::string config, consistency, log_level = "info";
  int64_t hb_ms = -1, join_ms = -1;
  uint32_t servers = 0, workers = 0, max_workers = 0, partitions = 0, staleness = 0;
  app.add_option("--config", config, "job file (TOML): [job], [[table]], [launch], [metrics]")->check(CLI::ExistingFile);
  app.add_option("--bind", o.bind, "endpoint to listen on; port 0 picks a free port")->capture_default_str();
  app.add_option("--endpoint-file", o.endpoint_file, "write the bound endpoint to this file");
  app.add_option("--advertise", o.advertise, "host or address peers dial (with a wildcard --bind; default 127.0.0.1)");
  app.add_option("--set", sets, "override a job-file key: SECTION.KEY=VALUE (repeatable)");
  app.add_flag("--print-config", print_config, "print the resolved job (file, --set, flags) as JSON and exit");
  app.add_option("--metrics-port", metrics_port, "serve Prometheus /metrics on this port (0: a free port)")->check(CLI::Range(0, 65535));
  app.add_option("--metrics-address", metrics_address, "address /metrics binds to (default: the advertised one)");
  app.add_flag("--no-metrics", no_metrics, "serve no /metrics");
  auto* s_opt = app.add_option("--servers", servers, "number of servers (overrides the job file)")->check(CLI::Range(1, 4096));
  auto* w_opt = app.add_option("--workers", workers, "number of workers (overrides the job file)")->check(CLI::Range(0, 65536));
  auto* mw_opt = app.add_option("--max-workers", max_workers, "worker ranks that may join, up to this many (elastic; default --workers)")->check(CLI::Range(0, 65536));
  auto* p_opt = app.add_option("--partitions", partitions, "virtual partitions (overrides the job file)")->check(CLI::Range(1, 1 << 20));
  app.add_option("--consistency", consistency, "sync | bounded | async (overrides the job file)");
  auto* st_opt = app.add_option("--staleness", staleness, "bounded staleness s (overrides the job file)");
  app.add_option("--heartbeat-timeout-ms", hb_ms, "declare a silent process dead after this long")->check(CLI::Range(1, 3600000));
  app.add_option("--join-timeout-ms", join_ms, "declare a worker that never joined dead after this long")->check(CLI::Range(1, 86400000));
  app.add_option("--snapshot-dir", o.snapshot_dir, "where snapshots are written (and restored from)");
  app.add_option("--state-dir", o.state_dir, "keep the job's state here (RocksDB); a coordinator started again on it resumes the job");
  app.add_option("--snapshot-every-clocks", o.snapshot_every_clocks, "snapshot every k clocks (0: off)");
  app.add_option("--snapshot-every-sec", o.snapshot_every_sec, "snapshot every t seconds (0: off)");
  app.add_option("--keep-snapshots", o.keep_snapshots, "keep the newest K complete snapshots")->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_flag("--restore", o.restore, "start from the newest good snapshot in --snapshot-dir");
  app.add_option("--restore-clock", o.restore_clock, "with --restore: the snapshot taken at this clock");
  std::string key_file, access_file;
  app.add_option("--key", key_file, "security on: the job's server key (default with [security] keys = DIR: DIR/server.key)")->envname("SHARDPS_KEY");
  app.add_option("--access", access_file, "the access list: public keys and their roles (default: 'access' beside the key)");
  app.add_option("--log-level", log_level, "debug | info | warn | error")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  SetLogName("coordinator");
  LogLevel level;
  if (!ParseLogLevel(log_level, &level)) {
    std::fprintf(stderr, "error: --log-level '%s' is not one of debug, info, warn, error\n", log_level.c_str());
    return 2;
  }
  SetLogLevel(level);
  if (!config.empty() || !sets.empty()) {
    Status s = LoadJobConfig(config, sets, &job);
    if (!s.ok()) {
      std::fprintf(stderr, "error: %s\n", s.message().c_str());
      return 2;
    }
  }
  if (*s_opt) o.num_servers = servers;
  if (*w_opt) o.num_workers = workers;
  if (*mw_opt) o.max_workers = max_workers;
  if (*p_opt) o.partitions = partitions;
  if (*st_opt) o.staleness = staleness;
  if (!consistency.empty()) {
    Status s = Parse(consistency, &o.consistency);
    if (!s.ok()) {
      std::fprintf(stderr, "error: --consistency: %s\n", s.message().c_str());
      return 2;
    }
  }
  if (hb_ms > 0) o.heartbeat_timeout = Millis(hb_ms);
  if (join_ms > 0) o.join_timeout = Millis(join_ms);
  if (!o.snapshot_dir.empty()) {
    // Servers on other hosts (and in other folders) must see the same path.
    std::error_code ec;
    auto abs = std::filesystem::absolute(o.snapshot_dir, ec);
    if (!ec) o.snapshot_dir = abs.lexically_normal().string();
  }
  if (!job.security.keys.empty()) {
    std::error_code ec;
    auto abs = std::filesystem::absolute(job.security.keys, ec);
    if (!ec) job.security.keys = abs.lexically_normal().string();
    if (key_file.empty()) key_file = job.security.keys + "/server.key";
  }
  if (!access_file.empty() && key_file.empty()) {
    std::fprintf(stderr, "error: --access needs --key\n");
    return 2;
  }
  if (!key_file.empty() && !print_config) {
    if (Status s = LoadServerSecurity(key_file, access_file, &o.security); !s.ok()) {
      std::fprintf(stderr, "error: %s\n", s.message().c_str());
      return 2;
    }
  }
  if (metrics_port >= 0) job.metrics.port = metrics_port;
  if (!metrics_address.empty()) job.metrics.address = metrics_address;
  if (no_metrics) job.metrics.enabled = false;
  if (Status s = o.Validate(); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.message().c_str());
    return 2;
  }
  if (print_config) {
    std::printf("%s\n", JobConfigJson(job).c_str());
    return 0;
  }
  const auto& stop = InstallStopSignals();
  metrics::Registry registry;
  metrics::MetricsServer metrics_http(registry);
  if (job.metrics.enabled) {
    const std::string advertised = o.advertise.empty() ? "127.0.0.1" : o.advertise;
    const std::string addr = job.metrics.address.empty() ? advertised : job.metrics.address;
    if (Status s = metrics_http.Start(addr, job.metrics.port); !s.ok()) {
      std::fprintf(stderr, "error: metrics: %s\n", s.message().c_str());
      return 1;
    }
    o.metrics_url = metrics::IsWildcard(addr) ? metrics::Url(advertised, metrics_http.port()) : metrics_http.url();
    o.metrics = &registry;
  }
  zmq::context_t ctx(1);
  Coordinator c(ctx, o);
  if (Status s = c.Bind(); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.message().c_str());
    return 1;
  }
  Status s = c.Run(stop);
  return s.ok() ? 0 : 1;
}
