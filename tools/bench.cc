// shardps-bench: push/pull throughput and latency against a real server
// process, next to the raw ZeroMQ ceiling measured the same way on the same
// loopback, and the optimizer's apply bandwidth next to memcpy.
//
//   shardps-bench [--quick] [--bin-dir DIR] [--seconds S]
//
// Prints one table; see docs/performance.md for what each row means.
#include <CLI/CLI.hpp>
#include <sched.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "common/base/file.h"
#include "common/base/process.h"
#include "common/base/signals.h"
#include "common/net/net.h"
#include "common/net/security.h"
#include "server/tables/table.h"
#include "shardps/client.h"

namespace shardps {
namespace {

using Sec = std::chrono::duration<double>;
double Now() { return Sec(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Child {
  pid_t pid = -1;
  ~Child() { ReapSpawned(pid); }
};


// Bytes in flight per stream (raw and shardps alike), in MiB.
int window_mb = 64;
// --keys: CURVE on every connection, raw ZeroMQ included (docs/security.md).
std::string keys_dir;

KeyFile LoadOrDie(const std::string& path) {
  KeyFile k;
  if (Status s = LoadKeyFile(path, &k); !s.ok()) {
    std::fprintf(stderr, "error: --keys: %s\n", s.message().c_str());
    std::exit(2);
  }
  return k;
}

// ---- raw ZeroMQ: a sink process that acknowledges every `batch`-th message.
int RawSink(const std::string& endpoint_file, const std::string& cpus) {
  if (!cpus.empty() && !PinToCpus(cpus).ok()) return 1;
  zmq::context_t ctx(1);
  zmq::socket_t s(ctx, zmq::socket_type::router);
  s.set(zmq::sockopt::rcvhwm, 0);
  s.set(zmq::sockopt::sndhwm, 0);
  if (!keys_dir.empty()) {
    const KeyFile k = LoadOrDie(keys_dir + "/server.key");
    s.set(zmq::sockopt::curve_server, 1);
    s.set(zmq::sockopt::curve_secretkey, k.secret_key);
  }
  s.bind("tcp://127.0.0.1:*");
  if (!WriteFileAtomic(endpoint_file, LastEndpoint(s) + "\n").ok()) return 1;
  TuneAllocatorForLargeMessages();
  std::vector<zmq::message_t> frames;
  for (;;) {
    if (!RecvMultipart(s, &frames, false)) continue;
    // frames: identity, header(8 bytes: 1 = wants ack), payload
    if (frames.size() >= 2 && frames[1].size() == 8 && *static_cast<const uint64_t*>(frames[1].data()) == 1) {
      zmq::message_t id(frames[0].data(), frames[0].size());
      zmq::message_t ack(8);
      s.send(id, zmq::send_flags::sndmore);
      s.send(ack, zmq::send_flags::none);
    }
  }
}

void NoFree(void*, void*) {}

struct RawResult {
  double gbps = 0, rtt_us = 0;
};

// One-way throughput: stream `count` messages of `size` bytes (sent without
// copies from one buffer, the best a raw sender can do), the last asks for an
// acknowledgement. Round trip: `rt` messages each acknowledged.
RawResult RawZmq(const std::string& endpoint, size_t size, double seconds) {
  zmq::context_t ctx(1);
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::sndhwm, 0);
  if (!keys_dir.empty()) MakeCurveClient(s, LoadOrDie(keys_dir + "/worker.key"));
  s.connect(endpoint);
  std::vector<char> buf(size, 1);
  auto send = [&](bool ack) {
    uint64_t flag = ack ? 1 : 0;
    zmq::message_t h(&flag, 8);
    zmq::message_t p(buf.data(), size, &NoFree, nullptr);
    s.send(h, zmq::send_flags::sndmore);
    s.send(p, zmq::send_flags::none);
  };
  auto wait_ack = [&] {
    zmq::message_t m;
    (void)s.recv(m);
  };
  send(true);
  wait_ack();  // connected and warm
  RawResult r;
  // Throughput: rounds of `window` messages, the last of each acknowledged.
  const int window = std::max<int>(2, static_cast<int>(std::min<size_t>(64, (static_cast<size_t>(window_mb) << 20) / size)));
  uint64_t bytes = 0;
  double t0 = Now();
  while (Now() - t0 < seconds) {
    for (int i = 0; i < window; ++i) send(i + 1 == window);
    wait_ack();
    bytes += static_cast<uint64_t>(window) * size;
  }
  r.gbps = bytes / (Now() - t0) / 1e9;
  int n = 0;
  t0 = Now();
  while (Now() - t0 < seconds / 2 || n < 3) {
    send(true);
    wait_ack();
    ++n;
  }
  r.rtt_us = (Now() - t0) / n * 1e6;
  return r;
}

// ---- shardps through the client library.
struct PsResult {
  double push_gbps = 0, pull_gbps = 0, pull_copy_gbps = 0, pushpull_gbps = 0, rtt_us = 0;
};

template <typename MakeReq>
double Pipelined(int window, double seconds, uint64_t bytes_per_req, MakeReq make) {
  std::deque<Request> inflight;
  uint64_t bytes = 0;
  double t0 = Now();
  while (Now() - t0 < seconds) {
    if (static_cast<int>(inflight.size()) >= window) {
      if (!inflight.front().Wait().ok()) return -1;
      inflight.pop_front();
    }
    inflight.push_back(make());
    bytes += bytes_per_req;
  }
  for (auto& r : inflight)
    if (!r.Wait().ok()) return -1;
  return bytes / (Now() - t0) / 1e9;
}

PsResult Shardps(Client& c, size_t size, double seconds, int* id) {
  TableSpec spec;
  spec.name = "bench_dense_" + std::to_string(size);
  spec.cols = size >= 1024 ? 256 : 1;
  spec.rows = size / 4 / spec.cols;
  spec.optimizer = OptimizerKind::kSGD;
  spec.lr = 1e-9f;
  Table t;
  Status s = c.CreateTable(spec, &t);
  if (!s.ok()) {
    std::fprintf(stderr, "create table: %s\n", s.ToString().c_str());
    std::exit(1);
  }
  (*id)++;
  const int window = std::max<int>(2, static_cast<int>(std::min<size_t>(64, (static_cast<size_t>(window_mb) << 20) / size)));
  std::vector<float> g(t.size(), 1e-3f), out(t.size());
  (void)c.Pull(t, out).Wait();  // warm up
  PsResult r;
  r.push_gbps = Pipelined(window, seconds, size, [&] { return c.Push(t, g); });
  // Pulls into the received buffers (PullView), and into an array (Pull:
  // one more copy, in the client's I/O thread). Pulls into an array may
  // land in one buffer: the bench measures transport, not use.
  std::vector<PulledRows> views(static_cast<size_t>(window) + 1);
  size_t vi = 0;
  r.pull_gbps = Pipelined(window, seconds, size, [&] { return c.PullView(t, &views[vi++ % views.size()]); });
  r.pull_copy_gbps = Pipelined(window, seconds, size, [&] { return c.Pull(t, out); });
  bool flip = false;
  r.pushpull_gbps = Pipelined(window, seconds, size, [&] {
    flip = !flip;
    return flip ? c.Push(t, g) : c.Pull(t, out);
  });
  int n = 0;
  double t0 = Now();
  while (Now() - t0 < seconds / 2 || n < 3) {
    (void)c.Push(t, g).Wait();
    ++n;
  }
  r.rtt_us = (Now() - t0) / n * 1e6;
  return r;
}

double SparseRate(Client& c, bool push, uint32_t cols, double seconds) {
  TableSpec spec;
  spec.name = "bench_sparse_" + std::to_string(cols);
  spec.kind = TableKind::kSparse;
  spec.cols = cols;
  spec.optimizer = OptimizerKind::kSGD;
  spec.lr = 1e-6f;
  Table t;
  if (!c.CreateTable(spec, &t).ok()) std::exit(1);
  std::mt19937_64 rng(5);
  const int kKeys = 1000, kBatches = 64;
  std::vector<std::vector<uint64_t>> keys(kBatches, std::vector<uint64_t>(kKeys));
  for (auto& k : keys)
    for (auto& id : k) id = rng() % 1000000;
  std::vector<float> vals(static_cast<size_t>(kKeys) * cols, 1e-3f);
  // Create the rows (pushes do; this observer's reads would not).
  for (auto& k : keys) (void)c.Push(t, k, vals).Wait();
  int i = 0;
  double gb = Pipelined(16, seconds, static_cast<uint64_t>(kKeys), [&] {
    auto& k = keys[i++ % kBatches];
    return push ? c.Push(t, k, vals) : c.Pull(t, k, vals);
  });
  return gb * 1e9;  // "bytes" were keys
}

double SmallRate(Client& c, int window, double seconds) {
  TableSpec spec;
  spec.name = "bench_small_" + std::to_string(window);
  spec.rows = 1;
  spec.cols = 256;  // 1 KiB
  spec.lr = 1e-9f;
  Table t;
  if (!c.CreateTable(spec, &t).ok()) std::exit(1);
  std::vector<float> g(256, 1e-3f);
  double gb = Pipelined(window, seconds, 1, [&] { return c.Push(t, g); });
  return gb * 1e9;
}

void ApplyVsMemcpy(double seconds, double* apply_gbps, double* memcpy_gbps) {
  const size_t n = 16u << 20;  // 64 MiB of floats
  TableSpec spec;
  spec.name = "apply";
  spec.rows = n / 256;
  spec.cols = 256;
  spec.lr = 1e-9f;
  ServerTable t(spec, 1, {0});
  std::vector<float> g(n, 1e-3f), a(n, 1.0f), b(n);
  int reps = 0;
  double t0 = Now();
  while (Now() - t0 < seconds || reps < 2) {
    t.ApplyRange(0, spec.rows, g.data(), 1.0f);
    ++reps;
  }
  *apply_gbps = reps * n * 4.0 / (Now() - t0) / 1e9;
  reps = 0;
  t0 = Now();
  while (Now() - t0 < seconds || reps < 2) {
    std::memcpy(b.data(), a.data(), n * 4);
    a[reps % n] = b[(reps * 7) % n];  // keep the copy observable
    ++reps;
  }
  *memcpy_gbps = reps * n * 4.0 / (Now() - t0) / 1e9;
}


// --replicas N: dense push and pull throughput of two jobs side by side,
// each a coordinator, 2 servers and this client: one keeping one copy of
// each partition, one keeping N (every push forwarded to the backups, its
// reply once they applied it: docs/fault-tolerance.md, "Replicas").
int CompareReplicas(const std::string& server, const std::string& coord, const std::string& dir, uint32_t copies,
                    const std::vector<std::string>& sizes_kb, double seconds, int rounds) {
  struct Job {
    Child coord, servers[2];
    std::unique_ptr<Client> client;
  };
  auto start = [&](uint32_t r, Job* j) {
    const std::string name = dir + "/r" + std::to_string(r);
    j->coord.pid = SpawnProcess({coord, "--servers", "2", "--workers", "0", "--consistency", "async", "--replicas",
                                 std::to_string(r), "--endpoint-file", name + ".endpoint", "--log-level", "warn"},
                                name + "-coordinator.log");
    const std::string ep = WaitForFileLine(name + ".endpoint", 30);
    if (ep.empty()) return false;
    for (int i = 0; i < 2; ++i)
      j->servers[i].pid = SpawnProcess({server, "--coordinator", ep, "--log-level", "warn", "--max-request-mb", "64"},
                                       name + "-server" + std::to_string(i) + ".log");
    ClientOptions co;
    co.coordinator = ep;
    co.role = ClientRole::kObserver;
    Status s = Client::Connect(co, &j->client);
    if (!s.ok()) std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return s.ok();
  };
  Job one, many;
  if (!start(1, &one) || !start(copies, &many)) {
    std::fprintf(stderr, "error: the jobs did not start (logs in %s)\n", dir.c_str());
    return 1;
  }
  std::printf("shardps-bench --replicas %u: 2 servers each, async, loopback, %.2f s per figure, median of %d rounds "
              "(replicas 1 and %u alternating)\n\n", copies, seconds, rounds, copies);
  std::printf("%-8s | %12s %12s %8s | %12s %12s %8s\n", "dense", "push GB/s", "push GB/s", "", "pull GB/s",
              "pull GB/s", "");
  std::printf("%-8s | %12s %12s %8s | %12s %12s %8s\n", "size", "replicas 1", ("replicas " + std::to_string(copies)).c_str(),
              "ratio", "replicas 1", ("replicas " + std::to_string(copies)).c_str(), "ratio");
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  int ids = 0;
  for (const auto& kb : sizes_kb) {
    const size_t size = std::stoul(kb) << 10;
    std::vector<double> p1, pn, l1, ln, pr, lr;
    for (int r = 0; r < rounds; ++r) {
      const PsResult a = Shardps(*one.client, size, seconds, &ids), b = Shardps(*many.client, size, seconds, &ids);
      p1.push_back(a.push_gbps);
      pn.push_back(b.push_gbps);
      l1.push_back(a.pull_gbps);
      ln.push_back(b.pull_gbps);
      pr.push_back(b.push_gbps / a.push_gbps);
      lr.push_back(b.pull_gbps / a.pull_gbps);
    }
    std::printf("%-8s | %12.3f %12.3f %7.0f%% | %12.3f %12.3f %7.0f%%\n",
                (size >= (1u << 20) ? std::to_string(size >> 20) + " MB" : std::to_string(size >> 10) + " KB").c_str(),
                median(p1), median(pn), 100 * median(pr), median(l1), median(ln), 100 * median(lr));
  }
  (void)one.client->Close();
  (void)many.client->Close();
  return 0;
}

}  // namespace
}  // namespace shardps

int main(int argc, char** argv) {
  using namespace shardps;
  CLI::App app{"shardps benchmark: push/pull throughput and latency next to raw ZeroMQ"};
  bool quick = false;
  double seconds = 1.0;
  std::string bin_dir, raw_sink;
  app.add_flag("--quick", quick, "tiny run (checks that the benchmark works; figures are meaningless)");
  app.add_option("--seconds", seconds, "measuring time per figure")->check(CLI::Range(0.01, 60.0))->capture_default_str();
  int rounds = 3;
  app.add_option("--rounds", rounds, "dense sizes: rounds of raw and shardps, medians printed")->check(CLI::Range(1, 100))->capture_default_str();
  std::vector<std::string> sizes_kb = {"1", "64", "1024", "16384"};
  bool dense_only = false;
  app.add_option("--sizes-kb", sizes_kb, "dense sizes to measure, in KiB")->delimiter(',')->check(CLI::Range(1, 1 << 18))->capture_default_str();
  app.add_flag("--dense-only", dense_only, "skip the sparse, small-push and optimizer figures");
  bool small_only = false;
  app.add_flag("--small-only", small_only, "only the small-request figures (1 KB pushes: blocking, 16 and 64 in flight; raw ZeroMQ's round trip)")
      ->excludes("--dense-only");
  app.add_option("--window-mb", window_mb, "MiB in flight per stream (at least 2 messages, at most 64)")->check(CLI::Range(1, 4096))->capture_default_str();
  std::string server_cpus;
  app.add_option("--server-cpus", server_cpus, "pin the receivers, the server and the raw ZeroMQ sink alike, to these CPUs (shardps-server --cpus)");
  app.add_option("--bin-dir", bin_dir, "directory with shardps-server and shardps-coordinator");
  app.add_option("--keys", keys_dir, "security on: a key directory (shardps-keygen DIR): CURVE on every connection, raw ZeroMQ included")->check(CLI::ExistingDirectory);
  app.add_option("--raw-sink", raw_sink, "(internal) run as the raw ZeroMQ sink, writing its endpoint here");
  uint32_t replicas = 0;
  app.add_option("--replicas", replicas, "instead: dense push and pull of a job with this many copies of each partition against one with one copy, side by side (2 servers each)")->check(CLI::Range(2, 2));
  CLI11_PARSE(app, argc, argv);
  StopSpawnedOnSignal();  // Ctrl-C leaves no helper processes behind
  if (!raw_sink.empty()) {
    DieWithParentIfAsked();  // the sink ends with the benchmark, however it ends
    return RawSink(raw_sink, server_cpus);
  }
  if (!server_cpus.empty()) {
    // Checked here, so that a bad list is refused before anything starts.
    cpu_set_t mine;
    if (sched_getaffinity(0, sizeof(mine), &mine) == 0) {
      Status s = PinToCpus(server_cpus);
      if (!s.ok()) {
        std::fprintf(stderr, "error: --server-cpus: %s\n", s.message().c_str());
        return 2;
      }
      sched_setaffinity(0, sizeof(mine), &mine);  // the bench itself is not pinned
    }
  }
  if (quick) seconds = 0.05, rounds = 1;
  const std::string self = SelfPath();
  if (self.empty()) return 1;
  if (bin_dir.empty()) bin_dir = SiblingServerDir();
  const std::string server = bin_dir + "/shardps-server", coord = bin_dir + "/shardps-coordinator";
  if (access(server.c_str(), X_OK) != 0 || access(coord.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "error: no shardps-server/shardps-coordinator in '%s' (use --bin-dir)\n", bin_dir.c_str());
    return 2;
  }
  TuneAllocatorForLargeMessages();
  char tmpl[] = "/tmp/shardps-bench-XXXXXX";
  if (!mkdtemp(tmpl)) return 1;
  const std::string dir = tmpl;
  if (replicas > 0) {
    const int rc = CompareReplicas(server, coord, dir, replicas, sizes_kb, seconds, rounds);
    if (rc == 0 && std::system(("rm -rf '" + dir + "'").c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir.c_str());
    return rc;
  }

  Child sink;
  std::vector<std::string> sink_argv = {self, "--raw-sink", dir + "/sink.endpoint"};
  if (!server_cpus.empty()) sink_argv.insert(sink_argv.end(), {"--server-cpus", server_cpus});
  if (!keys_dir.empty()) sink_argv.insert(sink_argv.end(), {"--keys", keys_dir});
  sink.pid = SpawnProcess(sink_argv, dir + "/sink.log");
  const std::string sink_ep = WaitForFileLine(dir + "/sink.endpoint", 30);
  Child cproc, sproc;
  // With keys the client is a worker (async: it never waits on a clock);
  // an observer key may not push.
  std::vector<std::string> coord_argv = {coord, "--servers", "1", "--workers", keys_dir.empty() ? "0" : "1",
                                         "--consistency", "async", "--endpoint-file", dir + "/coord.endpoint",
                                         "--log-level", "warn"};
  if (!keys_dir.empty()) coord_argv.insert(coord_argv.end(), {"--key", keys_dir + "/server.key"});
  cproc.pid = SpawnProcess(coord_argv, dir + "/coordinator.log");
  const std::string coord_ep = WaitForFileLine(dir + "/coord.endpoint", 30);
  if (sink_ep.empty() || coord_ep.empty()) {
    std::fprintf(stderr, "error: helper processes did not start (logs in %s)\n", dir.c_str());
    return 1;
  }
  std::vector<std::string> server_argv = {server, "--coordinator", coord_ep, "--log-level", "warn", "--max-request-mb", "64"};
  if (!server_cpus.empty()) server_argv.insert(server_argv.end(), {"--cpus", server_cpus});
  if (!keys_dir.empty()) server_argv.insert(server_argv.end(), {"--key", keys_dir + "/server.key"});
  sproc.pid = SpawnProcess(server_argv, dir + "/server.log");
  ClientOptions co;
  co.coordinator = coord_ep;
  co.role = ClientRole::kObserver;
  if (!keys_dir.empty()) {
    co.role = ClientRole::kWorker;
    co.key_file = keys_dir + "/worker.key";
  }
  std::unique_ptr<Client> client;
  Status s = Client::Connect(co, &client);
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return 1;
  }

  std::printf("shardps-bench: 1 server process, 1 client process, loopback, %.2f s per figure, dense: median of %d rounds, "
              "%d MiB in flight%s%s%s%s\n\n",
              seconds, rounds, window_mb, server_cpus.empty() ? "" : ", server and raw sink pinned to CPUs ",
              server_cpus.c_str(), keys_dir.empty() ? "" : ", CURVE on every connection (--keys)",
              quick ? " (--quick: figures are not meaningful)" : "");
  std::printf("%-8s | %9s %9s %9s %9s %9s | %9s %9s | %6s %6s %6s\n", "dense", "push", "pull", "pull into", "push+pull",
              "rtt", "raw zmq", "raw rtt", "push/", "pull/", "pull");
  std::printf("%-8s | %9s %9s %9s %9s %9s | %9s %9s | %6s %6s %6s\n", "size", "GB/s", "GB/s", "array", "GB/s", "us",
              "GB/s", "us", "raw", "raw", "array/");
  std::printf("%-8s | %9s %9s %9s %9s %9s | %9s %9s | %6s %6s %6s\n", "", "", "", "GB/s", "", "", "", "", "", "",
              "raw");
  int ids = 0;
  if (small_only) sizes_kb = {"1"};
  // Each size is measured `rounds` times, raw and shardps one after the
  // other; the figures are medians, and each ratio is the median of the
  // per-round ratios (this machine's throughput drifts between runs).
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  for (const auto& kb : sizes_kb) {
    const size_t size = std::stoul(kb) << 10;
    std::vector<double> push, pull, pull_copy, pp, rtt, raw_gbps, raw_rtt, push_ratio, pull_ratio, copy_ratio;
    for (int r = 0; r < rounds; ++r) {
      RawResult raw = RawZmq(sink_ep, size, seconds);
      PsResult ps = Shardps(*client, size, seconds, &ids);
      push.push_back(ps.push_gbps);
      pull.push_back(ps.pull_gbps);
      pull_copy.push_back(ps.pull_copy_gbps);
      copy_ratio.push_back(ps.pull_copy_gbps / raw.gbps);
      pp.push_back(ps.pushpull_gbps);
      rtt.push_back(ps.rtt_us);
      raw_gbps.push_back(raw.gbps);
      raw_rtt.push_back(raw.rtt_us);
      push_ratio.push_back(ps.push_gbps / raw.gbps);
      pull_ratio.push_back(ps.pull_gbps / raw.gbps);
    }
    const std::string label = size >= (1u << 20) && size % (1u << 20) == 0 ? std::to_string(size >> 20) + " MB"
                                                                          : std::to_string(size >> 10) + " KB";
    std::printf("%-8s | %9.3f %9.3f %9.3f %9.3f %9.1f | %9.3f %9.1f | %5.0f%% %5.0f%% %5.0f%%\n", label.c_str(), median(push),
                median(pull), median(pull_copy), median(pp), median(rtt), median(raw_gbps), median(raw_rtt),
                100 * median(push_ratio), 100 * median(pull_ratio), 100 * median(copy_ratio));
  }
  if (dense_only) return 0;
  if (!small_only) std::printf("\nsparse, 1000 random ids per request, 16 in flight:\n");
  for (uint32_t cols : {16u, 64u}) {
    if (small_only) break;
    double push = SparseRate(*client, true, cols, seconds), pull = SparseRate(*client, false, cols, seconds);
    std::printf("  width %2u: push %.2f M keys/s (%.2f GB/s), pull %.2f M keys/s (%.2f GB/s)\n", cols, push / 1e6,
                push * cols * 4 / 1e9, pull / 1e6, pull * cols * 4 / 1e9);
  }
  double blocking = SmallRate(*client, 1, seconds), p16 = SmallRate(*client, 16, seconds),
         p64 = SmallRate(*client, 64, seconds);
  std::printf("\nsmall 1 KB pushes: blocking %.0f /s; 16 in flight %.0f /s (%.1fx); 64 in flight %.0f /s (%.1fx)\n",
              blocking, p16, p16 / blocking, p64, p64 / blocking);
  double apply = 0, copy = 0;
  if (!small_only) ApplyVsMemcpy(seconds, &apply, &copy);
  if (!small_only) std::printf("optimizer apply (SGD, 64 MiB): %.2f GB/s of gradient; memcpy %.2f GB/s (%.0f%%)\n", apply, copy,
              100 * apply / copy);
  (void)client->Close();
  std::string rm = "rm -rf '" + dir + "'";
  if (std::system(rm.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir.c_str());
  return 0;
}
