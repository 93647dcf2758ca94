// Tiered tables end to end (docs/embeddings.md, "Tables larger than
// memory"), against real servers whose hot tier holds a fraction of the
// rows: the job trains the model of the same job with every row in memory,
// bit for bit (sync); shardps-ctl status shows each server's tiers; a
// server killed with rows on disk fails over to its replica, and a job
// restored from a snapshot of a tiered table has the snapshot's rows.
#include <gtest/gtest.h>

#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "server/snapshot/snapshot.h"
#include "server/tables/initializer.h"
#include "shardps/client.h"
#include "tests/cluster.h"
#include "tests/table_spec.h"

namespace shardps {
namespace {

using namespace std::chrono_literals;
using testing::ClusterOptions;
using testing::LocalCluster;

constexpr uint32_t kDim = 16;
constexpr int kClocks = 40;
constexpr size_t kNewPerClock = 160, kOldPerClock = 96;

// A memory budget whose hot tier is at its floor (64 rows a partition):
// most of the 6 400 rows of a job live on disk.
const std::vector<std::string> kSmallServer = {"--memory-budget-mb", "100"};

TableSpec Embedding(bool tiered) {
  TableSpec t = testing::Sparse("emb", kDim).Uniform(-0.1f, 0.1f).Seed(3).Adagrad(0.05f);
  t.cold_tier = tiered;
  return t;
}

// Ids of clock c: new ones, and old ones drawn again (their rows went down
// since, most of them).
std::vector<uint64_t> IdsOf(int clock) {
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < kNewPerClock; ++i) ids.push_back((static_cast<uint64_t>(clock) * kNewPerClock + i) * 7919 + 11);
  std::mt19937_64 rng(static_cast<uint64_t>(clock) + 1);
  for (size_t i = 0; i < kOldPerClock && clock > 0; ++i)
    ids.push_back((rng() % (static_cast<uint64_t>(clock) * kNewPerClock)) * 7919 + 11);
  return ids;
}

std::vector<uint64_t> AllIds() {
  std::vector<uint64_t> all;
  for (uint64_t i = 0; i < kClocks * kNewPerClock; ++i) all.push_back(i * 7919 + 11);
  return all;
}

// Trains kClocks clocks as worker 0 (a gradient of the values pulled, so a
// wrong row anywhere changes every later step); `clock_seen` follows it.
// The final rows of every id.
// With `hold`, it waits before each clock until that clock is below *hold.
void Train(const LocalCluster& c, bool tiered, std::vector<float>* rows, std::atomic<int>* clock_seen = nullptr,
           const std::atomic<int>* hold = nullptr) {
  auto ps = testing::ConnectClient(c, ClientRole::kWorker, 0);
  ASSERT_TRUE(ps);
  Table e;
  ASSERT_TRUE(ps->CreateTable(Embedding(tiered), &e).ok());
  for (int clock = 0; clock < kClocks; ++clock) {
    if (hold) ASSERT_TRUE(testing::WaitFor([&] { return clock < hold->load(); }, 300s)) << "held at clock " << clock;
    const std::vector<uint64_t> ids = IdsOf(clock);
    std::vector<float> v(ids.size() * kDim), g(ids.size() * kDim);
    Status s = ps->Pull(e, ids, v).Wait();
    ASSERT_TRUE(s.ok()) << "clock " << clock << ": " << s.ToString();
    for (size_t i = 0; i < g.size(); ++i) g[i] = 0.5f * v[i] + 0.01f * static_cast<float>((i + clock) % 7);
    s = ps->Push(e, ids, g).Wait();
    ASSERT_TRUE(s.ok()) << "clock " << clock << ": " << s.ToString();
    ASSERT_TRUE(ps->Clock().ok());
    if (clock_seen) clock_seen->store(clock + 1);
  }
  const std::vector<uint64_t> all = AllIds();
  rows->resize(all.size() * kDim);
  ASSERT_TRUE(ps->Pull(e, all, *rows).Wait().ok());
  ASSERT_TRUE(ps->Close().ok());
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  size_t diff = 0, first = SIZE_MAX;
  for (size_t r = 0; r * kDim < a.size(); ++r)
    if (std::memcmp(&a[r * kDim], &b[r * kDim], kDim * sizeof(float)) != 0) {
      ++diff;
      if (first == SIZE_MAX) first = r;
    }
  if (diff) {
    std::string by_clock;
    for (size_t c = 0; c < kClocks; ++c) {
      size_t n = 0;
      for (size_t r = c * kNewPerClock; r < (c + 1) * kNewPerClock; ++r)
        n += std::memcmp(&a[r * kDim], &b[r * kDim], kDim * sizeof(float)) != 0;
      by_clock += " " + std::to_string(n);
    }
    std::fprintf(stderr, "differing rows by the clock that made them:%s\n", by_clock.c_str());
    const std::vector<uint64_t> all = AllIds();
    std::vector<float> init(kDim);
    InitRow(Embedding(true), all[first], init.data());
    std::fprintf(stderr, "initial value of that row: %g\n", init[0]);
    std::fprintf(stderr, "%zu of %zu rows differ; the first: id %llu (row %zu, clock %zu): %g vs %g\n", diff,
                 a.size() / kDim, static_cast<unsigned long long>(all[first]), first, first / kNewPerClock,
                 a[first * kDim], b[first * kDim]);
  }
  return diff == 0;
}

class TieredTest : public ::testing::Test {
 protected:
  ClusterOptions Options(bool tiered, const std::string& dir) {
    ClusterOptions o;
    o.servers = 2;
    o.workers = 1;
    o.partitions = 16;
    o.dir = dir;
    std::filesystem::create_directories(dir);
    if (tiered) {
      o.server_args = kSmallServer;
      o.server_args.insert(o.server_args.end(), {"--cold-dir", dir});
    }
    return o;
  }
  // Tiered, two copies of each group, a server silent for 1.5 s dead.
  ClusterOptions Replicated(const std::string& name) {
    ClusterOptions o = Options(true, Dir(name));
    o.heartbeat_timeout_ms = 1500;
    o.coordinator_args = {"--replicas", "2"};
    return o;
  }
  // The model of the job with every row in memory (computed once).
  const std::vector<float>& Reference() {
    if (!reference_.empty()) return reference_;
    LocalCluster c;
    EXPECT_TRUE(c.Start(Options(false, Dir("plain"))).ok());
    Train(c, false, &reference_);
    if (HasFailure()) c.DumpLogs();
    return reference_;
  }
  std::string Dir(const std::string& name) {
    if (root_.empty()) {
      char tmpl[] = "/tmp/shardps-tiered-XXXXXX";
      EXPECT_NE(mkdtemp(tmpl), nullptr);
      root_ = tmpl;
    }
    return root_ + "/" + name;
  }
  void TearDown() override {
    if (!root_.empty() && !HasFailure()) std::filesystem::remove_all(root_);
  }
  std::string root_;
  std::vector<float> reference_;
};

TEST_F(TieredTest, ATieredJobTrainsTheModelOfTheJobWithEveryRowInMemoryBitForBit) {
  const std::vector<float>& want = Reference();
  LocalCluster c;
  ASSERT_TRUE(c.Start(Options(true, Dir("tiered"))).ok());
  std::vector<float> got;
  Train(c, true, &got);
  EXPECT_TRUE(SameBits(got, want)) << "a tiered table's rows differ from the in-memory job's";
  // Each server's tiers, as shardps-ctl status reports them (heartbeats).
  std::string out;
  bool seen = testing::WaitFor(
      [&] {
        out.clear();
        return testing::RunCommand({testing::BinaryPath("SHARDPS_CTL"), "status", c.coordinator(), "--json"}, &out) ==
                   0 &&
               out.find("\"cold_tier\"") != std::string::npos && out.find("\"cold_rows\": 0,") == std::string::npos;
      },
      30s);
  EXPECT_TRUE(seen) << out;
  EXPECT_NE(out.find("\"hit_rate\": 0."), std::string::npos) << out;  // some ids came from disk, most from memory
  ASSERT_EQ(testing::RunCommand({testing::BinaryPath("SHARDPS_CTL"), "status", c.coordinator()}, &out), 0) << out;
  EXPECT_NE(out.find("cold tier: server 0: "), std::string::npos) << out;
  EXPECT_NE(out.find("cold tier: server 1: "), std::string::npos) << out;
  for (int r = 0; r < 2; ++r)
    EXPECT_TRUE(std::filesystem::exists(Dir("tiered") + "/shardps-cold-" + std::to_string(r) + "/rows"))
        << "server " << r << "'s cold tier is not under --cold-dir";
  if (HasFailure()) c.DumpLogs();
}

// Two copies of each group, each server with most rows on its own disk:
// server 1 killed half way, its groups served by server 0's copies (their
// cold rows on server 0's disk), the model that of the job without faults.
TEST_F(TieredTest, AServerKilledWithRowsOnDiskFailsOverToItsReplicaWithoutARollback) {
  const std::vector<float>& want = Reference();
  LocalCluster c;
  ASSERT_TRUE(c.Start(Replicated("replicas")).ok());
  std::atomic<int> clock{0};
  std::vector<float> got;
  std::thread worker([&] { Train(c, true, &got, &clock); });
  ASSERT_TRUE(testing::WaitFor([&] { return clock.load() >= kClocks / 2; }, 120s));
  c.KillServer(1, SIGKILL);
  worker.join();
  EXPECT_TRUE(SameBits(got, want)) << "the model after a fail-over differs from the job's without it";
  EXPECT_NE(c.Log("server0").find("taking over group 1"), std::string::npos);
  if (HasFailure()) c.DumpLogs();
}

// Re-replication of a tiered table: server 1 killed, a replacement filled
// with copies of both groups from server 0 (rows read from its disk, moved
// down on the replacement's as they come), then server 0 killed: the job
// ends on the filled copies with the model of the job without faults.
TEST_F(TieredTest, ACopyFilledFromRowsOnDiskTakesOverWithTheModelOfTheJobWithoutFaults) {
  const std::vector<float>& want = Reference();
  LocalCluster c;
  ASSERT_TRUE(c.Start(Replicated("fill")).ok());
  std::atomic<int> clock{0};
  std::atomic<int> hold{kClocks / 3};
  std::vector<float> got;
  std::thread worker([&] { Train(c, true, &got, &clock, &hold); });
  auto logged = [&](const std::string& name, const std::string& text, int count) {
    return testing::WaitFor(
        [&] {
          const std::string log = c.Log(name);
          int n = 0;
          for (size_t at = log.find(text); at != std::string::npos; at = log.find(text, at + 1)) ++n;
          return n >= count;
        },
        120s);
  };
  ASSERT_TRUE(testing::WaitFor([&] { return clock.load() >= kClocks / 3; }, 120s));
  c.KillServer(1, SIGKILL);
  ASSERT_TRUE(logged("coordinator", "fail-over to shard map", 1));
  hold = 2 * kClocks / 3;  // training goes on while the replacement is filled
  ASSERT_TRUE(c.StartServer(1).ok());
  ASSERT_TRUE(logged("coordinator", "holds a full copy", 2)) << c.Log("coordinator");
  ASSERT_TRUE(testing::WaitFor([&] { return clock.load() >= 2 * kClocks / 3; }, 120s));
  c.KillServer(0, SIGKILL);
  hold = kClocks;
  worker.join();
  EXPECT_TRUE(SameBits(got, want)) << "the model on the filled copies differs from the job's without faults";
  if (HasFailure()) c.DumpLogs();
}

// A snapshot of a tiered table (written while most rows were on disk)
// restored into servers whose hot tier is as small: every row as the
// snapshot has it, and as the job that wrote it ended.
TEST_F(TieredTest, ServersKilledWithRowsOnDiskRollBackToTheSnapshotsRowsOnAnotherNumberOfServers) {
  const std::string snaps = Dir("snaps");
  std::vector<float> trained;
  {
    LocalCluster c;
    ClusterOptions o = Options(true, Dir("writer"));
    o.coordinator_args = {"--snapshot-dir", snaps};
    ASSERT_TRUE(c.Start(o).ok());
    Train(c, true, &trained);
    std::string out;  // (workers idle: taken at once)
    EXPECT_EQ(testing::RunCommand({testing::BinaryPath("SHARDPS_CTL"), "snapshot", c.coordinator()}, &out, 60), 0)
        << out;
    auto complete = [&] {
      std::error_code ec;
      for (const auto& d : std::filesystem::directory_iterator(snaps, ec)) {
        snapshot::Manifest m;
        if (snapshot::ReadManifest(d.path().string(), &m).ok() && m.clock >= kClocks) return true;
      }
      return false;
    };
    EXPECT_TRUE(testing::WaitFor(complete, 60s)) << "no snapshot at clock " << kClocks << " in " << snaps;
    if (HasFailure()) c.DumpLogs();
    // Both servers killed with rows on disk: their tiers stay behind.
    c.KillServer(0, SIGKILL);
    c.KillServer(1, SIGKILL);
    EXPECT_TRUE(std::filesystem::exists(Dir("writer") + "/shardps-cold-0/rows"));
  }
  // The job rolled back: started again from its snapshot, on the killed
  // servers' cold directories (their rows emptied, never read).
  LocalCluster c;
  ClusterOptions o = Options(true, Dir("restored"));
  o.server_args.back() = Dir("writer");  // --cold-dir
  o.servers = 3;  // (onto another number of servers)
  o.coordinator_args = {"--snapshot-dir", snaps, "--restore"};
  ASSERT_TRUE(c.Start(o).ok());
  auto ps = testing::ConnectClient(c, ClientRole::kWorker, 0);
  ASSERT_TRUE(ps);
  Table e;
  ASSERT_TRUE(ps->CreateTable(Embedding(true), &e).ok());
  const std::vector<uint64_t> all = AllIds();
  std::vector<float> rows(all.size() * kDim);
  ASSERT_TRUE(ps->Pull(e, all, rows).Wait().ok());
  EXPECT_TRUE(SameBits(rows, trained));
  ASSERT_TRUE(ps->Close().ok());
  EXPECT_NE(c.Log("server0").find("cold tier of tiered tables in"), std::string::npos);
  if (HasFailure()) c.DumpLogs();
}

}  // namespace
}  // namespace shardps
