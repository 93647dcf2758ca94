// shardps-fill-bench: how long re-replication takes to fill a new server
// with a copy of a large table while a client keeps pushing and pulling
// (docs/fault-tolerance.md, "Re-replication and drains"; figures in
// docs/performance.md).
//
// A coordinator and two servers on loopback, replicas = 2, async; a dense
// table of --gib GiB (SGD: values only, so the bytes moved are the table's)
// and a 1 MiB probe table, pushed and pulled by a worker. The probe's push+pull rate is measured, then
// server 1 is killed (SIGKILL), failed over at the heartbeat deadline (8 s:
// a server defining a large table does not answer heartbeats meanwhile), and a
// replacement started under its rank: the coordinator fills it with a copy
// of both groups — the whole table — from server 0, while the probe goes on.
// Printed: the fill's duration and rate, and the probe's rate before and
// during the fill.
//
// With --add (docs/fault-tolerance.md, "Moves"): 4 replica groups, and
// instead of the kill a third server added (shardps-ctl add-server): two
// groups' copies — half the table — move onto it (a fill, then the old
// copy leaves) while the probe goes on.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/base/process.h"
#include "shardps/client.h"

namespace shardps {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string Slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

struct Child {
  pid_t pid = -1;
  ~Child() {
    if (pid > 0) ReapSpawned(pid);
  }
};

// Push+pull round trips of the probe table per second (4 in flight), for
// `seconds`, or until `until` says stop (checked between requests).
template <typename Until>
double ProbeRate(Client& c, const Table& t, double seconds, Until&& until) {
  std::vector<float> g(t.size(), 1e-6f), out(t.size());
  const auto start = Clock::now();
  uint64_t done = 0;
  std::vector<Request> inflight;
  while (Since(start) < seconds && !until()) {
    inflight.push_back(c.Push(t, g));
    inflight.push_back(c.Pull(t, out));
    if (inflight.size() >= 8) {
      for (auto& r : inflight)
        if (Status s = r.Wait(); !s.ok()) std::fprintf(stderr, "probe: %s\n", s.ToString().c_str());
      done += inflight.size() / 2;
      inflight.clear();
    }
  }
  for (auto& r : inflight) (void)r.Wait();
  done += inflight.size() / 2;
  return static_cast<double>(done) / Since(start);
}

int Finish(Client& c, const std::string& dir) {
  (void)c.Close();
  if (std::getenv("SHARDPS_KEEP_BENCH_DIRS"))
    std::printf("logs kept in %s\n", dir.c_str());
  else
    std::system(("rm -rf '" + dir + "'").c_str());
  return 0;
}

// --add: shardps-ctl add-server, a server started on the rank it opens, and
// the two moves onto it timed from that server's start.
template <typename StartServer>
int Add(const std::string& bin, const std::string& dir, const std::string& ep, Client& c, const Table& tp,
        double before, double bytes, StartServer&& start_server) {
  const std::string ctl = SiblingServerDir() + "/../tools/shardps-ctl";
  const std::string ctl_bin = access(ctl.c_str(), X_OK) == 0 ? ctl : bin + "/shardps-ctl";
  if (std::system(("'" + ctl_bin + "' add-server " + ep + " > '" + dir + "/add-server.out' 2>&1").c_str()) != 0)
    return std::fprintf(stderr, "error: add-server failed: %s\n", Slurp(dir + "/add-server.out").c_str()), 1;
  const std::string log = dir + "/coordinator.log";
  const auto start = Clock::now();
  start_server(2, "server2");
  auto moved = [&] { return Count(Slurp(log), "moved off server") >= 2; };
  const double during = ProbeRate(c, tp, 600, moved);
  while (!moved() && Since(start) < 600) usleep(20000);
  const double took = Since(start);
  if (!moved()) return std::fprintf(stderr, "error: not moved within 600 s (logs in %s)\n", dir.c_str()), 1;
  std::printf("two groups moved onto the added server (its start to both old copies gone): %.2f s, %.2f GB/s of "
              "table (%.2f GiB)\n", took, bytes / 2 / took / 1e9, bytes / 2 / (1 << 30));
  std::printf("probe (1 MiB push + pull, 4 in flight): %.0f /s before, %.0f /s during the moves (%.0f %%)\n", before,
              during, 100 * during / before);
  return Finish(c, dir);
}

int Run(const std::string& bin, double gib, double seconds, bool add) {
  char tmpl[] = "/tmp/shardps-fill-bench-XXXXXX";
  if (!mkdtemp(tmpl)) return 1;
  const std::string dir = tmpl;
  Child coord, s0, s1, s1b;
  coord.pid = SpawnProcess({bin + "/shardps-coordinator", "--servers", "2", "--workers", "1", "--consistency", "async",
                            "--replicas", "2", "--partitions", "64", "--heartbeat-timeout-ms", "8000",
                            "--endpoint-file", dir + "/coordinator.endpoint", "--groups", add ? "4" : "2"},
                           dir + "/coordinator.log");
  const std::string ep = WaitForFileLine(dir + "/coordinator.endpoint", 30);
  if (ep.empty()) return std::fprintf(stderr, "error: the coordinator did not start (%s)\n", dir.c_str()), 1;
  auto server = [&](int rank, const std::string& log) {
    return SpawnProcess({bin + "/shardps-server", "--coordinator", ep, "--rank", std::to_string(rank),
                         "--heartbeat-ms", "200", "--max-request-mb", "64"},
                        dir + "/" + log + ".log");
  };
  s0.pid = server(0, "server0");
  s1.pid = server(1, "server1");
  ClientOptions co;
  co.coordinator = ep;
  co.role = ClientRole::kWorker;  // (a worker learns a fail-over's map at once; an observer when it reconnects)
  co.rank = 0;
  co.request_timeout = std::chrono::seconds(120);
  std::unique_ptr<Client> c;
  if (Status s = Client::Connect(co, &c); !s.ok()) return std::fprintf(stderr, "error: %s\n", s.ToString().c_str()), 1;
  TableSpec big;
  big.name = "big";
  big.cols = 256;
  big.rows = static_cast<uint64_t>(gib * (1ull << 30)) / 4 / big.cols;
  big.lr = 1e-9f;
  TableSpec probe = big;
  probe.name = "probe";
  probe.rows = (1u << 20) / 4 / probe.cols;
  Table tb, tp;
  const auto made = Clock::now();
  if (Status s = c->CreateTable(big, &tb); !s.ok()) return std::fprintf(stderr, "error: %s\n", s.ToString().c_str()), 1;
  if (Status s = c->CreateTable(probe, &tp); !s.ok()) return std::fprintf(stderr, "error: %s\n", s.ToString().c_str()), 1;
  const double bytes = static_cast<double>(big.rows) * big.cols * 4;
  std::printf("shardps-fill-bench: a %.2f GiB dense table on 2 servers, replicas 2 (made in %.1f s)\n", bytes / (1 << 30),
              Since(made));
  const double before = ProbeRate(*c, tp, seconds, [] { return false; });
  const std::string log = dir + "/coordinator.log";
  if (add) return Add(bin, dir, ep, *c, tp, before, bytes, [&](int rank, const std::string& name) {
    s1b.pid = server(rank, name);
  });
  kill(s1.pid, SIGKILL);
  ReapSpawned(s1.pid, false);
  s1.pid = -1;
  const auto killed = Clock::now();
  while (Count(Slurp(log), "fail-over to shard map") == 0 && Since(killed) < 30) usleep(20000);
  const double failover = Since(killed);
  const auto start = Clock::now();
  s1b.pid = server(1, "server1.2");
  auto filled = [&] { return Count(Slurp(log), "holds a full copy") >= 2; };
  const double during = ProbeRate(*c, tp, 600, filled);
  while (!filled() && Since(start) < 600) usleep(20000);
  const double took = Since(start);
  if (!filled()) return std::fprintf(stderr, "error: not filled within 600 s (logs in %s)\n", dir.c_str()), 1;
  std::printf("fail-over after the kill: %.2f s\n", failover);
  std::printf("fill of the replacement (start to both groups full copies): %.2f s, %.2f GB/s of table\n", took,
              bytes / took / 1e9);
  std::printf("probe (1 MiB push + pull, 4 in flight): %.0f /s before, %.0f /s during the fill (%.0f %%)\n", before,
              during, 100 * during / before);
  return Finish(*c, dir);
}

}  // namespace
}  // namespace shardps

int main(int argc, char** argv) {
  CLI::App app{"shardps-fill-bench: the time to fill a replacement server with a copy of a large table while a client "
               "pushes and pulls (re-replication)"};
  double gib = 1.0, seconds = 3.0;
  std::string bin_dir;
  app.add_option("--gib", gib, "size of the dense table")->check(CLI::Range(0.001, 64.0))->capture_default_str();
  app.add_option("--seconds", seconds, "probe time before the kill")->check(CLI::Range(0.1, 60.0))->capture_default_str();
  app.add_option("--bin-dir", bin_dir, "directory with shardps-server and shardps-coordinator");
  bool add = false;
  app.add_flag("--add", add, "add a third server (4 groups) instead of a replacement: half the table moves onto it");
  CLI11_PARSE(app, argc, argv);
  shardps::StopSpawnedOnSignal();
  if (bin_dir.empty()) bin_dir = shardps::SiblingServerDir();
  return shardps::Run(bin_dir, gib, seconds, add);
}
