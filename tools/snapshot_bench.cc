// shardps-snapshot-bench: snapshot write throughput next to the disk's
// sequential write bandwidth (measured in the same run), the pause a
// snapshot causes to pushes and pulls, and restore time next to the time
// to read the snapshot's files.
//
//   shardps-snapshot-bench [--mib 1024] [--dir DIR] [--quick]
//   shardps-snapshot-bench --changed 0.05 [--mib 1024]: an embedding table
//     (dim 64, Adagrad) snapshotted in full, then after pushes to that
//     fraction of its rows: the second snapshot's bytes next to the
//     first's, and each server's memory growth during each cut (peak
//     resident set over the one before) next to its table's memory, with
//     pushes going on while the cuts are written.
#include <CLI/CLI.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <mutex>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "common/base/process.h"
#include "common/codec/wire.h"
#include "server/snapshot/snapshot.h"
#include "shardps/client.h"

namespace shardps {
namespace {

using Sec = std::chrono::duration<double>;
double Now() { return Sec(std::chrono::steady_clock::now().time_since_epoch()).count(); }


struct Cluster {
  std::vector<pid_t> pids;
  std::string coordinator;
  ~Cluster() { Stop(); }
  void Stop() {
    for (pid_t p : pids) kill(p, SIGTERM);
    for (pid_t p : pids) ReapSpawned(p, false);
    pids.clear();
  }
  bool Start(const std::string& bin, const std::string& dir, const std::string& snaps, bool restore,
             uint32_t full_every = 8) {
    const std::string ep = dir + "/coord.endpoint";
    std::remove(ep.c_str());
    std::vector<std::string> c = {bin + "/shardps-coordinator", "--servers", "2", "--workers", "0", "--consistency", "async",
                                  "--endpoint-file", ep, "--snapshot-dir", snaps, "--keep-snapshots", "2",
                                  "--snapshot-full-every", std::to_string(full_every)};
    if (restore) c.push_back("--restore");
    pids.push_back(SpawnProcess(c, dir + "/coordinator.log"));
    coordinator = WaitForFileLine(ep, 120);
    if (coordinator.empty()) return false;
    for (int i = 0; i < 2; ++i)
      pids.push_back(SpawnProcess({bin + "/shardps-server", "--coordinator", coordinator, "--rank", std::to_string(i),
                                   "--max-request-mb", "64"},
                                  dir + "/server" + std::to_string(i) + (restore ? "-restore" : "") + ".log"));
    return true;
  }
};

Status Trigger(const std::string& coordinator) {
  zmq::context_t ctx(1);
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.connect(coordinator);
  flatbuffers::FlatBufferBuilder fbb;
  wire::Fields f;
  f.type = wire::MsgType::SnapshotNow;
  f.request_id = 1;
  s.send(wire::EncodeSimple(fbb, f), zmq::send_flags::none);
  zmq::pollitem_t items[] = {{s.handle(), 0, ZMQ_POLLIN, 0}};
  if (zmq::poll(items, 1, std::chrono::seconds(600)) == 0) return Status::Timeout("snapshot not done within 600 s");
  zmq::message_t m;
  (void)s.recv(m);
  std::vector<uint64_t> scratch;
  const wire::Header* h;
  Status st = wire::ParseHeader(m, scratch, &h);
  return st.ok() ? wire::ReplyStatus(h) : st;
}

// Resident memory of `pid`, bytes (0: unknown).
uint64_t Resident(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;
  return 0;
}

// Triggers a snapshot while sampling the servers' resident memory every
// 2 ms: each server's peak growth over its memory before, bytes.
Status SnapshotGrowth(const Cluster& c, std::vector<uint64_t>* growth) {
  std::vector<pid_t> servers(c.pids.begin() + 1, c.pids.end());
  std::vector<uint64_t> before, peak;
  for (pid_t p : servers) before.push_back(Resident(p));
  peak = before;
  std::atomic<bool> done{false};
  std::thread sampler([&] {
    while (!done) {
      for (size_t i = 0; i < servers.size(); ++i) peak[i] = std::max(peak[i], Resident(servers[i]));
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  Status s = Trigger(c.coordinator);
  done = true;
  sampler.join();
  growth->clear();
  for (size_t i = 0; i < servers.size(); ++i) growth->push_back(peak[i] - before[i]);
  return s;
}

int Fail(const Status& s, const std::string& what) {
  std::fprintf(stderr, "error: %s: %s\n", what.c_str(), s.ToString().c_str());
  return 1;
}

// The --changed run (see the top of this file).
int RunChanged(const std::string& bin, const std::string& dir, uint64_t mib, double fraction, bool quick) {
  const std::string snaps = dir + "/snaps";
  Cluster cluster;
  if (!cluster.Start(bin, dir, snaps, false)) return Fail(Status::Internal("the cluster did not start"), dir);
  std::vector<uint64_t> empty;
  for (size_t i = 1; i < cluster.pids.size(); ++i) empty.push_back(Resident(cluster.pids[i]));
  ClientOptions co;
  co.coordinator = cluster.coordinator;
  co.role = ClientRole::kObserver;
  std::unique_ptr<Client> client;
  Status s = Client::Connect(co, &client);
  if (!s.ok()) return Fail(s, "connect");
  TableSpec spec;
  spec.name = "emb";
  spec.kind = TableKind::kSparse;
  spec.cols = 64;
  spec.optimizer = OptimizerKind::kAdagrad;
  spec.lr = 0.01f;
  spec.init = InitKind::kUniform;
  spec.init_a = -0.01f;
  spec.init_b = 0.01f;
  Table t;
  if (!(s = client->CreateTable(spec, &t)).ok()) return Fail(s, "create the table");
  const uint64_t row_bytes = 8 + 4 + 2 * 64 * 4 + 8;  // id, stamp, values, Adagrad state, index
  const uint64_t n = (mib << 20) / row_bytes;
  const size_t batch = 16384;
  auto push = [&](const std::vector<uint64_t>& ids) {
    std::vector<float> g(ids.size() * 64, 0.01f);
    return client->Push(t, ids, g).Wait();
  };
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < n && s.ok(); i += batch) {
    ids.clear();
    for (uint64_t k = i; k < std::min(n, i + batch); ++k) ids.push_back(k * 0x9E3779B97F4A7C15ull >> 8);
    s = push(ids);
  }
  if (!s.ok()) return Fail(s, "fill the table");
  std::vector<uint64_t> table_bytes;
  for (size_t i = 1; i < cluster.pids.size(); ++i) table_bytes.push_back(Resident(cluster.pids[i]) - empty[i - 1]);
  // Pushes to random rows of `set` while a cut is written (what training does).
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> during{0};
  auto load = [&](const std::vector<uint64_t>* set) {
    std::mt19937_64 rng(7);
    std::vector<uint64_t> some(512);
    while (!stop) {
      for (auto& id : some) id = set ? (*set)[rng() % set->size()] : (rng() % n) * 0x9E3779B97F4A7C15ull >> 8;
      if (!push(some).ok()) return;
      during += some.size();
    }
  };
  auto cut_with_load = [&](const std::vector<uint64_t>* set, std::vector<uint64_t>* growth, uint64_t* pushed) {
    stop = false;
    during = 0;
    std::thread l(load, set);
    Status st = SnapshotGrowth(cluster, growth);
    stop = true;
    l.join();
    *pushed = during;
    return st;
  };
  // A: every row, with pushes to any row meanwhile. B: what those pushes
  // changed (the base of C). C: after pushes to `fraction` of the rows,
  // with pushes to those rows meanwhile.
  std::vector<uint64_t> full_growth, changed_growth, unused;
  uint64_t during_full = 0, during_changed = 0;
  if (!(s = cut_with_load(nullptr, &full_growth, &during_full)).ok()) return Fail(s, "the full snapshot");
  if (!(s = SnapshotGrowth(cluster, &unused)).ok()) return Fail(s, "the second snapshot");
  std::mt19937_64 rng(3);
  const uint64_t changed = std::max<uint64_t>(1, static_cast<uint64_t>(fraction * static_cast<double>(n)));
  std::vector<uint64_t> pick(n);
  for (uint64_t i = 0; i < n; ++i) pick[i] = i;
  for (uint64_t i = 0; i < changed; ++i) std::swap(pick[i], pick[i + rng() % (n - i)]);
  pick.resize(changed);
  for (auto& id : pick) id = id * 0x9E3779B97F4A7C15ull >> 8;
  for (uint64_t i = 0; i < changed && s.ok(); i += batch) {
    ids.assign(pick.begin() + i, pick.begin() + std::min(changed, i + batch));
    s = push(ids);
  }
  if (!s.ok()) return Fail(s, "change rows");
  if (!(s = cut_with_load(&pick, &changed_growth, &during_changed)).ok()) return Fail(s, "the snapshot of what changed");
  std::vector<snapshot::Listing> all;
  if (!(s = snapshot::List(snaps, &all)).ok() || all.size() < 3) return Fail(s, "list " + snaps);
  const auto& a = all[all.size() - 3];
  const auto& c = all.back();
  uint64_t stored = 0;
  snapshot::Manifest m;
  if (snapshot::ReadManifest(c.dir, &m).ok())
    for (const auto& p : m.parts) stored += p.rows;
  (void)client->Close();
  cluster.Stop();
  // What each server held for each cut, by its own count (its log).
  std::vector<std::vector<uint64_t>> held(2);
  for (int i = 0; i < 2; ++i) {
    std::ifstream f(dir + "/server" + std::to_string(i) + ".log");
    std::string line;
    const std::string key = "held for the cut at most ";
    while (std::getline(f, line))
      if (auto at = line.find(key); at != std::string::npos) held[i].push_back(std::strtoull(line.c_str() + at + key.size(), nullptr, 10));
  }
  auto held_at = [&](int i, size_t k) { return k < held[i].size() ? held[i][k] / 1048576.0 : -1.0; };
  std::printf("shardps-snapshot-bench --changed %.3f: an embedding table of %llu rows (dim 64, Adagrad; %llu MiB) "
              "on 2 servers%s\n", fraction, static_cast<unsigned long long>(n), static_cast<unsigned long long>(mib),
              quick ? " (--quick: figures not meaningful)" : "");
  std::printf("  full snapshot: %llu bytes (%s), %llu rows pushed while it was written\n",
              static_cast<unsigned long long>(a.bytes), a.full ? "full" : "NOT FULL",
              static_cast<unsigned long long>(during_full));
  std::printf("  after pushes to %.1f %% of the rows: %llu bytes (%s), %llu rows stored = %.2f %% of the rows; "
              "%.2f %% of the full snapshot's bytes (%llu pushes to those rows while it was written)\n",
              100 * fraction, static_cast<unsigned long long>(c.bytes), c.full ? "FULL" : "what changed",
              static_cast<unsigned long long>(stored), 100.0 * static_cast<double>(stored) / static_cast<double>(n),
              100.0 * c.bytes / std::max<uint64_t>(1, a.bytes), static_cast<unsigned long long>(during_changed));
  for (size_t i = 0; i < table_bytes.size(); ++i)
    std::printf("  server %zu: table memory %.1f MiB; the full cut: resident +%.1f MiB (%.2f %%), held %.1f MiB; the cut "
                "of what changed: resident +%.1f MiB, held %.1f MiB (%.2f %%)\n",
                i, table_bytes[i] / 1048576.0, full_growth[i] / 1048576.0,
                100.0 * full_growth[i] / std::max<uint64_t>(1, table_bytes[i]), held_at(static_cast<int>(i), 0),
                changed_growth[i] / 1048576.0, held_at(static_cast<int>(i), 2),
                100.0 * held_at(static_cast<int>(i), 2) * 1048576.0 / std::max<uint64_t>(1, table_bytes[i]));
  return 0;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace
}  // namespace shardps

int main(int argc, char** argv) {
  using namespace shardps;
  CLI::App app{"shardps snapshot benchmark"};
  uint64_t mib = 1024;
  std::string dir;
  bool quick = false;
  int repeats = 3;
  app.add_option("--mib", mib, "model size in MiB (over 2 servers)")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("--dir", dir, "where to write (default: a new directory under /tmp)");
  app.add_option("--repeats", repeats, "snapshots measured")->check(CLI::Range(1, 100))->capture_default_str();
  app.add_flag("--quick", quick, "a 16 MiB model (checks that it works)");
  double changed = 0;
  app.add_option("--changed", changed, "an embedding table: a snapshot after pushes to this fraction of its rows (see above)")
      ->check(CLI::Range(0.0, 1.0));
  CLI11_PARSE(app, argc, argv);
  StopSpawnedOnSignal();  // Ctrl-C leaves no helper processes behind
  if (quick) mib = 16, repeats = 1;
  const std::string bin = SiblingServerDir();
  if (dir.empty()) {
    char tmpl[] = "/tmp/shardps-snapbench-XXXXXX";
    if (!mkdtemp(tmpl)) return 1;
    dir = tmpl;
  }
  if (changed > 0) {
    const int rc = RunChanged(bin, dir, mib, changed, quick);
    if (std::system(("rm -rf '" + dir + "'").c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir.c_str());
    return rc;
  }
  const std::string snaps = dir + "/snaps";
  const uint64_t bytes = mib << 20;

  // 1. The disk's sequential write bandwidth: the same bytes, 8 MiB writes, fdatasync.
  double disk_gbps;
  {
    std::vector<char> block(8 << 20, 1);
    const std::string path = dir + "/dd.bin";
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
      std::fprintf(stderr, "error: cannot write in %s\n", dir.c_str());
      return 1;
    }
    double t0 = Now();
    for (uint64_t done = 0; done < bytes; done += block.size())
      if (write(fd, block.data(), std::min<uint64_t>(block.size(), bytes - done)) < 0) return 1;
    fdatasync(fd);
    disk_gbps = bytes / (Now() - t0) / 1e9;
    close(fd);
    std::remove(path.c_str());
  }

  // 2. A cluster holding a model of `bytes`, and a client measuring latency.
  Cluster cluster;
  if (!cluster.Start(bin, dir, snaps, false)) {
    std::fprintf(stderr, "error: the cluster did not start (logs in %s)\n", dir.c_str());
    return 1;
  }
  ClientOptions co;
  co.coordinator = cluster.coordinator;
  co.role = ClientRole::kObserver;
  std::unique_ptr<Client> client;
  Status s = Client::Connect(co, &client);
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return 1;
  }
  TableSpec spec;
  spec.name = "model";
  spec.cols = 256;
  spec.rows = bytes / 4 / spec.cols;
  spec.optimizer = OptimizerKind::kSGD;
  spec.lr = 1e-6f;
  Table t;
  if (!(s = client->CreateTable(spec, &t)).ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return 1;
  }
  std::atomic<bool> stop{false};
  struct Sample {
    double at, latency;
  };
  std::vector<Sample> samples;  // guarded by samples_mu (the load thread appends)
  std::mutex samples_mu;
  std::thread load([&] {
    std::mt19937_64 rng(1);
    std::vector<float> row(256), g(256, 1e-3f);
    while (!stop) {
      const uint64_t r = rng() % spec.rows;
      double t0 = Now();
      Request q = (rng() & 1) ? client->Pull(t, RowRange{r, r + 1}, row) : client->Push(t, RowRange{r, r + 1}, g);
      if (!q.Wait().ok()) break;
      std::lock_guard<std::mutex> lock(samples_mu);
      samples.push_back({t0, Now() - t0});
    }
  });
  std::this_thread::sleep_for(std::chrono::seconds(1));
  std::vector<double> write_gbps, pauses;
  for (int i = 0; i < repeats; ++i) {
    double t0 = Now();
    if (!(s = Trigger(cluster.coordinator)).ok()) {
      std::fprintf(stderr, "error: snapshot: %s\n", s.ToString().c_str());
      stop = true;
      load.join();
      return 1;
    }
    double t1 = Now();
    std::vector<snapshot::Listing> all;
    if (!(s = snapshot::List(snaps, &all)).ok() || all.empty()) {
      std::fprintf(stderr, "error: the snapshots in %s: %s\n", snaps.c_str(),
                   s.ok() ? "none, though one was reported taken" : s.ToString().c_str());
      stop = true;
      load.join();
      return 1;
    }
    write_gbps.push_back(all.back().bytes / (t1 - t0) / 1e9);
    // The longest a request was delayed while this snapshot was taken.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    double worst = 0;
    std::lock_guard<std::mutex> lock(samples_mu);
    for (const auto& sm : samples)
      if (sm.at + sm.latency >= t0 && sm.at <= t1) worst = std::max(worst, sm.latency);
    pauses.push_back(worst * 1000);
  }
  stop = true;
  load.join();
  std::vector<double> base;
  for (const auto& sm : samples) base.push_back(sm.latency * 1000);
  (void)client->Close();
  client.reset();
  cluster.Stop();

  // 3. Restore next to reading the files.
  std::vector<snapshot::Listing> all;
  if (!(s = snapshot::List(snaps, &all)).ok() || all.empty()) {
    std::fprintf(stderr, "error: the snapshots in %s: %s\n", snaps.c_str(), s.ok() ? "none" : s.ToString().c_str());
    return 1;
  }
  const std::string newest = all.back().dir;
  snapshot::Manifest m;
  if (!(s = snapshot::ReadManifest(newest, &m)).ok()) {
    std::fprintf(stderr, "error: %s: %s\n", newest.c_str(), s.ToString().c_str());
    return 1;
  }
  double t0 = Now();
  std::vector<char> buf(8 << 20);
  for (const auto& f : m.files) {
    int fd = open((newest + "/" + f.name).c_str(), O_RDONLY);
    while (read(fd, buf.data(), buf.size()) > 0) {
    }
    close(fd);
  }
  const double read_s = Now() - t0;
  t0 = Now();
  Cluster restored;
  if (!restored.Start(bin, dir, snaps, true)) return 1;
  co.coordinator = restored.coordinator;
  if (!(s = Client::Connect(co, &client)).ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return 1;
  }
  std::vector<float> row(256);
  if (!(s = client->GetTable("model", &t)).ok() || !(s = client->Pull(t, RowRange{0, 1}, row).Wait()).ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return 1;
  }
  const double restore_s = Now() - t0;
  (void)client->Close();

  std::printf("shardps-snapshot-bench: %llu MiB model on 2 servers, snapshots in %s%s\n", static_cast<unsigned long long>(mib),
              snaps.c_str(), quick ? " (--quick: figures not meaningful)" : "");
  std::printf("  disk sequential write (8 MiB writes + fdatasync): %.2f GB/s\n", disk_gbps);
  std::printf("  snapshot write: median %.2f GB/s over %d snapshots = %.0f%% of the disk\n", Median(write_gbps), repeats,
              100 * Median(write_gbps) / disk_gbps);
  std::printf("  push/pull delay during a snapshot: median of the longest per snapshot %.1f ms (median request %.2f ms)\n",
              Median(pauses), Median(base));
  std::printf("  restore (start to first answered pull): %.2f s; reading the files: %.2f s; ratio %.2fx\n", restore_s, read_s,
              restore_s / read_s);
  restored.Stop();
  std::string rm = "rm -rf '" + dir + "'";
  if (std::system(rm.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir.c_str());
  return 0;
}
