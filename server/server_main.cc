// shardps-server: holds partitions of every table, applies gradients, serves pulls.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "common/log.h"
#include "common/metrics_http.h"
#include "common/process.h"
#include "common/net.h"
#include "common/signals.h"
#include "server/server.h"

int main(int argc, char** argv) {
  using namespace shardps;
  CLI::App app{"shardps parameter server"};
  ServerOptions o;
  std::string log_level = "info";
  uint64_t max_mb = o.max_request_bytes >> 20;
  int64_t hb_ms = o.heartbeat_interval.count(), reg_ms = o.register_timeout.count();
  app.add_option("--coordinator", o.coordinator, "coordinator endpoint, e.g. tcp://10.0.0.1:5555")->required();
  app.add_option("--bind", o.bind, "data endpoint to listen on; port 0 picks a free port")->capture_default_str();
  app.add_option("--advertise", o.advertise,
                 "host or address clients dial (default for a wildcard --bind: this host's address on the route to the coordinator)");
  int metrics_port = 0;
  std::string metrics_address;
  bool no_metrics = false;
  app.add_option("--metrics-port", metrics_port, "serve Prometheus /metrics on this port (0: a free port)")->check(CLI::Range(0, 65535))->capture_default_str();
  app.add_option("--metrics-address", metrics_address, "address /metrics binds to (default: the advertised one)");
  app.add_flag("--no-metrics", no_metrics, "serve no /metrics");
  app.add_option("--rank", o.rank, "server rank (default: the coordinator assigns one)")->check(CLI::Range(0, 4095));
  app.add_option("--max-request-mb", max_mb, "largest request accepted, in MiB")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("--heartbeat-ms", hb_ms, "heartbeat interval to the coordinator")->check(CLI::Range(1, 600000))->capture_default_str();
  app.add_option("--register-timeout-ms", reg_ms, "how long to wait for the coordinator at start")->check(CLI::Range(1, 86400000))->capture_default_str();
  int64_t delay_ms = 0;
  app.add_option("--snapshot-write-delay-ms", delay_ms, "(testing) wait this long before writing each snapshot")->check(CLI::Range(0, 3600000));
  std::string cpus;
  app.add_option("--cpus", cpus, "pin the server (its event loop and ZeroMQ I/O thread) to these CPUs, e.g. 3 or 0-1: a gradient is then applied in the cache it was received into");
  uint64_t budget_mb = 0, held_mb = 0;
  int64_t max_hold_sec = o.max_hold.count() / 1000;
  app.add_option("--memory-budget-mb", budget_mb, "tables this server may hold, in MiB (default: half of this machine's memory)")->check(CLI::Range(uint64_t{1}, uint64_t{1} << 34));
  app.add_option("--held-mb", held_mb, "pulls held for slower workers, and sync pushes held for their clock, at most this many MiB each (default: a quarter of the budget)")->check(CLI::Range(uint64_t{1}, uint64_t{1} << 34));
  app.add_option("--max-hold-sec", max_hold_sec, "a pull held longer for slower workers is answered Timeout")->check(CLI::Range(1, 86400))->capture_default_str();
  std::string key_file, access_file;
  app.add_option("--key", key_file, "security on: the job's server key (shardps-keygen DIR makes DIR/server.key); every connection is CURVE-encrypted and admitted by the access list")->envname("SHARDPS_KEY");
  app.add_option("--access", access_file, "the access list: public keys and their roles (default: 'access' beside --key)");
  app.add_option("--log-level", log_level, "debug | info | warn | error")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  SetLogName("server");
  LogLevel level;
  if (!ParseLogLevel(log_level, &level)) {
    std::fprintf(stderr, "error: --log-level '%s' is not one of debug, info, warn, error\n", log_level.c_str());
    return 2;
  }
  SetLogLevel(level);
  o.max_request_bytes = max_mb << 20;
  o.heartbeat_interval = Millis(hb_ms);
  o.register_timeout = Millis(reg_ms);
  o.snapshot_write_delay = Millis(delay_ms);
  o.memory_budget = budget_mb << 20;
  o.held_bytes = held_mb << 20;
  o.max_hold = Millis(max_hold_sec * 1000);
  if (!access_file.empty() && key_file.empty()) {
    std::fprintf(stderr, "error: --access needs --key\n");
    return 2;
  }
  if (!key_file.empty()) {
    if (Status s = LoadServerSecurity(key_file, access_file, &o.security); !s.ok()) {
      std::fprintf(stderr, "error: --key: %s\n", s.message().c_str());
      return 2;
    }
  }
  if (Status s = o.Validate(); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return 2;
  }
  if (!cpus.empty()) {
    // Before any thread starts: they all inherit it.
    if (Status s = PinToCpus(cpus); !s.ok()) {
      std::fprintf(stderr, "error: --cpus: %s\n", s.message().c_str());
      return 2;
    }
  }
  TuneAllocatorForLargeMessages();
  const auto& stop = InstallStopSignals();
  zmq::context_t ctx(1);
  Server server(ctx, o);
  metrics::MetricsServer metrics_http(server.registry());
  if (!no_metrics) {
    // The address the data endpoint will be advertised on, unless told.
    // Bound where asked (default: the address the data endpoint will be
    // advertised on); the URL names an address others can dial.
    std::string advertised = o.advertise;
    if (advertised.empty() && !LocalAddressTowards(o.coordinator, &advertised).ok()) advertised = "127.0.0.1";
    const std::string addr = metrics_address.empty() ? advertised : metrics_address;
    if (Status s = metrics_http.Start(addr, metrics_port); !s.ok()) {
      std::fprintf(stderr, "error: metrics: %s\n", s.message().c_str());
      return 1;
    }
    server.set_metrics_url(metrics::IsWildcard(addr) ? metrics::Url(advertised, metrics_http.port()) : metrics_http.url());
  }
  if (Status s = server.Start(); !s.ok()) {
    LOG_ERROR << s.ToString();
    return 1;
  }
  Status s = server.Run(stop);
  if (!s.ok()) {
    LOG_ERROR << s.ToString();
    return 1;
  }
  return 0;
}
