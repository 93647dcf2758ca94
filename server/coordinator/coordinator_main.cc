// shardps-coordinator: one job's coordinator (server/coordinator/coordinator.h):
// membership, tables, shard map, barriers, work pools, snapshots, status,
// stop and rollback, durable state.
//
// main declares the flags; ResolveJob turns them and the job file into the
// job's options, ServeJob serves it.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "common/base/log.h"
#include "common/base/signals.h"
#include "common/metrics/metrics.h"
#include "common/metrics/metrics_http.h"
#include "common/net/net.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/job_config.h"

namespace shardps {
namespace {

// The flags that are not options of the job itself, or override the job
// file only when given.
struct Flags {
  std::vector<std::string> sets;
  bool print_config = false, no_metrics = false;
  int metrics_port = -1;
  std::string metrics_address;
  std::string config, consistency, log_level = "info";
  int64_t hb_ms = -1, join_ms = -1;
  uint32_t servers = 0, workers = 0, max_workers = 0, partitions = 0, staleness = 0, replicas = 0, groups = 0;
  struct Given {  // the options given on the command line (over the job file's)
    CLI::Option *servers = nullptr, *workers = nullptr, *max_workers = nullptr, *partitions = nullptr,
                *staleness = nullptr, *replicas = nullptr, *groups = nullptr;
  } given;
  std::string key_file, access_file;
  std::string store;  // --store etcd://...
};

int Fail(const char* what, const std::string& message, int code = 2) {
  std::fprintf(stderr, "error: %s%s\n", what, message.c_str());
  return code;
}

std::string Absolute(const std::string& path) {
  std::error_code ec;
  auto abs = std::filesystem::absolute(path, ec);
  return ec ? path : abs.lexically_normal().string();
}

// The job file (and --set) under the flags given. 0, or the exit code
// after saying what is wrong.
int ResolveJob(Flags& fl, JobConfig* job) {
  CoordinatorOptions& o = job->job;
  if (!fl.config.empty() || !fl.sets.empty())
    if (Status s = LoadJobConfig(fl.config, fl.sets, job); !s.ok()) return Fail("", s.message());
  if (*fl.given.servers) o.num_servers = fl.servers;
  if (*fl.given.workers) o.num_workers = fl.workers;
  if (*fl.given.max_workers) o.max_workers = fl.max_workers;
  if (*fl.given.partitions) o.partitions = fl.partitions;
  if (*fl.given.staleness) o.staleness = fl.staleness;
  if (*fl.given.replicas) o.replicas = fl.replicas;
  if (*fl.given.groups) o.groups = fl.groups;
  if (!fl.consistency.empty())
    if (Status s = Parse(fl.consistency, &o.consistency); !s.ok()) return Fail("--consistency: ", s.message());
  if (fl.hb_ms > 0) o.heartbeat_timeout = Millis(fl.hb_ms);
  if (!fl.store.empty()) {
    if (fl.store.rfind("etcd://", 0) != 0)
      return Fail("--store: ", "'" + fl.store + "' is not etcd://HOST:PORT[,HOST:PORT...]/PREFIX (a directory: --state-dir)");
    if (!o.state_dir.empty() && o.state_dir != fl.store)
      return Fail("", "--store " + fl.store + " and a state directory (" + o.state_dir + "): the state goes to one of them");
    o.state_dir = fl.store;
  }
  if (fl.join_ms > 0) o.join_timeout = Millis(fl.join_ms);
  // Servers on other hosts (and in other folders) must see the same path.
  if (!o.snapshot_dir.empty()) o.snapshot_dir = Absolute(o.snapshot_dir);
  if (!job->security.keys.empty()) {
    job->security.keys = Absolute(job->security.keys);
    if (fl.key_file.empty()) fl.key_file = job->security.keys + "/server.key";
  }
  if (!fl.access_file.empty() && fl.key_file.empty()) return Fail("", "--access needs --key");
  if (job->security.enabled == true && fl.key_file.empty() && !fl.print_config)
    return Fail("", "[security] enabled = true, and no keys: give [security] keys = DIR (made by shardps-keygen DIR) "
                    "or --key (shardps-launch makes a job's keys itself)");
  if (!fl.key_file.empty() && !fl.print_config)
    if (Status s = LoadServerSecurity(fl.key_file, fl.access_file, &o.security); !s.ok()) return Fail("", s.message());
  if (fl.metrics_port >= 0) job->metrics.port = fl.metrics_port;
  if (!fl.metrics_address.empty()) job->metrics.address = fl.metrics_address;
  if (fl.no_metrics) job->metrics.enabled = false;
  if (Status s = o.Validate(); !s.ok()) return Fail("", s.message());
  return 0;
}

// Serves /metrics (if enabled) and the job until it ends or a stop signal.
int ServeJob(JobConfig& job) {
  CoordinatorOptions& o = job.job;
  const auto& stop = InstallStopSignals();
  metrics::Registry registry;
  metrics::MetricsServer metrics_http(registry);
  if (job.metrics.enabled) {
    const std::string advertised = o.published.advertise.empty() ? "127.0.0.1" : o.published.advertise;
    const std::string addr = job.metrics.address.empty() ? advertised : job.metrics.address;
    if (Status s = metrics_http.Start(addr, job.metrics.port); !s.ok()) return Fail("metrics: ", s.message(), 1);
    o.metrics.url = metrics::IsWildcard(addr) ? metrics::Url(advertised, metrics_http.port()) : metrics_http.url();
    o.metrics.registry = &registry;
  }
  if (!o.snapshot_dir.empty()) {
    // Made now, so that a directory that cannot be written is said before
    // the job trains, not at its first cut.
    std::error_code ec;
    std::filesystem::create_directories(o.snapshot_dir, ec);
    if (ec) return Fail("--snapshot-dir: ", "cannot create " + o.snapshot_dir + ": " + ec.message());
    if (::access(o.snapshot_dir.c_str(), W_OK | X_OK) != 0)
      return Fail("--snapshot-dir: ", o.snapshot_dir + " is not writable: " + std::strerror(errno));
  }
  zmq::context_t ctx(1);
  Coordinator c(ctx, o);
  if (Status s = c.Bind(&stop); !s.ok()) {
    // A standby asked to stop while it waited, or that found the job
    // ended: its end, not a failure.
    if (!c.ended_before() && !(o.standby && stop.load())) return Fail("", s.message(), 1);
    LOG_INFO << s.message() << ": this standby exits";
    return 0;
  }
  Status s = c.Run(stop);
  return s.ok() ? 0 : 1;
}

// --log-level, before anything else logs.
int SetUpLog(const std::string& log_level) {
  SetLogName("coordinator");
  LogLevel level;
  if (!ParseLogLevel(log_level, &level)) {
    std::fprintf(stderr, "error: --log-level '%s' is not one of debug, info, warn, error\n", log_level.c_str());
    return 2;
  }
  SetLogLevel(level);
  return 0;
}

int Main(Flags& fl, JobConfig& job) {
  if (int rc = SetUpLog(fl.log_level); rc != 0) return rc;
  if (int rc = ResolveJob(fl, &job); rc != 0) return rc;
  if (fl.print_config) {
    std::printf("%s\n", JobConfigJson(job).c_str());
    return 0;
  }
  return ServeJob(job);
}

}  // namespace
}  // namespace shardps

int main(int argc, char** argv) {
  using namespace shardps;
  CLI::App app{"shardps coordinator: membership, tables, shard map, barriers, work pools and snapshots of one job"};
  JobConfig job;
  CoordinatorOptions& o = job.job;
  Flags fl;
  app.add_option("--config", fl.config, "job file (TOML): [job], [[table]], [launch], [metrics]")->check(CLI::ExistingFile);
  app.add_option("--bind", o.bind, "endpoint to listen on; port 0 picks a free port")->capture_default_str();
  app.add_option("--endpoint-file", o.published.endpoint_file, "write the bound endpoint to this file");
  app.add_option("--advertise", o.published.advertise, "host or address peers dial (with a wildcard --bind; default 127.0.0.1)");
  app.add_option("--set", fl.sets, "override a job-file key: SECTION.KEY=VALUE (repeatable)");
  app.add_flag("--print-config", fl.print_config, "print the resolved job (file, --set, flags) as JSON and exit");
  app.add_option("--metrics-port", fl.metrics_port, "serve Prometheus /metrics on this port (0: a free port)")->check(CLI::Range(0, 65535));
  app.add_option("--metrics-address", fl.metrics_address, "address /metrics binds to (default: the advertised one)");
  app.add_flag("--no-metrics", fl.no_metrics, "serve no /metrics");
  fl.given.servers = app.add_option("--servers", fl.servers, "number of servers (overrides the job file)")->check(CLI::Range(1, 4096));
  fl.given.workers = app.add_option("--workers", fl.workers, "number of workers (overrides the job file)")->check(CLI::Range(0, 65536));
  fl.given.max_workers = app.add_option("--max-workers", fl.max_workers, "worker ranks that may join, up to this many (elastic; default --workers)")->check(CLI::Range(0, 65536));
  fl.given.partitions = app.add_option("--partitions", fl.partitions, "virtual partitions (overrides the job file)")->check(CLI::Range(1, 1 << 20));
  fl.given.replicas = app.add_option("--replicas", fl.replicas, "copies of each group of partitions, on different servers: 2 or more and a dead server's partitions are served by their backups, without a rollback (overrides the job file)")->check(CLI::Range(1, 4096));
  fl.given.groups = app.add_option("--groups", fl.groups, "replica groups, the unit moves copy: more than --servers let servers added later (shardps-ctl add-server) take a share (default: one per server; overrides the job file)")->check(CLI::Range(0, 1 << 20));
  app.add_option("--consistency", fl.consistency, "sync | bounded | async (overrides the job file)");
  fl.given.staleness = app.add_option("--staleness", fl.staleness, "bounded staleness s (overrides the job file)");
  app.add_option("--heartbeat-timeout-ms", fl.hb_ms, "declare a silent process dead after this long")->check(CLI::Range(1, 3600000));
  app.add_option("--join-timeout-ms", fl.join_ms, "declare a worker that never joined dead after this long")->check(CLI::Range(1, 86400000));
  app.add_option("--snapshot-dir", o.snapshot_dir, "where snapshots are written (and restored from)");
  app.add_option("--state-dir", o.state_dir, "keep the job's state here (RocksDB); a coordinator started again on it resumes the job");
  app.add_flag("--standby", o.standby,
               "with --store: a standby coordinator: wait for as long as it takes to lead the job, then serve it "
               "(clients list every coordinator: --coordinator A,B)");
  app.add_option("--store", fl.store,
                 "keep the job's state in etcd: etcd://HOST:PORT[,HOST:PORT...]/PREFIX (this coordinator leads the "
                 "job; one started again on the same store resumes it, on any machine)");
  app.add_option("--snapshot-every-clocks", o.snapshot_every_clocks, "snapshot every k clocks (0: off)");
  app.add_option("--snapshot-every-sec", o.snapshot_every_sec, "snapshot every t seconds (0: off)");
  app.add_option("--snapshot-full-every", o.snapshots.full_every,
                 "write every row at least every k snapshots, only what changed in between (1: always every row)")
      ->check(CLI::Range(1, 1000000))->capture_default_str();
  app.add_option("--keep-snapshots", o.snapshots.keep, "keep the newest K complete snapshots")->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_flag("--restore", o.restore, "start from the newest good snapshot in --snapshot-dir");
  app.add_option("--restore-clock", o.restore_clock, "with --restore: the snapshot taken at this clock");
  app.add_option("--key", fl.key_file, "security on: the job's server key (default with [security] keys = DIR: DIR/server.key)")->envname("SHARDPS_KEY");
  app.add_option("--access", fl.access_file, "the access list: public keys and their roles (default: 'access' beside the key)");
  app.add_option("--log-level", fl.log_level, "debug | info | warn | error")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return Main(fl, job);
}
