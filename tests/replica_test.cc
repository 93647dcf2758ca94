// Replicas (docs/fault-tolerance.md, "Replicas"), against a real coordinator
// and real servers on loopback: with two copies of every replica group, a
// server killed with SIGKILL in the middle of training is failed over to
// its backups — no process is restarted, nothing rolls back — and
//  - under sync, the model at the end is bit for bit the model of the same
//    job without the kill;
//  - under bounded staleness, every push acknowledged to a worker is
//    applied exactly once.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "server/snapshot/snapshot.h"
#include "shardps/client.h"
#include "tests/cluster.h"
#include "tests/etcd_process.h"
#include "tests/table_spec.h"

namespace shardps {
namespace {

using namespace std::chrono_literals;
using testing::ClusterOptions;
using testing::LocalCluster;

constexpr int kWorkers = 2;
constexpr uint64_t kRows = 512;  // 16 KiB of values: parts sent from the workers' arrays (borrowed)
constexpr uint32_t kCols = 8;
constexpr int kClocks = 60;

ClusterOptions Replicated(const std::string& consistency) {
  ClusterOptions o;
  o.servers = 2;
  o.workers = kWorkers;
  o.consistency = consistency;
  o.staleness = consistency == "bounded" ? 2 : 0;
  o.partitions = 16;
  o.heartbeat_timeout_ms = 1500;
  o.coordinator_args = {"--replicas", "2"};
  return o;
}

// What a worker learns from a step: the gradient of a made-up loss of the
// values it pulled, so that a wrong value anywhere changes every later step.
void Gradient(const std::vector<float>& w, int rank, int clock, std::vector<float>* g) {
  g->resize(w.size());
  for (size_t i = 0; i < w.size(); ++i)
    (*g)[i] = 0.5f * w[i] - std::sin(0.01f * static_cast<float>(i) + 0.1f * clock) * (rank + 1) * 0.01f;
}

// Trains kClocks clocks on a dense table spanning both groups and on a few
// ids of a sparse one, as worker `rank`; `clock_seen` follows its clock.
// With `hold`, it waits before each clock until that clock is below *hold
// (the test does something between two clocks; the model is the same).
void Train(const LocalCluster& c, int rank, std::atomic<int>* clock_seen, std::vector<float>* final_w,
           std::vector<float>* final_e, const std::atomic<int>* hold = nullptr) {
  auto ps = testing::ConnectClient(c, ClientRole::kWorker, rank);
  ASSERT_TRUE(ps);
  Table w, e;
  ASSERT_TRUE(ps->CreateTable(testing::Dense("w", kRows, kCols).Uniform(-0.5f, 0.5f).Seed(7).Adam(0.01f), &w).ok());
  ASSERT_TRUE(ps->CreateTable(testing::Sparse("e", kCols).Adagrad(0.1f), &e).ok());
  std::vector<float> vw(kRows * kCols), gw, ve(4 * kCols), ge;
  const std::vector<uint64_t> ids = {3, 1000003, uint64_t(rank) * 77 + 5, 424242};
  for (int clock = 0; clock < kClocks; ++clock) {
    if (hold) ASSERT_TRUE(testing::WaitFor([&] { return clock < hold->load(); }, 300s)) << "held at clock " << clock;
    Status s = ps->Pull(w, vw).Wait();
    ASSERT_TRUE(s.ok()) << "worker " << rank << " clock " << clock << ": " << s.ToString();
    s = ps->Pull(e, ids, ve).Wait();
    ASSERT_TRUE(s.ok()) << s.ToString();
    Gradient(vw, rank, clock, &gw);
    Gradient(ve, rank, clock, &ge);
    Request pw = ps->Push(w, gw), pe = ps->Push(e, ids, ge);
    ASSERT_TRUE(pw.Wait().ok() && pe.Wait().ok());
    s = ps->Clock();
    ASSERT_TRUE(s.ok()) << s.ToString();
    clock_seen->store(clock + 1);
  }
  if (final_w) {
    final_w->resize(kRows * kCols);
    ASSERT_TRUE(ps->Pull(w, *final_w).Wait().ok());
    final_e->resize(4 * kCols);
    const std::vector<uint64_t> all = {3, 1000003, 5, 82};
    ASSERT_TRUE(ps->Pull(e, all, *final_e).Wait().ok());
  }
  ASSERT_TRUE(ps->Close().ok());
}

constexpr int kTheCoordinator = -2;

// Runs the job; kills server `kill` (SIGKILL) once worker 0 is past half
// way (-1: no kill; kTheCoordinator: the leading coordinator, the job's
// state in `etcd` with a standby). The final dense and sparse values.
void RunSync(LocalCluster& c, int kill, std::vector<float>* w, std::vector<float>* e,
             std::vector<std::string> coordinator_args = {}, const std::string& etcd = "") {
  ClusterOptions o = Replicated("sync");
  o.etcd = etcd;
  o.coordinator_args.insert(o.coordinator_args.end(), coordinator_args.begin(), coordinator_args.end());
  ASSERT_TRUE(c.Start(o).ok());
  std::atomic<int> clocks[kWorkers] = {};
  // (A coordinator killed: the workers wait at 3/4 for the standby to lead,
  // so that the rest of the job runs with it.)
  std::atomic<int> hold{kill == kTheCoordinator ? kClocks * 3 / 4 : kClocks};
  std::vector<std::thread> workers;
  for (int r = 0; r < kWorkers; ++r)
    workers.emplace_back([&, r] { Train(c, r, &clocks[r], r == 0 ? w : nullptr, r == 0 ? e : nullptr, &hold); });
  if (kill != -1) {
    ASSERT_TRUE(testing::WaitFor([&] { return clocks[0].load() >= kClocks / 2; }, 120s))
        << "worker 0 did not reach clock " << kClocks / 2;
    if (kill == kTheCoordinator) {
      c.KillCoordinator(SIGKILL);
      const std::string led = c.dir() + "/standby.endpoint";
      EXPECT_TRUE(testing::WaitFor([&] { return access(led.c_str(), R_OK) == 0; }, 60s)) << "the standby did not lead";
      hold = kClocks;
    } else {
      c.KillServer(kill, SIGKILL);
    }
    // Mid-training: under sync no worker can finish without the groups of the dead server.
    EXPECT_LT(clocks[0].load(), kClocks);
  }
  for (auto& t : workers) t.join();
}

// Three servers, three copies of each group (a chain: group g on g, g+1,
// g+2): kills the servers in `kills` one after the other, each once worker
// 0 is another third of the way (none: the job without faults).
void RunThreeCopies(LocalCluster& c, const std::vector<int>& kills, std::vector<float>* w, std::vector<float>* e) {
  ClusterOptions o = Replicated("sync");
  o.servers = 3;
  o.coordinator_args = {"--replicas", "3"};
  ASSERT_TRUE(c.Start(o).ok());
  std::atomic<int> clocks[kWorkers] = {};
  std::vector<std::thread> workers;
  for (int r = 0; r < kWorkers; ++r)
    workers.emplace_back([&, r] { Train(c, r, &clocks[r], r == 0 ? w : nullptr, r == 0 ? e : nullptr); });
  for (size_t k = 0; k < kills.size(); ++k) {
    const int at = static_cast<int>(kClocks * (k + 1) / (kills.size() + 1));
    ASSERT_TRUE(testing::WaitFor([&] { return clocks[0].load() >= at; }, 120s)) << "worker 0 did not reach clock " << at;
    c.KillServer(kills[k], SIGKILL);
  }
  for (auto& t : workers) t.join();
}

// Re-replication: `servers` servers, two copies of each group. Worker 0
// pauses at clock 20: with `replace`, server 1 is killed and a new server
// started in its place, filled with copies while the workers train clocks
// 20..40, and at 40 server 0 is killed, so the job ends on the copies the
// replacement was filled with; with `drain`, server `drain` is drained
// (shardps-ctl drain-server) while the workers train on, and exits 0.
// Neither: the job without them.
void RunMoves(LocalCluster& c, int servers, bool replace, int drain, std::vector<float>* w, std::vector<float>* e,
              const std::string& consistency = "sync") {
  ClusterOptions o = Replicated(consistency);
  o.servers = servers;
  ASSERT_TRUE(c.Start(o).ok());
  std::atomic<int> clocks[kWorkers] = {};
  std::atomic<int> hold{replace || drain >= 0 ? 20 : kClocks};
  std::vector<std::thread> workers;
  for (int r = 0; r < kWorkers; ++r)
    workers.emplace_back([&, r] { Train(c, r, &clocks[r], r == 0 ? w : nullptr, r == 0 ? e : nullptr, &hold); });
  auto wait_log = [&](const std::string& name, const std::string& text, int count = 1) {
    std::string log;
    const bool seen = testing::WaitFor(
        [&] {
          log = c.Log(name);
          int n = 0;
          for (size_t at = log.find(text); at != std::string::npos; at = log.find(text, at + 1)) ++n;
          return n >= count;
        },
        120s);
    EXPECT_TRUE(seen) << name << " never logged '" << text << "' " << count << " time(s):\n" << log;
    return seen;
  };
  if (replace) {
    ASSERT_TRUE(testing::WaitFor([&] { return clocks[0].load() >= 20; }, 120s));
    c.KillServer(1, SIGKILL);
    hold = 40;  // training goes on while the replacement is filled
    ASSERT_TRUE(wait_log("coordinator", "fail-over to shard map"));
    ASSERT_TRUE(c.StartServer(1).ok());
    // Both groups (each left with one copy on server 0) are filled into it.
    ASSERT_TRUE(wait_log("coordinator", "holds a full copy", 2));
    ASSERT_TRUE(testing::WaitFor([&] { return clocks[0].load() >= 40; }, 120s));
    c.KillServer(0, SIGKILL);
    hold = kClocks;
  }
  if (drain >= 0) {
    ASSERT_TRUE(testing::WaitFor([&] { return clocks[0].load() >= 20; }, 120s));
    std::string out;
    ASSERT_EQ(testing::RunCommand({testing::BinaryPath("SHARDPS_CTL"), "drain-server", c.coordinator(),
                                   std::to_string(drain)}, &out), 0) << out;
    EXPECT_NE(out.find("draining server " + std::to_string(drain)), std::string::npos) << out;
    hold = kClocks;
    EXPECT_EQ(c.WaitServerExit(drain, 120s), 0) << "the drained server did not exit 0";
    // shardps-ctl status says it left on purpose: drained, not dead.
    ASSERT_EQ(testing::RunCommand({testing::BinaryPath("SHARDPS_CTL"), "status", c.coordinator(), "--json"}, &out), 0)
        << out;
    EXPECT_NE(out.find("\"role\": \"server\", \"rank\": " + std::to_string(drain)), std::string::npos) << out;
    EXPECT_NE(out.find("\"state\": \"drained\""), std::string::npos) << out;
  }
  for (auto& t : workers) t.join();
}

// Counts the lines of `log` that say `text`.
int Count(const std::string& log, const std::string& text) {
  int n = 0;
  for (size_t at = log.find(text); at != std::string::npos; at = log.find(text, at + 1)) ++n;
  return n;
}

// shardps-ctl add-server: opens server rank 2 of a job of two servers, two
// copies of 4 groups, and starts a server on it; copies of two groups move
// onto it (loads 4, 4, 0 -> 3, 3, 2) while worker 0 trains up to `hold`.
// Then a rebalance has nothing to move.
void AddServer(LocalCluster& c, std::atomic<int>* hold, int to) {
  std::string out;
  ASSERT_EQ(testing::RunCommand({testing::BinaryPath("SHARDPS_CTL"), "add-server", c.coordinator()}, &out), 0) << out;
  EXPECT_NE(out.find("server rank 2 is open"), std::string::npos) << out;
  ASSERT_TRUE(c.StartServer(2).ok());
  *hold = to;
  ASSERT_TRUE(testing::WaitFor([&] { return Count(c.Log("coordinator"), "moved off server") >= 2; }, 120s))
      << c.Log("coordinator");
  ASSERT_EQ(testing::RunCommand({testing::BinaryPath("SHARDPS_CTL"), "rebalance", c.coordinator()}, &out), 0) << out;
  EXPECT_NE(out.find("nothing to move (each live server holds 2-3"), std::string::npos) << out;
  ASSERT_EQ(testing::RunCommand({testing::BinaryPath("SHARDPS_CTL"), "status", c.coordinator(), "--json"}, &out), 0);
  EXPECT_NE(out.find("\"num_servers\": 3"), std::string::npos) << out;
}

// Two servers, two copies of 4 groups; with `add`, worker 0 pauses at
// clock 20 while a server is added (AddServer), and groups move onto it
// while the workers train clocks 20..40. Without: the job without it.
void RunAdd(LocalCluster& c, bool add, std::vector<float>* w, std::vector<float>* e) {
  ClusterOptions o = Replicated("sync");
  o.coordinator_args.insert(o.coordinator_args.end(), {"--groups", "4"});
  ASSERT_TRUE(c.Start(o).ok());
  std::atomic<int> clocks[kWorkers] = {};
  std::atomic<int> hold{add ? 20 : kClocks};
  std::vector<std::thread> workers;
  for (int r = 0; r < kWorkers; ++r)
    workers.emplace_back([&, r] { Train(c, r, &clocks[r], r == 0 ? w : nullptr, r == 0 ? e : nullptr, &hold); });
  if (add) {
    ASSERT_TRUE(testing::WaitFor([&] { return clocks[0].load() >= 20; }, 120s));
    AddServer(c, &hold, 40);
    // Then a primary's copy moves (move-group): group 1's, on server 0, to
    // server 2; server 1 serves the group from then on.
    std::string out;
    ASSERT_EQ(testing::RunCommand({testing::BinaryPath("SHARDPS_CTL"), "move-group", c.coordinator(), "1", "0", "2"},
                                  &out), 0) << out;
    EXPECT_NE(out.find("moving group 1: server 2 is filled with a copy from server 1, then server 0's copy leaves "
                       "(server 1 serves it then)"), std::string::npos) << out;
    hold = 50;
    ASSERT_TRUE(testing::WaitFor([&] { return Count(c.Log("coordinator"), "group 1 moved off server 0") == 1; }, 120s))
        << c.Log("coordinator");
    ASSERT_EQ(testing::RunCommand({testing::BinaryPath("SHARDPS_CTL"), "move-group", c.coordinator(), "1", "0", "2"},
                                  &out), 1) << out;
    EXPECT_NE(out.find("server 0 holds no full copy of group 1"), std::string::npos) << out;
    hold = kClocks;
  }
  for (auto& t : workers) t.join();
}

// The dense values and sparse rows of two runs are equal bit for bit.
void ExpectSameModel(const std::vector<float>& w0, const std::vector<float>& e0, const std::vector<float>& w1,
                     const std::vector<float>& e1) {
  ASSERT_EQ(w0.size(), w1.size());
  ASSERT_EQ(e0.size(), e1.size());
  size_t differ = 0;
  for (size_t i = 0; i < w0.size(); ++i) differ += std::memcmp(&w0[i], &w1[i], sizeof(float)) != 0;
  EXPECT_EQ(differ, 0u) << "of " << w0.size() << " dense values";
  EXPECT_EQ(std::memcmp(e0.data(), e1.data(), e0.size() * sizeof(float)), 0) << "sparse rows differ";
}

// Bounded staleness, counting: each push adds 1 to every row it names
// (SGD, lr 1, gradient -1, no staleness weighing), kPushes of them per
// worker; a worker counts the pushes it was told were taken (*acked) and
// how far it is (pushed[rank]).
constexpr int kPushes = 300;
constexpr uint64_t kCountRows = 4096;  // parts of 8 KiB: sent from the workers' arrays

std::vector<uint64_t> CountIds() {
  std::vector<uint64_t> ids(64);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = i * 7919 + 1;
  return ids;
}

// With `hold`, a worker waits before push k until k is below *hold.
void StartCounting(LocalCluster& c, std::atomic<int>* pushed, std::atomic<int>* acked, std::vector<std::thread>* workers,
                   const std::atomic<int>* hold = nullptr) {
  for (int r = 0; r < kWorkers; ++r)
    workers->emplace_back([&c, pushed, acked, r, hold] {
      auto ps = testing::ConnectClient(c, ClientRole::kWorker, r);
      ASSERT_TRUE(ps);
      Table w, e;
      ASSERT_TRUE(ps->CreateTable(testing::Dense("count", kCountRows, 1).Sgd(1.0f).Rule(StalenessRule::kNone), &w).ok());
      ASSERT_TRUE(ps->CreateTable(testing::Sparse("ids", 1).Sgd(1.0f).Rule(StalenessRule::kNone), &e).ok());
      const std::vector<float> minus(kCountRows, -1.0f), minus_ids(64, -1.0f);
      const std::vector<uint64_t> ids = CountIds();
      std::vector<float> seen(kCountRows);
      for (int k = 0; k < kPushes; ++k) {
        if (hold) ASSERT_TRUE(testing::WaitFor([&] { return k < hold->load(); }, 300s)) << "held at push " << k;
        Request a = ps->Push(w, minus), b = ps->Push(e, ids, minus_ids);
        Status s = a.Wait(), t = b.Wait();
        ASSERT_TRUE(s.ok() && t.ok()) << "worker " << r << " push " << k << ": " << s.ToString() << " / " << t.ToString();
        *acked += 1;
        pushed[r].store(k + 1);
        if (k % 10 == 9) {
          ASSERT_TRUE(ps->Pull(w, seen).Wait().ok());
          ASSERT_TRUE(ps->Clock().ok());
        }
      }
      ASSERT_TRUE(ps->Close().ok());
    });
}

// Every row holds exactly the pushes acknowledged: none lost, none twice.
void ExpectCounted(LocalCluster& c, int acked) {
  auto obs = testing::ConnectClient(c, ClientRole::kObserver);
  ASSERT_TRUE(obs);
  Table w, e;
  ASSERT_TRUE(obs->GetTable("count", &w).ok() && obs->GetTable("ids", &e).ok());
  std::vector<float> count(kCountRows), id_count(64);
  const std::vector<uint64_t> ids = CountIds();
  ASSERT_TRUE(obs->Pull(w, count).Wait().ok());
  ASSERT_TRUE(obs->Pull(e, ids, id_count).Wait().ok());
  const float want = static_cast<float>(acked);
  for (uint64_t i = 0; i < kCountRows; ++i) ASSERT_EQ(count[i], want) << "dense row " << i;
  for (size_t i = 0; i < ids.size(); ++i) ASSERT_EQ(id_count[i], want) << "id " << ids[i];
}

// Both workers count their pushes; `kill` once worker 0 is a third of the
// way; then every row must hold exactly the pushes acknowledged.
void CountAcrossAKill(LocalCluster& c, const std::function<void()>& kill) {
  std::atomic<int> pushed[kWorkers] = {};
  std::atomic<int> acked{0};
  std::vector<std::thread> workers;
  StartCounting(c, pushed, &acked, &workers);
  EXPECT_TRUE(testing::WaitFor([&] { return pushed[0].load() >= kPushes / 3; }, 120s)) << "worker 0 did not get there";
  kill();
  EXPECT_LT(pushed[0].load(), kPushes);
  for (auto& t : workers) t.join();
  if (::testing::Test::HasFailure()) return;
  ExpectCounted(c, acked.load());
}

class ReplicaTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure()) {
      a_.DumpLogs();
      b_.DumpLogs();
    }
  }
  LocalCluster a_, b_;
};

TEST_F(ReplicaTest, SyncKillOfAServerEndsWithTheModelOfTheJobWithoutIt) {
  std::vector<float> w0, e0, w1, e1;
  RunSync(a_, -1, &w0, &e0);
  ASSERT_FALSE(HasFailure());
  RunSync(b_, 1, &w1, &e1);
  ASSERT_FALSE(HasFailure());
  ExpectSameModel(w0, e0, w1, e1);
  // The coordinator failed server 1 over; server 0 took its group; nothing restarted.
  const std::string coord = b_.Log("coordinator"), s0 = b_.Log("server0");
  EXPECT_NE(coord.find("server 1 silent for more than"), std::string::npos) << coord;
  EXPECT_NE(coord.find("fail-over to shard map v2: group 1 -> server 0"), std::string::npos) << coord;
  EXPECT_NE(s0.find("taking over group 1"), std::string::npos) << s0;
  // What status and the metrics say of it: server 1 dead, map v2, both groups on server 0.
  std::string st;
  ASSERT_EQ(testing::RunCommand({testing::BinaryPath("SHARDPS_CTL"), "status", b_.coordinator(), "--json"}, &st), 0)
      << st;
  EXPECT_NE(st.find("\"shard_map\": {\"version\": 2, \"replicas\": 2, \"groups\": [[0], [0]]}"), std::string::npos)
      << st;
  EXPECT_NE(st.find("\"rank\": 1, \"host\""), std::string::npos) << st;
  EXPECT_NE(st.find("\"state\": \"dead\""), std::string::npos) << st;
  ASSERT_EQ(testing::RunCommand({testing::BinaryPath("SHARDPS_CTL"), "status", b_.coordinator()}, &st), 0) << st;
  EXPECT_NE(st.find("replica groups (shard map v2, 2 copies): 0: server 0 (one copy left) | 1: server 0 (one copy left)"),
            std::string::npos)
      << st;
  std::string metrics;  // (the gauges follow the server's heartbeats, 0.5 s apart)
  EXPECT_TRUE(testing::WaitFor(
      [&] {
        metrics = testing::ServerMetrics(b_);
        return testing::MetricValue(metrics, "shardps_replica_primary{group=\"1\"}") == 1;
      },
      10s))
      << metrics;
  EXPECT_GT(testing::MetricValue(metrics, "shardps_replica_inputs_forwarded_total{group=\"0\"}"), 0) << metrics;
}

// Three copies of each group, each copy feeding the next: a server killed
// mid-training is at once the primary of one group, the middle copy of
// another and the last of the third; a second one killed later leaves one
// copy of each. No process restarts, and the model is bit for bit that of
// the job without the kills.
TEST_F(ReplicaTest, ThreeCopiesSurviveTwoServerKillsWithTheModelOfTheJobWithoutThem) {
  std::vector<float> w0, e0, w1, e1;
  RunThreeCopies(a_, {}, &w0, &e0);
  ASSERT_FALSE(HasFailure());
  RunThreeCopies(b_, {1, 2}, &w1, &e1);
  ASSERT_FALSE(HasFailure());
  ExpectSameModel(w0, e0, w1, e1);
  const std::string coord = b_.Log("coordinator"), s0 = b_.Log("server0");
  EXPECT_NE(coord.find("group 1 -> server 2"), std::string::npos) << coord;
  EXPECT_NE(s0.find("taking over group 2"), std::string::npos) << s0;
  EXPECT_NE(s0.find("taking over group 1"), std::string::npos) << s0;
}

// Snapshots stay consistent cuts across a fail-over: the servers serving
// the dead one's group write its part, and the snapshot at a clock after
// the kill holds exactly the model of the run without it.
TEST_F(ReplicaTest, SnapshotsAfterAFailOverAreTheCutsOfTheJobWithoutIt) {
  const std::string root = ::testing::TempDir() + "/replica-snaps-" + std::to_string(::getpid());
  const std::string with = root + "/with", without = root + "/without";
  ASSERT_EQ(mkdir(root.c_str(), 0755), 0) << root;
  std::vector<float> w, e;
  RunSync(a_, -1, &w, &e, {"--snapshot-dir", without, "--snapshot-every-clocks", "10"});
  ASSERT_FALSE(HasFailure());
  RunSync(b_, 1, &w, &e, {"--snapshot-dir", with, "--snapshot-every-clocks", "10"});
  ASSERT_FALSE(HasFailure());
  const std::string snap = "/" + snapshot::DirName(50);
  ASSERT_TRUE(testing::WaitFor([&] { return access((with + snap + "/MANIFEST").c_str(), F_OK) == 0; }, 60s))
      << b_.Log("coordinator");
  std::string out;
  ASSERT_EQ(testing::RunCommand({testing::BinaryPath("SHARDPS_SNAPSHOT"), "verify", with + snap}, &out), 0) << out;
  ASSERT_EQ(testing::RunCommand({testing::BinaryPath("SHARDPS_SNAPSHOT"), "diff", without + snap, with + snap, "--json"},
                                &out),
            0)
      << out;
  for (const char* table : {"\"w\"", "\"e\""}) {  // both tables, no difference and the same rows
    const size_t at = out.find("\"table\": " + std::string(table));
    ASSERT_NE(at, std::string::npos) << out;
    const std::string entry = out.substr(at, out.find('}', at) - at);
    EXPECT_NE(entry.find("\"max_abs_diff\": 0,"), std::string::npos) << entry;
    EXPECT_NE(entry.find("\"rows_only_in_a\": 0, \"rows_only_in_b\": 0"), std::string::npos) << entry;
  }
  std::system(("rm -rf '" + root + "'").c_str());
}

// Bounded staleness: each push adds 1 to every row it names (SGD, lr 1,
// gradient -1, no staleness weighing). A worker counts the pushes it was
// told were taken; after server 1 is killed mid-run, every row holds
// exactly that many: nothing acknowledged was lost or applied twice.
TEST_F(ReplicaTest, BoundedEveryAcknowledgedPushIsAppliedExactlyOnceAcrossAKill) {
  // With snapshots every 5 clocks: the backup made primary cuts from the
  // next one due, never again into one its primary took.
  const std::string snaps = ::testing::TempDir() + "/replica-bounded-" + std::to_string(::getpid());
  ClusterOptions o = Replicated("bounded");
  o.coordinator_args.insert(o.coordinator_args.end(),
                            {"--snapshot-dir", snaps, "--snapshot-every-clocks", "5", "--keep-snapshots", "1000"});
  ASSERT_EQ(mkdir(snaps.c_str(), 0755), 0) << snaps;
  ASSERT_TRUE(a_.Start(o).ok());
  CountAcrossAKill(a_, [&] { a_.KillServer(1, SIGKILL); });
  ASSERT_FALSE(HasFailure());
  EXPECT_NE(a_.Log("server0").find("taking over group 1"), std::string::npos) << a_.Log("server0");
  // Every snapshot listed complete verifies, those after the kill included
  // (the last ones may still be being written when the workers end: waited for).
  std::string out;
  std::vector<std::string> complete;
  auto list = [&] {
    complete.clear();
    if (testing::RunCommand({testing::BinaryPath("SHARDPS_SNAPSHOT"), "list", snaps, "--json"}, &out) != 0) return false;
    for (size_t at = out.find("\"dir\": \""); at != std::string::npos; at = out.find("\"dir\": \"", at + 1)) {
      const size_t b = at + 8, e = out.find('"', b);
      if (out.find("\"complete\": true", e) == out.find("\"complete\"", e)) complete.push_back(out.substr(b, e - b));
    }
    return complete.size() > 2;
  };
  EXPECT_TRUE(testing::WaitFor(list, 60s)) << "at most 2 complete snapshots after 60 s: " << out;
  for (const std::string& dir : complete) {
    std::string v;
    EXPECT_EQ(testing::RunCommand({testing::BinaryPath("SHARDPS_SNAPSHOT"), "verify", dir}, &v), 0) << v;
  }
  std::system(("rm -rf '" + snaps + "'").c_str());
}

// A server killed, a replacement started in its place and filled with
// copies while training runs, then the other server killed: the job ends on
// the replacement's copies, with the model of the job without any of it.
TEST_F(ReplicaTest, AReplacementFilledWhileTrainingRunsTakesOverWithTheModelOfTheJobWithoutFaults) {
  std::vector<float> w0, e0, w1, e1;
  RunMoves(a_, 2, false, -1, &w0, &e0);
  ASSERT_FALSE(HasFailure());
  RunMoves(b_, 2, true, -1, &w1, &e1);
  ASSERT_FALSE(HasFailure());
  ExpectSameModel(w0, e0, w1, e1);
  const std::string coord = b_.Log("coordinator"), s1 = b_.Log("server1.2");
  EXPECT_NE(coord.find("a new server at"), std::string::npos) << coord;
  EXPECT_NE(s1.find("group 0's fill is complete"), std::string::npos) << s1;
  EXPECT_NE(s1.find("group 1's fill is complete"), std::string::npos) << s1;
  EXPECT_NE(s1.find("taking over group 0"), std::string::npos) << s1;
}

// Three servers, two copies: a drained server's groups are copied to the
// others while training runs, it exits 0, and the model is that of the job
// without the drain.
TEST_F(ReplicaTest, ADrainedServerLeavesWhileTrainingRunsWithTheModelOfTheJobWithoutIt) {
  std::vector<float> w0, e0, w1, e1;
  RunMoves(a_, 3, false, -1, &w0, &e0);
  ASSERT_FALSE(HasFailure());
  RunMoves(b_, 3, false, 2, &w1, &e1);
  ASSERT_FALSE(HasFailure());
  ExpectSameModel(w0, e0, w1, e1);
  const std::string coord = b_.Log("coordinator"), s2 = b_.Log("server2");
  EXPECT_NE(coord.find("server 2 is drained"), std::string::npos) << coord;
  EXPECT_NE(s2.find("drained"), std::string::npos) << s2;
}

// A server added while training runs (shardps-ctl add-server): copies of
// groups move onto it, and the model is that of the job without it.
TEST_F(ReplicaTest, AServerAddedWhileTrainingRunsTakesCopiesWithTheModelOfTheJobWithoutIt) {
  std::vector<float> w0, e0, w1, e1;
  RunAdd(a_, false, &w0, &e0);
  ASSERT_FALSE(HasFailure());
  // A worker's end is said once by a server, however many of its groups it
  // serves (2 of the 4 here).
  ASSERT_TRUE(testing::WaitFor([&] { return Count(a_.Log("server0"), "worker 1 is no longer live") >= 1; }, 60s))
      << a_.Log("server0");
  EXPECT_EQ(Count(a_.Log("server0"), "worker 1 is no longer live"), 1) << a_.Log("server0");
  RunAdd(b_, true, &w1, &e1);
  ASSERT_FALSE(HasFailure());
  ExpectSameModel(w0, e0, w1, e1);
  const std::string coord = b_.Log("coordinator"), s2 = b_.Log("server2");
  EXPECT_NE(coord.find("server 2 joined the running job"), std::string::npos) << coord;
  EXPECT_EQ(Count(s2, "fill is complete"), 3) << s2;
  EXPECT_EQ(Count(b_.Log("server0") + b_.Log("server1"), "this copy leaves"), 3);
  EXPECT_NE(b_.Log("server1").find("taking over group 1"), std::string::npos);
}

// One copy of each group: nothing can move while the job runs (a client
// sends again what was unanswered only with replicas), and each move
// command says so, changing nothing.
TEST_F(ReplicaTest, MovesAreRefusedWithOneCopySayingWhy) {
  ClusterOptions o = Replicated("sync");
  o.coordinator_args = {"--groups", "4"};
  ASSERT_TRUE(a_.Start(o).ok());
  for (const std::vector<std::string>& cmd : std::vector<std::vector<std::string>>{
           {"add-server"}, {"rebalance"}, {"drain-server", "1"}}) {
    std::vector<std::string> argv = {testing::BinaryPath("SHARDPS_CTL"), cmd[0], a_.coordinator()};
    argv.insert(argv.end(), cmd.begin() + 1, cmd.end());
    std::string out;
    EXPECT_NE(testing::RunCommand(argv, &out), 0) << out;
    EXPECT_NE(out.find("[job] replicas = 1): its partitions cannot be moved"), std::string::npos) << out;
  }
  std::string out;
  ASSERT_EQ(testing::RunCommand({testing::BinaryPath("SHARDPS_CTL"), "status", a_.coordinator(), "--json"}, &out), 0);
  EXPECT_NE(out.find("\"num_servers\": 2"), std::string::npos) << out;
}

// Bounded staleness: a server added, copies moved onto it, then one of the
// first two killed, all while the workers push: every acknowledged push is
// applied exactly once.
TEST_F(ReplicaTest, BoundedEveryAcknowledgedPushIsAppliedExactlyOnceAcrossAnAddedServerAndAKill) {
  ClusterOptions o = Replicated("bounded");
  o.coordinator_args.insert(o.coordinator_args.end(), {"--groups", "4"});
  ASSERT_TRUE(a_.Start(o).ok());
  std::atomic<int> pushed[kWorkers] = {};
  std::atomic<int> acked{0};
  std::atomic<int> hold{0};
  std::vector<std::thread> workers;
  StartCounting(a_, pushed, &acked, &workers);
  ASSERT_TRUE(testing::WaitFor([&] { return pushed[0].load() >= kPushes / 4; }, 120s));
  AddServer(a_, &hold, 0);
  a_.KillServer(1, SIGKILL);  // its groups fail over, and those left with one copy are filled again
  for (auto& t : workers) t.join();
  ASSERT_FALSE(HasFailure());
  ExpectCounted(a_, acked.load());
}

// Bounded staleness: a server added, then killed as soon as it registered
// — mid-fill, or as a copy leaves, or after the moves, as the timing falls:
// the moves are called off (a copy told to leave takes its requests again)
// or its groups fail over and are filled again. The workers push while it
// joins, pause until it is declared dead, then push on: every
// acknowledged push is applied exactly once and every request answered.
void AddThenKill(LocalCluster& c, const std::string& kill_after, int count) {
  ClusterOptions o = Replicated("bounded");
  o.coordinator_args.insert(o.coordinator_args.end(), {"--groups", "4"});
  ASSERT_TRUE(c.Start(o).ok());
  std::atomic<int> pushed[kWorkers] = {};
  std::atomic<int> acked{0}, hold{kPushes / 2};
  std::vector<std::thread> workers;
  StartCounting(c, pushed, &acked, &workers, &hold);
  ASSERT_TRUE(testing::WaitFor([&] { return pushed[0].load() >= kPushes / 4; }, 120s));
  std::string out;
  ASSERT_EQ(testing::RunCommand({testing::BinaryPath("SHARDPS_CTL"), "add-server", c.coordinator()}, &out), 0) << out;
  ASSERT_TRUE(c.StartServer(2).ok());
  ASSERT_TRUE(testing::WaitFor([&] { return Count(c.Log("coordinator"), kill_after) >= count; }, 60s))
      << c.Log("coordinator");
  c.KillServer(2, SIGKILL);
  ASSERT_TRUE(testing::WaitFor([&] { return Count(c.Log("coordinator"), "server 2 silent for more than") >= 1; }, 60s))
      << c.Log("coordinator");
  hold = kPushes;
  for (auto& t : workers) t.join();
  ExpectCounted(c, acked.load());
}

TEST_F(ReplicaTest, BoundedAServerAddedThenKilledMidMoveLosesNothing) {
  AddThenKill(a_, "server 2 joined the running job", 1);  // (mid-fill, mostly)
  ASSERT_FALSE(HasFailure());
  AddThenKill(b_, "moved off server", 2);  // after both moves: its copies fail over and are filled again
}

// Bounded staleness, three servers, two copies: server 2 drained (exits
// 0), a new server started in its place and filled, then server 0 killed,
// all while the workers push: every acknowledged push is applied exactly
// once, and every request is answered.
TEST_F(ReplicaTest, BoundedEveryAcknowledgedPushIsAppliedExactlyOnceAcrossADrainAFillAndAKill) {
  ClusterOptions o = Replicated("bounded");
  o.servers = 3;
  ASSERT_TRUE(a_.Start(o).ok());
  std::atomic<int> pushed[kWorkers] = {};
  std::atomic<int> acked{0};
  std::vector<std::thread> workers;
  StartCounting(a_, pushed, &acked, &workers);
  ASSERT_TRUE(testing::WaitFor([&] { return pushed[0].load() >= kPushes / 4; }, 120s));
  std::string out;
  ASSERT_EQ(testing::RunCommand({testing::BinaryPath("SHARDPS_CTL"), "drain-server", a_.coordinator(), "2"}, &out), 0)
      << out;
  EXPECT_EQ(a_.WaitServerExit(2, 120s), 0) << "the drained server did not exit 0";
  ASSERT_TRUE(a_.StartServer(2).ok());
  // The groups short of a copy after the drain (none: each went to the
  // other server first) — the replacement is filled only where one lacks.
  ASSERT_TRUE(testing::WaitFor([&] { return a_.Log("coordinator").find("a new server at") != std::string::npos; }, 60s));
  ASSERT_TRUE(testing::WaitFor([&] { return pushed[0].load() >= kPushes / 2; }, 120s));
  a_.KillServer(0, SIGKILL);  // groups 0 and 2 lose a copy: refilled into the new server 2
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        const std::string log = a_.Log("coordinator");
        size_t n = 0;
        for (size_t at = log.find("holds a full copy"); at != std::string::npos; at = log.find("holds a full copy", at + 1)) ++n;
        return n >= 4;  // two for the drain, two after the kill
      },
      120s))
      << a_.Log("coordinator");
  for (auto& t : workers) t.join();
  ASSERT_FALSE(HasFailure());
  ExpectCounted(a_, acked.load());
}

}  // namespace
}  // namespace shardps

namespace shardps {
namespace {

// The coordinator's state in etcd, a standby beside the leader
// (docs/fault-tolerance.md, "Standby coordinators"): the leader killed with
// SIGKILL mid-training — its machine lost: it kept nothing of its own — and
// the standby leads on what etcd holds.
class StandbyTest : public ReplicaTest {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/standby-etcd-" + std::to_string(::getpid());
    ASSERT_EQ(mkdir(dir_.c_str(), 0755), 0) << dir_;
    if (std::string why = etcd_.Start(dir_); !why.empty()) GTEST_SKIP() << why;
  }
  void TearDown() override {
    ReplicaTest::TearDown();
    etcd_.Stop();
    std::system(("rm -rf '" + dir_ + "'").c_str());
  }
  void ExpectTakenOver(const LocalCluster& c) {
    const std::string standby = c.Log("standby");
    EXPECT_NE(standby.find("resuming the job saved in etcd://"), std::string::npos) << standby;
  }
  std::string dir_;
  testing::EtcdProcess etcd_;
};

// Under sync, replicas 2: nothing rolled back or restarted, the model bit
// for bit that of the job without the kill.
TEST_F(StandbyTest, SyncKillOfTheLeaderEndsWithTheModelOfTheJobWithoutIt) {
  std::vector<float> w0, e0, w1, e1;
  RunSync(a_, -1, &w0, &e0);
  ASSERT_FALSE(HasFailure());
  RunSync(b_, kTheCoordinator, &w1, &e1, {}, etcd_.endpoint());
  ASSERT_FALSE(HasFailure());
  ExpectSameModel(w0, e0, w1, e1);
  ExpectTakenOver(b_);
}

// Under bounded staleness: every acknowledged push applied exactly once.
TEST_F(StandbyTest, BoundedEveryAcknowledgedPushIsAppliedExactlyOnceAcrossTheLeadersKill) {
  ClusterOptions o = Replicated("bounded");
  o.etcd = etcd_.endpoint();
  ASSERT_TRUE(a_.Start(o).ok());
  CountAcrossAKill(a_, [&] { a_.KillCoordinator(SIGKILL); });
  ASSERT_FALSE(HasFailure());
  ExpectTakenOver(a_);
}

}  // namespace
}  // namespace shardps
