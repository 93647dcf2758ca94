// The job file (TOML): the one description of a job, read by the
// coordinator and, through `shardps-coordinator --print-config`, by the
// launcher. See docs/configuration.md and docs/examples/.
//
//   [job]
//   servers = 2
//   workers = 2
//   partitions = 64
//   consistency = "bounded"   # sync | bounded | async
//   staleness = 2
//
//   [[table]]
//   name = "fc1"
//   kind = "dense"            # dense | sparse
//   rows = 784
//   cols = 256
//   init = "normal"           # zeros | constant | uniform | normal
//   ...
//
//   [launch]                  # read by shardps-launch only
//   mode = "ssh"              # local | ssh | slurm
//   hosts = ["node1", { name = "node2", servers = 1, workers = 2 }]
//   worker_command = ["shardps-worker", "--coordinator", "{coordinator}", "--rank", "{rank}"]
//
//   [metrics]
//   port = 0                  # 0: a free port
//
//   [security]
//   keys = "/etc/shardps/job-keys"   # shardps-keygen DIR; CURVE + roles
//   # enabled = true/false: unset, on across hosts (the launcher makes keys), off locally
//
// Every key can be overridden with `--set section.key=value` (the value is
// TOML; a bare word is taken as a string).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/coordinator/coordinator.h"

namespace shardps {

struct LaunchHost {
  std::string name;      // ssh destination ([user@]host)
  std::string address;   // what the others dial ("" = chosen by route to the coordinator)
  bool coordinator = false;
  int servers = -1;      // -1: spread the job's servers over the hosts
  int workers = -1;
};

struct LaunchOptions {
  std::string mode = "local";  // local | ssh | slurm
  std::vector<LaunchHost> hosts;
  std::string interface;       // advertise this interface's address
  std::string advertise;       // or this address (single-host jobs)
  uint32_t coordinator_port = 0;          // 0: a free port
  uint32_t server_port_min = 0, server_port_max = 0;  // 0-0: free ports
  std::vector<std::string> worker_command;  // {coordinator} {rank} {workers} replaced
  std::map<std::string, std::string> env;   // for every process it starts
  std::vector<std::string> server_cpus;     // per server rank (cycled): --cpus LIST
  std::string bin_dir;                      // shardps binaries on every host
  std::string run_dir;                      // logs and endpoint files
  uint32_t timeout_sec = 3600;
  bool restart_workers = false;             // a failed worker is started again (same rank; it rejoins)
  bool restart_servers = false;             // a dead server: the job rolls back to its newest snapshot
  bool restart_coordinator = false;         // a dead coordinator is started again on its saved state
  uint32_t max_restarts = 3;                // per worker rank, and rollbacks
  std::string etcd;                         // "local" (the launcher starts 3 members) or HOST:PORT,...
  std::vector<std::string> ssh_options;
  std::vector<std::string> srun_options;
};

struct MetricsOptions {
  bool enabled = true;
  int port = 0;          // 0: a free port
  std::string address;   // "" = the process's advertised address
};

struct SecurityConfig {
  // A key directory made by `shardps-keygen DIR` ("" = security off): the
  // coordinator and servers listen with DIR/server.key and admit DIR/access;
  // the launcher hands each process the key of its role.
  std::string keys;
  // Whether the job runs with security on. Unset: the launcher decides (on
  // when a job spans hosts, over ssh or Slurm: it makes the job's keys in
  // the run directory; off for a local job). false with `keys` is refused.
  std::optional<bool> enabled;
};

// [coordinator]: its store is CoordinatorOptions::state_dir (etcd://...).
struct CoordinatorSection {
  uint32_t standbys = 0;  // standby coordinators the launcher starts (etcd)
};

struct JobConfig {
  CoordinatorOptions job;
  CoordinatorSection coordinator;
  LaunchOptions launch;
  MetricsOptions metrics;
  SecurityConfig security;
};

// Parses TOML text, then applies `sets` ("section.key=value"), into `out`
// (fields absent from both keep their value). Errors name the key, the line
// (or the --set) and what was expected.
Status ParseJobConfig(std::string_view text, std::string_view source_name,
                      const std::vector<std::string>& sets, JobConfig* out);
// `path` may be "" (only the --set values).
Status LoadJobConfig(const std::string& path, const std::vector<std::string>& sets, JobConfig* out);
// Coordinator-only shorthands (no overrides).
Status ParseJobConfig(std::string_view text, std::string_view source_name, CoordinatorOptions* out);
Status LoadJobConfig(const std::string& path, CoordinatorOptions* out);

// The resolved job as one JSON object: {"job": {...}, "tables": [...],
// "launch": {...}, "metrics": {...}}.
std::string JobConfigJson(const JobConfig& c);

}  // namespace shardps
