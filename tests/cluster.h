// LocalCluster: a real coordinator and real servers as child processes on
// loopback (free ports), with their logs in a temporary directory. Tests
// connect real clients to it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "shardps/client.h"
#include "shardps/status.h"

namespace shardps::testing {

struct ClusterOptions {
  int servers = 3;
  int workers = 2;
  std::string consistency = "sync";
  int staleness = 0;
  int partitions = 64;
  int heartbeat_timeout_ms = 3000;
  std::string job_toml;                  // optional job file contents
  std::vector<std::string> server_args;  // extra flags for every server
  std::vector<std::string> coordinator_args;  // extra flags for the coordinator
  std::string dir;                       // use this directory (default: a new temp dir)
  // An etcd (HOST:PORT, e.g. EtcdProcess::endpoint()): the job's state goes
  // there (under a prefix of this cluster's own) and a standby coordinator
  // starts beside the leader; coordinator() lists both endpoints.
  std::string etcd;
};

class LocalCluster {
 public:
  LocalCluster() = default;
  ~LocalCluster();  // stops every process (SIGTERM, then SIGKILL after 10 s)
  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;

  // Starts the coordinator, waits for its endpoint file, starts the servers.
  Status Start(const ClusterOptions& o);
  const std::string& coordinator() const { return coordinator_; }
  const std::string& dir() const { return dir_; }
  // The data endpoint of server `rank`, read from its log (waits for it).
  std::string ServerEndpoint(int rank);
  // Prints the tail of every log (call on failure).
  void DumpLogs() const;
  // The text of a process's log ("coordinator", "server0", ...).
  std::string Log(const std::string& name) const;
  // The coordinator's pid, then the servers' in rank order.
  const std::vector<pid_t>& pids() const { return pids_; }
  // Sends `sig` to server `rank` (e.g. SIGKILL) and reaps it.
  void KillServer(int rank, int sig);
  // Sends `sig` to the coordinator that leads first (SIGKILL) and reaps it.
  void KillCoordinator(int sig);
  // Starts another server process with rank `rank`: a replacement for a
  // dead one (its log "serverR.K", K = 2, 3, ...), or — rank = the servers
  // started so far — one for a rank opened by add-server (its log
  // "serverR"). Later calls of KillServer(rank) reach it.
  Status StartServer(int rank);
  // Waits up to `timeout` for server `rank`'s process to exit on its own
  // and reaps it: its exit code, or -1 (still running: it is left alone;
  // killed by a signal: -1 too).
  int WaitServerExit(int rank, std::chrono::seconds timeout);

 private:
  pid_t Spawn(const std::string& name, const std::vector<std::string>& argv);
  std::string dir_;
  std::string coordinator_;
  std::vector<pid_t> pids_;
  pid_t standby_ = -1;  // with ClusterOptions::etcd
  std::vector<std::string> logs_;
  std::vector<std::string> server_args_;
  std::vector<int> server_starts_;  // by rank: processes started
  bool own_dir_ = true;
};

// A client of `c` (timeouts of a minute, heartbeats every 200 ms); null,
// after recording a test failure that says why, if it cannot connect.
std::unique_ptr<Client> ConnectClient(const LocalCluster& c, ClientRole role, int rank = -1);

// Path of a built binary, from the environment meson sets (SHARDPS_<NAME>).
std::string BinaryPath(const char* env_name);
// Runs a command, returns its exit status and combined output.
int RunCommand(const std::vector<std::string>& argv, std::string* output, int timeout_s = 60);
// The /metrics text of the first process of `role` ("server", "worker",
// "coordinator") that shows a metrics URL in `shardps-ctl status --json`;
// "" after recording a test failure that says why.
std::string MetricsOf(const LocalCluster& c, const std::string& role);
// MetricsOf(c, "server"): server 0's.
std::string ServerMetrics(const LocalCluster& c);
// The value of `series` (name and labels as rendered) in a /metrics text;
// -1 when it is not there.
double MetricValue(const std::string& metrics, const std::string& series);

// Polls `cond` every 10 ms until true or `timeout`; returns its last value.
template <typename F>
bool WaitFor(F cond, std::chrono::milliseconds timeout) {
  auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    struct timespec ts {0, 10 * 1000 * 1000};
    nanosleep(&ts, nullptr);
  }
  return cond();
}

}  // namespace shardps::testing
