// shardps-server: holds partitions of every table, applies gradients, serves pulls.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <string>

#include "common/base/log.h"
#include "common/base/process.h"
#include "common/base/signals.h"
#include "common/metrics/metrics_http.h"
#include "common/net/net.h"
#include "server/server.h"

namespace shardps {
namespace {

// What the flags set beyond ServerOptions' own fields.
struct ServerFlags {
  ServerOptions o;
  std::string log_level = "info";
  uint64_t max_mb = 0;
  int64_t hb_ms = 0, reg_ms = 0, delay_ms = 0;
  int metrics_port = 0;
  std::string metrics_address;
  bool no_metrics = false;
  std::string cpus;
  uint64_t budget_mb = 0, held_mb = 0;
  int64_t max_hold_sec = 0;
  double coord_timeout_sec = 0;
  std::string key_file, access_file;
};

// "error: ..." on stderr; exit status 2 (bad input).
int Refuse(const std::string& what) {
  std::fprintf(stderr, "error: %s\n", what.c_str());
  return 2;
}

// The options from the flags, checked: 0, or the exit status of a refusal.
int BuildOptions(ServerFlags& f) {
  SetLogName("server");
  LogLevel level;
  if (!ParseLogLevel(f.log_level, &level))
    return Refuse("--log-level '" + f.log_level + "' is not one of debug, info, warn, error");
  SetLogLevel(level);
  ServerOptions& o = f.o;
  o.max_request_bytes = f.max_mb << 20;
  o.heartbeat_interval = Millis(f.hb_ms);
  o.register_timeout = Millis(f.reg_ms);
  o.coordinator_timeout = Millis(static_cast<int64_t>(f.coord_timeout_sec * 1000));
  o.snapshot_write_delay = Millis(f.delay_ms);
  o.memory_budget = f.budget_mb << 20;
  o.held_bytes = f.held_mb << 20;
  o.max_hold = Millis(f.max_hold_sec * 1000);
  if (!f.access_file.empty() && f.key_file.empty()) return Refuse("--access needs --key");
  if (!f.key_file.empty())
    if (Status s = LoadServerSecurity(f.key_file, f.access_file, &o.security); !s.ok())
      return Refuse("--key: " + s.message());
  if (Status s = o.Validate(); !s.ok()) return Refuse(s.ToString());
  if (!o.cold_dir.empty()) {
    std::error_code ec;
    if (std::filesystem::exists(o.cold_dir, ec) && !std::filesystem::is_directory(o.cold_dir, ec))
      return Refuse("--cold-dir: " + o.cold_dir + " is not a directory");
  }
  // Before any thread starts: they all inherit it.
  if (!f.cpus.empty())
    if (Status s = PinToCpus(f.cpus); !s.ok()) return Refuse("--cpus: " + s.message());
  return 0;
}

// Serves /metrics (unless --no-metrics), starts the server and runs it
// until it is told to stop: the process's exit status.
int Serve(const ServerFlags& f) {
  TuneAllocatorForLargeMessages();
  const auto& stop = InstallStopSignals();
  zmq::context_t ctx(1);
  Server server(ctx, f.o);
  metrics::MetricsServer metrics_http(server.registry());
  if (!f.no_metrics) {
    // Bound where asked (default: the address the data endpoint will be
    // advertised on); the URL names an address others can dial.
    std::string advertised = f.o.advertise;
    if (advertised.empty() && !LocalAddressTowards(f.o.coordinator, &advertised).ok()) advertised = "127.0.0.1";
    const std::string addr = f.metrics_address.empty() ? advertised : f.metrics_address;
    if (Status s = metrics_http.Start(addr, f.metrics_port); !s.ok()) {
      std::fprintf(stderr, "error: metrics: %s\n", s.message().c_str());
      return 1;
    }
    server.set_metrics_url(metrics::IsWildcard(addr) ? metrics::Url(advertised, metrics_http.port())
                                                     : metrics_http.url());
  }
  Status s = server.Start(&stop);
  if (!s.ok() && stop) {  // asked to stop before it ever served: not a failure
    LOG_INFO << s.message();
    return 0;
  }
  if (s.ok()) s = server.Run(stop);
  if (!s.ok()) {
    LOG_ERROR << s.ToString();
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace shardps

int main(int argc, char** argv) {
  using namespace shardps;
  CLI::App app{"shardps parameter server"};
  ServerFlags f;
  ServerOptions& o = f.o;
  f.max_mb = o.max_request_bytes >> 20;
  f.hb_ms = o.heartbeat_interval.count();
  f.reg_ms = o.register_timeout.count();
  f.coord_timeout_sec = static_cast<double>(o.coordinator_timeout.count()) / 1000.0;
  f.max_hold_sec = o.max_hold.count() / 1000;
  app.add_option("--coordinator", o.coordinator, "coordinator endpoint, e.g. tcp://10.0.0.1:5555; a leader and its standbys: tcp://A:P,tcp://B:Q")->required();
  app.add_option("--bind", o.bind, "data endpoint to listen on; port 0 picks a free port")->capture_default_str();
  app.add_option("--advertise", o.advertise,
                 "host or address clients dial (default for a wildcard --bind: this host's address on the route to the coordinator)");
  app.add_option("--metrics-port", f.metrics_port, "serve Prometheus /metrics on this port (0: a free port)")->check(CLI::Range(0, 65535))->capture_default_str();
  app.add_option("--metrics-address", f.metrics_address, "address /metrics binds to (default: the advertised one)");
  app.add_flag("--no-metrics", f.no_metrics, "serve no /metrics");
  app.add_option("--rank", o.rank, "server rank (default: the coordinator assigns one)")->check(CLI::Range(0, 4095));
  app.add_option("--max-request-mb", f.max_mb, "largest request accepted, in MiB")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("--heartbeat-ms", f.hb_ms, "heartbeat interval to the coordinator")->check(CLI::Range(1, 600000))->capture_default_str();
  app.add_option("--coordinator-timeout-sec", f.coord_timeout_sec,
                 "no message from the coordinator for this long (it answers every heartbeat): the job is gone, the "
                 "server says so and exits 1 (0: wait for ever)")
      ->check(CLI::Range(0.0, 86400.0))->capture_default_str();
  app.add_option("--register-timeout-ms", f.reg_ms, "how long to wait for the coordinator at start")->check(CLI::Range(1, 86400000))->capture_default_str();
  app.add_option("--snapshot-write-delay-ms", f.delay_ms, "(testing) wait this long before writing each snapshot")->check(CLI::Range(0, 3600000));
  app.add_option("--cpus", f.cpus, "pin the server (its event loop and ZeroMQ I/O thread) to these CPUs, e.g. 3 or 0-1: a gradient is then applied in the cache it was received into");
  app.add_option("--memory-budget-mb", f.budget_mb, "tables this server may hold, in MiB (default: half of this machine's memory)")->check(CLI::Range(uint64_t{1}, uint64_t{1} << 34));
  app.add_option("--held-mb", f.held_mb, "pulls held for slower workers, and sync pushes held for their clock, at most this many MiB each (default: a quarter of the budget)")->check(CLI::Range(uint64_t{1}, uint64_t{1} << 34));
  app.add_option("--cold-dir", o.cold_dir, "where the rows of tiered tables (cold_tier) past the memory budget go: in DIR/shardps-cold-RANK, emptied when the server starts and removed when it stops (default: the working directory)");
  app.add_option("--max-hold-sec", f.max_hold_sec, "a pull held longer for slower workers is answered Timeout")->check(CLI::Range(1, 86400))->capture_default_str();
  app.add_option("--key", f.key_file, "security on: the job's server key (shardps-keygen DIR makes DIR/server.key); every connection is CURVE-encrypted and admitted by the access list")->envname("SHARDPS_KEY");
  app.add_option("--access", f.access_file, "the access list: public keys and their roles (default: 'access' beside --key)");
  app.add_option("--log-level", f.log_level, "debug | info | warn | error")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (int rc = BuildOptions(f); rc != 0) return rc;
  return Serve(f);
}
