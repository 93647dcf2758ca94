// shardps-scale-sim: how one coordinator's cost grows with the number of
// workers (docs/performance.md, "How the coordinator scales"). For each N,
// a real coordinator and servers, and N simulated workers in this process:
// threads, each a real Client (its own sockets and I/O thread), a tiny
// dense table, no model. Measured per N:
//   - connect: until every worker joined (register, cluster, join);
//   - sync step: a push, a tick and the next pull of every worker: the
//     time per clock, median over the clocks;
//   - barrier: from the last worker's arrival until the last one is
//     released, median over the rounds;
//   - heartbeat: the coordinator's CPU (utime + stime) over an idle window
//     in which the workers only heartbeat, per heartbeat received;
//   - claim: the coordinator's CPU per ClaimWork, every worker claiming
//     units of one pool;
//   - status: `GetStatus` through shardps-ctl --json: the reply's bytes and
//     the command's wall time;
//   - the coordinator's resident memory at the end.
//
//   shardps-scale-sim [--workers 16,64,256,1024] [--servers 2]
//                     [--heartbeat-ms 1000] [--clocks 20] [--quick]
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/base/process.h"
#include "common/base/signals.h"
#include "shardps/client.h"

namespace shardps {
namespace {

using Clock = std::chrono::steady_clock;
double Secs(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct Child {
  pid_t pid = -1;
  ~Child() { ReapSpawned(pid); }
};

// The process's CPU time (user + system), in microseconds.
double CpuMicros(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(f, line);
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) * 1e6 / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// The process's resident memory (VmRSS), in MiB.
double RssMiB(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return -1;
}

double Median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Runs `fn(rank)` on every worker's thread at once and waits for all.
template <typename Fn>
void OnEveryWorker(int n, Fn fn) {
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { fn(r); });
  for (auto& t : threads) t.join();
}

struct Options {
  std::vector<int> workers = {16, 64, 256, 1024};
  int servers = 2;
  int heartbeat_ms = 1000;
  int clocks = 20;
  int barriers = 5;
  double idle_sec = 5;
  int claims = 20;
};

struct Figures {
  double connect_s = 0, step_ms = 0, barrier_ms = 0, heartbeat_us = 0, claim_us = 0, status_ms = 0, rss_mib = 0;
  size_t status_bytes = 0;
};

int Fail(const std::string& what, const std::string& dir) {
  std::fprintf(stderr, "shardps-scale-sim: %s (logs in %s)\n", what.c_str(), dir.c_str());
  return 1;
}

int RunOne(const Options& o, int n, const std::string& dir, Figures* out) {
  const std::string bin = SiblingServerDir();
  const std::string tools = SelfPath().substr(0, SelfPath().rfind('/'));
  const std::string name = dir + "/n" + std::to_string(n);
  Child coord;
  std::vector<Child> servers(o.servers);
  coord.pid = SpawnProcess({bin + "/shardps-coordinator", "--servers", std::to_string(o.servers), "--workers",
                            std::to_string(n), "--consistency", "sync", "--endpoint-file", name + ".endpoint",
                            "--heartbeat-timeout-ms", std::to_string(std::max(30000, 20 * o.heartbeat_ms)),
                            "--no-metrics", "--log-level", "warn"},
                           name + "-coordinator.log");
  const std::string ep = WaitForFileLine(name + ".endpoint", 30);
  if (ep.empty()) return Fail("the coordinator did not start", dir);
  for (int i = 0; i < o.servers; ++i)
    servers[i].pid = SpawnProcess({bin + "/shardps-server", "--coordinator", ep, "--no-metrics", "--log-level", "warn"},
                                  name + "-server" + std::to_string(i) + ".log");

  // Connect every worker at once (each Connect waits for the servers).
  std::vector<std::unique_ptr<Client>> w(n);
  std::vector<Table> table(n);
  std::atomic<int> failed{0};
  std::mutex err_mu;
  std::string first_error;
  auto fail = [&](const Status& s) {
    failed++;
    std::lock_guard<std::mutex> lock(err_mu);
    if (first_error.empty()) first_error = s.ToString();
  };
  const auto t0 = Clock::now();
  OnEveryWorker(n, [&](int r) {
    ClientOptions co;
    co.coordinator = ep;
    co.rank = r;
    co.heartbeat_interval = std::chrono::milliseconds(o.heartbeat_ms);
    co.connect_timeout = std::chrono::milliseconds(300000);
    co.request_timeout = std::chrono::milliseconds(300000);
    Status s = Client::Connect(co, &w[r]);
    if (s.ok()) {
      TableSpec t;
      t.name = "sim";
      t.rows = 4;
      t.cols = 4;
      s = w[r]->CreateTable(t, &table[r]);
    }
    if (!s.ok()) fail(s);
  });
  out->connect_s = Secs(Clock::now() - t0);
  if (failed) return Fail("a worker could not connect: " + first_error, dir);

  // Sync steps: push, tick, pull (which waits for every worker's tick).
  std::vector<std::vector<Clock::time_point>> done(n, std::vector<Clock::time_point>(o.clocks));
  OnEveryWorker(n, [&](int r) {
    std::vector<float> g(16, 0.001f), v(16);
    for (int c = 0; c < o.clocks; ++c) {
      Status s = w[r]->Push(table[r], g).Wait();
      if (s.ok()) s = w[r]->Clock();
      if (s.ok()) s = w[r]->Pull(table[r], v).Wait();
      if (!s.ok()) return fail(s);
      done[r][c] = Clock::now();
    }
  });
  if (failed) return Fail("a sync step failed: " + first_error, dir);
  std::vector<double> steps;
  for (int c = 1; c < o.clocks; ++c) {
    Clock::time_point a = done[0][c - 1], b = done[0][c];
    for (int r = 1; r < n; ++r) a = std::max(a, done[r][c - 1]), b = std::max(b, done[r][c]);
    steps.push_back(Secs(b - a) * 1e3);
  }
  out->step_ms = Median(steps);

  // Barriers: from the last arrival to the last release.
  std::vector<double> barriers;
  for (int b = 0; b < o.barriers; ++b) {
    std::vector<Clock::time_point> in(n), back(n);
    OnEveryWorker(n, [&](int r) {
      in[r] = Clock::now();
      Status s = w[r]->Barrier(std::chrono::milliseconds(300000));
      back[r] = Clock::now();
      if (!s.ok()) fail(s);
    });
    if (failed) return Fail("a barrier failed: " + first_error, dir);
    barriers.push_back(Secs(*std::max_element(back.begin(), back.end()) - *std::max_element(in.begin(), in.end())) *
                       1e3);
  }
  out->barrier_ms = Median(barriers);

  // Idle: only heartbeats reach the coordinator (the servers' too, a few).
  const double cpu0 = CpuMicros(coord.pid);
  const auto i0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(o.idle_sec));
  const double idle = Secs(Clock::now() - i0);
  const double beats = idle * 1000.0 / o.heartbeat_ms * (n + o.servers);
  out->heartbeat_us = (CpuMicros(coord.pid) - cpu0) / beats;

  // Claims: every worker claims one unit at a time from a shared pool.
  const uint64_t units = static_cast<uint64_t>(n) * o.claims;
  const double cpu1 = CpuMicros(coord.pid);
  const auto c0 = Clock::now();
  std::atomic<uint64_t> claimed{0};
  OnEveryWorker(n, [&](int r) {
    for (int k = 0; k < o.claims; ++k) {
      WorkRange got;
      Status s = w[r]->ClaimWork(1, units, 1, &got);
      if (!s.ok()) return fail(s);
      claimed += got.size();
    }
  });
  if (failed) return Fail("a claim failed: " + first_error, dir);
  // Less the heartbeats that came meanwhile, at the idle window's cost.
  const double window = Secs(Clock::now() - c0);
  const double beat_cpu = window * 1000.0 / o.heartbeat_ms * (n + o.servers) * out->heartbeat_us;
  out->claim_us = std::max(0.0, CpuMicros(coord.pid) - cpu1 - beat_cpu) / static_cast<double>(units);

  // Status, as an operator reads it.
  std::string status;
  const auto s0 = Clock::now();
  {
    const std::string file = name + "-status.json";
    const pid_t p = SpawnProcess({tools + "/shardps-ctl", "status", ep, "--json"}, file);
    ReapSpawned(p, false);
    std::ifstream f(file);
    status.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  out->status_ms = Secs(Clock::now() - s0) * 1e3;
  out->status_bytes = status.size();
  if (status.find("\"processes\"") == std::string::npos) return Fail("shardps-ctl status gave no processes", dir);
  out->rss_mib = RssMiB(coord.pid);
  for (auto& c : w) (void)c->Close();
  return 0;
}

int Main(int argc, char** argv) {
  Options o;
  bool quick = false;
  std::string dir;
  CLI::App app{"shardps-scale-sim: one coordinator's cost against the number of workers (simulated in this process)"};
  app.add_option("--workers", o.workers, "worker counts to measure")->delimiter(',')->check(CLI::Range(1, 65536));
  app.add_option("--servers", o.servers, "servers")->check(CLI::Range(1, 64));
  app.add_option("--heartbeat-ms", o.heartbeat_ms, "the workers' heartbeat interval")->check(CLI::Range(10, 60000));
  app.add_option("--clocks", o.clocks, "sync steps timed")->check(CLI::Range(2, 100000));
  app.add_option("--dir", dir, "where the logs go (default: a new temporary directory)");
  app.add_flag("--quick", quick, "a short run (checks the tool; figures not meaningful)");
  CLI11_PARSE(app, argc, argv);
  if (quick) {
    o.clocks = 4;
    o.barriers = 2;
    o.idle_sec = 1;
    o.claims = 2;
  }
  StopSpawnedOnSignal();
  // Every Client holds a few sockets: 1024 of them need more than the usual 1024 descriptors.
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }
  if (dir.empty()) {
    char tmpl[] = "/tmp/shardps-scale-sim-XXXXXX";
    if (!mkdtemp(tmpl)) return Fail("cannot make a temporary directory", "/tmp");
    dir = tmpl;
  }
  std::printf("shardps-scale-sim: %d servers, sync, workers heartbeat every %d ms; %u cores (coordinator, servers "
              "and workers all on this machine)\n",
              o.servers, o.heartbeat_ms, std::thread::hardware_concurrency());
  std::printf("%8s %10s %10s %11s %13s %10s %12s %11s %9s\n", "workers", "connect s", "step ms", "barrier ms",
              "heartbeat us", "claim us", "status KiB", "status ms", "RSS MiB");
  for (int n : o.workers) {
    Figures f;
    if (int rc = RunOne(o, n, dir, &f)) return rc;
    std::printf("%8d %10.2f %10.2f %11.2f %13.1f %10.1f %12.1f %11.1f %9.1f\n", n, f.connect_s, f.step_ms,
                f.barrier_ms, f.heartbeat_us, f.claim_us, f.status_bytes / 1024.0, f.status_ms, f.rss_mib);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace shardps

int main(int argc, char** argv) { return shardps::Main(argc, argv); }
