// Snapshots through real processes: write, restore (also onto another
// number of servers), survive a server killed mid-write and flipped bytes,
// and the shardps-snapshot CLI on the result.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "server/snapshot/snapshot.h"
#include "shardps/client.h"
#include "tests/cluster.h"
#include "tests/table_spec.h"

namespace shardps {
namespace {

using namespace std::chrono_literals;
using testing::BinaryPath;
using testing::ClusterOptions;
using testing::LocalCluster;
using testing::RunCommand;
using testing::WaitFor;

std::unique_ptr<Client> Connect(const LocalCluster& c, ClientRole role, int rank = -1) {
  return testing::ConnectClient(c, role, rank);
}

TableSpec Dense() { return testing::Dense("w", 3000, 4).Normal(0, 0.5f).Seed(9).Adam(0.01f); }
TableSpec Sparse() { return testing::Sparse("emb", 8).Uniform(-0.1f, 0.1f).Adagrad(0.1f); }

// A deterministic "training" step: the gradient pulls parameters towards a
// step-dependent target, so each step depends on the last (and on the
// optimizer state).
void Step(Client& c, const Table& w, const Table& e, int step) {
  std::vector<float> p(w.size()), g(w.size());
  ASSERT_TRUE(c.Pull(w, p).Wait().ok());
  for (size_t i = 0; i < p.size(); ++i) g[i] = p[i] - std::sin(0.001f * static_cast<float>(i) + 0.1f * static_cast<float>(step));
  ASSERT_TRUE(c.Push(w, g).Wait().ok());
  std::vector<uint64_t> ids;
  for (uint64_t k = 0; k < 50; ++k) ids.push_back((k * 7919 + static_cast<uint64_t>(step) * 31) % 1000);
  std::vector<float> ev(ids.size() * 8), eg(ids.size() * 8);
  ASSERT_TRUE(c.Pull(e, ids, ev).Wait().ok());
  for (size_t i = 0; i < ev.size(); ++i) eg[i] = ev[i] - 0.5f;
  ASSERT_TRUE(c.Push(e, ids, eg).Wait().ok());
  ASSERT_TRUE(c.Clock().ok());
}

class SnapshotRestoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shardps-snaptest-XXXXXX";
    ASSERT_TRUE(mkdtemp(tmpl));
    root_ = tmpl;
    snaps_ = root_ + "/snaps";
  }
  void TearDown() override {
    if (HasFailure())  // the clusters are gone; their logs are not (yet)
      std::system(("for f in '" + root_ + "'/*/*.log; do echo \"==== $f\"; tail -30 \"$f\"; done >&2").c_str());
    std::system(("rm -rf '" + root_ + "'").c_str());
  }
  // A cluster whose run directory lives under root_/name.
  void Start(LocalCluster& c, const std::string& name, int servers, int workers, std::vector<std::string> coord_args,
             std::vector<std::string> server_args = {}) {
    ClusterOptions o;
    o.servers = servers;
    o.workers = workers;
    o.consistency = consistency_;
    o.staleness = consistency_ == "bounded" ? 2 : 0;
    o.dir = root_ + "/" + name;
    mkdir(o.dir.c_str(), 0755);
    o.coordinator_args = {"--snapshot-dir", snaps_};
    o.coordinator_args.insert(o.coordinator_args.end(), coord_args.begin(), coord_args.end());
    o.server_args = server_args;
    ASSERT_TRUE(c.Start(o).ok());
  }
  int Cli(std::vector<std::string> args, std::string* out) {
    args.insert(args.begin(), BinaryPath("SHARDPS_SNAPSHOT"));
    return RunCommand(args, out, 120);
  }
  int Ctl(std::vector<std::string> args, std::string* out) {
    args.insert(args.begin(), BinaryPath("SHARDPS_CTL"));
    return RunCommand(args, out, 120);
  }
  // The whole model as the CLI sees it: max |a - b| over every table (0 = identical).
  double MaxDiff(const std::string& a, const std::string& b) {
    std::string out;
    EXPECT_EQ(Cli({"diff", a, b, "--json"}, &out), 0) << out;
    std::ofstream(root_ + "/diff.json") << out;
    std::string py;
    EXPECT_EQ(RunCommand({"python3", "-c",
                          "import json,sys; d=json.load(open(sys.argv[1])); "
                          "print(max([t['max_abs_diff'] for t in d['tables']] + [1e9 if (t['rows_only_in_a'] or t['rows_only_in_b'] or not t['in_a'] or not t['in_b']) else 0 for t in d['tables']]))",
                          root_ + "/diff.json"},
                         &py),
              0)
        << py;
    return std::atof(py.c_str());
  }
  std::string Snap(int64_t clock) { return snaps_ + "/" + snapshot::DirName(clock); }

  std::string root_, snaps_;
  std::string consistency_ = "sync";
};

TEST_F(SnapshotRestoreTest, RoundTripIsBitIdenticalAndTrainingContinuesToTheSameResult) {
  // Uninterrupted: 10 clocks, snapshots every 5.
  {
    LocalCluster a;
    Start(a, "a", 2, 1, {"--snapshot-every-clocks", "5"});
    auto c = Connect(a, ClientRole::kWorker, 0);
    Table w, e;
    ASSERT_TRUE(c->CreateTable(Dense(), &w).ok());
    ASSERT_TRUE(c->CreateTable(Sparse(), &e).ok());
    for (int s = 0; s < 10; ++s) Step(*c, w, e, s);
    // The snapshot at clock 10 is the state after 10 steps.
    ASSERT_TRUE(WaitFor([&] { snapshot::Manifest m; return snapshot::ReadManifest(Snap(10), &m).ok(); }, 60s));
    ASSERT_TRUE(c->Close().ok());
  }
  std::string out;
  ASSERT_EQ(Cli({"verify", Snap(5)}, &out), 0) << out;
  ASSERT_EQ(Cli({"verify", Snap(10)}, &out), 0) << out;
  // Restore the clock-5 snapshot into fresh servers and run steps 5..9:
  // the result must equal the uninterrupted run's clock 10, bit for bit
  // (parameters and optimizer state both shape the result).
  {
    LocalCluster b;
    Start(b, "b", 2, 1, {"--restore", "--restore-clock", "5", "--snapshot-every-clocks", "5", "--keep-snapshots", "10"});
    auto c = Connect(b, ClientRole::kWorker, 0);
    Table w, e;
    ASSERT_TRUE(c->GetTable("w", &w).ok());
    ASSERT_TRUE(c->GetTable("emb", &e).ok());
    // Restored values equal the snapshot's, bit for bit.
    snapshot::Manifest m5;
    ASSERT_TRUE(snapshot::ReadManifest(Snap(5), &m5).ok());
    std::vector<float> p(w.size());
    ASSERT_TRUE(c->Pull(w, p).Wait().ok());
    size_t checked = 0;
    for (uint32_t part = 0; part < m5.partitions; ++part)
      ASSERT_TRUE(snapshot::ForEachRow(Snap(5), m5, w.id, part, [&](uint64_t row, const float* v, uint32_t) {
        for (int j = 0; j < 4; ++j) ASSERT_EQ(p[row * 4 + j], v[j]);
        ++checked;
      }).ok());
    EXPECT_EQ(checked, 3000u);
    // Snapshots of the restored job continue its clock: after 5 more clocks
    // it writes snap-10 again, so move the uninterrupted run's aside (a
    // complete snapshot is never overwritten), with snap-5 beside it: the
    // uninterrupted snap-10 holds only what changed since snap-5 (and the
    // restored job's first snapshot, every row).
    // (Full instead when snap-5's manifest was not written yet at the cut
    // at 10, as on a slow machine: both read the same.)
    snapshot::Manifest m10;
    ASSERT_TRUE(snapshot::ReadManifest(Snap(10), &m10).ok());
    if (!m10.full()) EXPECT_EQ(m10.bases(), std::vector<int64_t>{5});
    std::filesystem::create_directories(root_ + "/uninterrupted");
    std::filesystem::copy(Snap(5), root_ + "/uninterrupted/" + snapshot::DirName(5));
    ASSERT_EQ(std::rename(Snap(10).c_str(), (root_ + "/uninterrupted/" + snapshot::DirName(10)).c_str()), 0);
    for (int s = 5; s < 10; ++s) Step(*c, w, e, s);
    ASSERT_TRUE(WaitFor([&] { snapshot::Manifest m; return snapshot::ReadManifest(Snap(10), &m).ok(); }, 60s));
    ASSERT_TRUE(c->Close().ok());
  }
  // A chain (snap-5 and what changed to 10) holds the model a full
  // snapshot at the same clock holds, bit for bit.
  snapshot::Manifest restored10;
  ASSERT_TRUE(snapshot::ReadManifest(Snap(10), &restored10).ok());
  EXPECT_TRUE(restored10.full());
  EXPECT_EQ(MaxDiff(root_ + "/uninterrupted/" + snapshot::DirName(10), Snap(10)), 0.0);
}

// A worker that trained a few clocks and stays connected, idle (done with
// its data, not closed): `shardps-ctl snapshot` cuts at its clock at once
// and the snapshot holds the model as it is; asked again, the snapshot at
// that clock answers.
TEST_F(SnapshotRestoreTest, AnOnDemandSnapshotWithIdleWorkersIsTakenAtTheirClock) {
  for (const char* model : {"sync", "bounded"}) {
    SCOPED_TRACE(model);
    consistency_ = model;
    LocalCluster a;
    Start(a, model, 2, 1, {});
    auto c = Connect(a, ClientRole::kWorker, 0);
    ASSERT_TRUE(c);
    Table w, e;
    ASSERT_TRUE(c->CreateTable(Dense(), &w).ok());
    ASSERT_TRUE(c->CreateTable(Sparse(), &e).ok());
    for (int s = 0; s < 3; ++s) Step(*c, w, e, s);
    std::vector<float> now(w.size());
    ASSERT_TRUE(c->Pull(w, now).Wait().ok());
    std::string out;
    ASSERT_EQ(Ctl({"snapshot", a.coordinator(), "--timeout-sec", "30"}, &out), 0) << out;
    EXPECT_NE(out.find(Snap(3)), std::string::npos) << out;
    snapshot::Manifest m;
    ASSERT_TRUE(snapshot::ReadManifest(Snap(3), &m).ok());
    size_t checked = 0;
    for (uint32_t part = 0; part < m.partitions; ++part)
      ASSERT_TRUE(snapshot::ForEachRow(Snap(3), m, w.id, part, [&](uint64_t row, const float* v, uint32_t) {
        for (int j = 0; j < 4; ++j) ASSERT_EQ(now[row * 4 + j], v[j]);
        ++checked;
      }).ok());
    EXPECT_EQ(checked, 3000u);
    ASSERT_EQ(Ctl({"snapshot", a.coordinator(), "--timeout-sec", "30"}, &out), 0) << out;
    EXPECT_NE(out.find(Snap(3)), std::string::npos) << out;
    ASSERT_TRUE(c->Close().ok());
    std::filesystem::remove_all(snaps_);
  }
}

TEST_F(SnapshotRestoreTest, TwoServersSnapshotRestoresIntoThreeAndIntoOne) {
  {
    LocalCluster a;
    Start(a, "a", 2, 0, {});
    auto c = Connect(a, ClientRole::kObserver);
    Table w, e;
    ASSERT_TRUE(c->CreateTable(Dense(), &w).ok());
    ASSERT_TRUE(c->CreateTable(Sparse(), &e).ok());
    for (int s = 0; s < 3; ++s) {
      std::vector<float> g(w.size(), 0.1f * static_cast<float>(s + 1));
      ASSERT_TRUE(c->Push(w, g).Wait().ok());
      std::vector<uint64_t> ids = {1, 99, 12345678901ull, 4242};
      std::vector<float> eg(ids.size() * 8, 0.3f);
      ASSERT_TRUE(c->Push(e, ids, eg).Wait().ok());
    }
    std::string out;
    ASSERT_EQ(Ctl({"snapshot", a.coordinator(), "--timeout-sec", "60"}, &out), 0) << out;
    // More pushes, new ids among them: the next snapshot holds what changed.
    std::vector<float> g(w.size(), 0.05f);
    ASSERT_TRUE(c->Push(w, g).Wait().ok());
    std::vector<uint64_t> ids = {1, 555, 777};
    std::vector<float> eg(ids.size() * 8, -0.2f);
    ASSERT_TRUE(c->Push(e, ids, eg).Wait().ok());
    ASSERT_EQ(Ctl({"snapshot", a.coordinator(), "--timeout-sec", "60"}, &out), 0) << out;
  }
  std::vector<snapshot::Listing> all;
  ASSERT_TRUE(snapshot::List(snaps_, &all).ok());
  ASSERT_EQ(all.size(), 2u);
  EXPECT_TRUE(all[0].full);
  EXPECT_FALSE(all[1].full);
  EXPECT_EQ(all[1].bases, std::vector<int64_t>{all[0].clock});
  EXPECT_LT(all[1].bytes, all[0].bytes);
  // The chain written out as one full snapshot holds the same model, and
  // verifies on its own.
  {
    std::string out;
    const std::string flat = root_ + "/flat/" + snapshot::DirName(all[1].clock);
    std::filesystem::create_directories(root_ + "/flat");
    ASSERT_EQ(Cli({"flatten", all[1].dir, flat}, &out), 0) << out;
    snapshot::Manifest fm;
    ASSERT_TRUE(snapshot::ReadManifest(flat, &fm).ok());
    EXPECT_TRUE(fm.full());
    ASSERT_EQ(Cli({"verify", flat}, &out), 0) << out;
    EXPECT_EQ(MaxDiff(all[1].dir, flat), 0.0);
    EXPECT_NE(Cli({"flatten", all[1].dir, flat}, &out), 0);  // (not over a snapshot)
    EXPECT_NE(out.find("holds a snapshot already"), std::string::npos) << out;
  }
  // The chain, kept aside: restores go from a root holding only it.
  const std::string saved = root_ + "/original";
  const std::string chain_head = saved + "/" + snapshot::DirName(all[1].clock);
  ASSERT_EQ(std::rename(snaps_.c_str(), saved.c_str()), 0);
  for (int servers : {3, 1}) {
    // Restore from the chain, then snapshot again (every row).
    std::system(("rm -rf '" + snaps_ + "' && cp -r '" + saved + "' '" + snaps_ + "'").c_str());
    LocalCluster b;
    Start(b, "b" + std::to_string(servers), servers, 0, {"--restore"});
    ASSERT_TRUE(WaitFor([&] { return b.Log("server0").find("restored") != std::string::npos; }, 60s));
    std::string out;
    ASSERT_EQ(Ctl({"snapshot", b.coordinator(), "--timeout-sec", "60"}, &out), 0) << out;
    ASSERT_TRUE(snapshot::List(snaps_, &all).ok());
    ASSERT_EQ(all.size(), 3u);
    snapshot::Manifest m;
    ASSERT_TRUE(snapshot::ReadManifest(all[2].dir, &m).ok());
    EXPECT_EQ(m.num_servers, static_cast<uint32_t>(servers));
    EXPECT_TRUE(m.full());
    EXPECT_EQ(MaxDiff(chain_head, all[2].dir), 0.0) << servers << " servers";
  }
}

// An embedding table with admission (k = 2) and eviction (8 s idle): its
// sketch and its rows' stamps are in the snapshot, so after a restore onto
// 3 servers (from 2) an id pushed once before is admitted by its next push,
// and the restored rows go idle from their old updates, not from the
// restore.
TEST_F(SnapshotRestoreTest, AnEmbeddingTablesAdmissionAndEvictionGoOnAfterARestoreOntoThreeServers) {
  const TableSpec spec = testing::Sparse("adm", 2).Constant(1.0f).Sgd(1.0f).AdmitAfter(2).EvictAfterSec(8);
  std::vector<uint64_t> once, twice, fresh;  // pushed once before the snapshot, twice, never
  for (uint64_t i = 0; i < 30; ++i) {
    once.push_back(1000 + i);
    twice.push_back(2000 + i);
    fresh.push_back(3000 + i);
  }
  const std::vector<float> g(30 * 2, 0.5f);
  const auto t0 = std::chrono::steady_clock::now();
  {
    LocalCluster a;
    Start(a, "a", 2, 0, {});
    auto c = Connect(a, ClientRole::kObserver);
    Table t;
    ASSERT_TRUE(c->CreateTable(spec, &t).ok());
    ASSERT_TRUE(c->Push(t, once, g).Wait().ok());
    ASSERT_TRUE(c->Push(t, twice, g).Wait().ok());
    ASSERT_TRUE(c->Push(t, twice, g).Wait().ok());  // admitted: 1 - 0.5
    std::string out;
    ASSERT_EQ(Ctl({"snapshot", a.coordinator(), "--timeout-sec", "60"}, &out), 0) << out;
  }
  LocalCluster b;
  Start(b, "b", 3, 0, {"--restore"});
  ASSERT_TRUE(WaitFor([&] { return b.Log("server0").find("restored") != std::string::npos; }, 60s));
  auto c = Connect(b, ClientRole::kObserver);
  Table t;
  ASSERT_TRUE(c->GetTable("adm", &t).ok());
  std::vector<float> v(60);
  ASSERT_TRUE(c->Pull(t, twice, v).Wait().ok());
  for (float x : v) ASSERT_EQ(x, 0.5f);  // restored
  ASSERT_TRUE(c->Push(t, once, g).Wait().ok());  // their second push: admitted
  ASSERT_TRUE(c->Push(t, fresh, g).Wait().ok());  // their first: dropped
  ASSERT_TRUE(c->Pull(t, once, v).Wait().ok());
  for (float x : v) EXPECT_EQ(x, 0.5f) << "the sketch came back with the snapshot";
  ASSERT_TRUE(c->Pull(t, fresh, v).Wait().ok());
  for (float x : v) EXPECT_EQ(x, 1.0f);
  // The restored rows were last updated before the snapshot; `once`'s rows
  // after the restore, at least 3 s after them: the restored ones go first.
  ASSERT_TRUE(WaitFor([&] { return std::chrono::steady_clock::now() >= t0 + 3s; }, 10s));
  ASSERT_TRUE(c->Push(t, once, g).Wait().ok());  // their stamps: now
  ASSERT_TRUE(WaitFor(
      [&] {
        std::vector<float> w(60);
        return c->Pull(t, twice, w).Wait().ok() && w[0] == 1.0f;  // evicted: the initial value again
      },
      60s));
  ASSERT_TRUE(c->Pull(t, once, v).Wait().ok());
  for (float x : v) EXPECT_EQ(x, 0.0f) << "updated after the restore: not idle yet";
}

TEST_F(SnapshotRestoreTest, ServerKilledWhileWritingLeavesTheEarlierSnapshotGood) {
  LocalCluster a;
  Start(a, "a", 2, 0, {}, {"--snapshot-write-delay-ms", "1500"});
  auto c = Connect(a, ClientRole::kObserver);
  Table w;
  ASSERT_TRUE(c->CreateTable(Dense(), &w).ok());
  std::string out;
  ASSERT_EQ(Ctl({"snapshot", a.coordinator(), "--timeout-sec", "60"}, &out), 0) << out;
  std::vector<snapshot::Listing> all;
  ASSERT_TRUE(snapshot::List(snaps_, &all).ok());
  ASSERT_EQ(all.size(), 1u);
  const std::string good = all[0].dir;
  std::vector<float> at_good(w.size());
  ASSERT_TRUE(c->Pull(w, at_good).Wait().ok());
  // Change the model, take snapshot 2, and kill -9 server 1 while it is
  // writing (its writes are delayed by --snapshot-write-delay-ms).
  std::vector<float> g(w.size(), 1.0f);
  ASSERT_TRUE(c->Push(w, g).Wait().ok());
  std::thread trig([&] {
    std::string o;
    EXPECT_NE(Ctl({"snapshot", a.coordinator(), "--timeout-sec", "8"}, &o), 0) << o;
  });
  // Wait for snapshot 2's directory (the servers have cut), then kill.
  ASSERT_TRUE(WaitFor([&] {
    std::vector<snapshot::Listing> l;
    return snapshot::List(snaps_, &l).ok() && l.size() == 2;
  }, 60s));
  a.KillServer(1, SIGKILL);
  trig.join();
  ASSERT_TRUE(snapshot::List(snaps_, &all).ok());
  ASSERT_EQ(all.size(), 2u);
  EXPECT_TRUE(all[0].complete);
  EXPECT_FALSE(all[1].complete);
  ASSERT_EQ(Cli({"list", snaps_}, &out), 0);
  EXPECT_NE(out.find("INCOMPLETE"), std::string::npos) << out;
  ASSERT_EQ(Cli({"verify", good}, &out), 0) << out;
  // Restore picks the earlier, complete one.
  LocalCluster b;
  Start(b, "b", 2, 0, {"--restore"});
  auto cb = Connect(b, ClientRole::kObserver);
  Table wb;
  ASSERT_TRUE(cb->GetTable("w", &wb).ok());
  std::vector<float> restored(wb.size());
  ASSERT_TRUE(cb->Pull(wb, restored).Wait().ok());
  EXPECT_EQ(restored, at_good);
  EXPECT_NE(b.Log("coordinator").find("refusing snapshot"), std::string::npos);
}

TEST_F(SnapshotRestoreTest, FlippedBytesFailVerifyAndRestoreFallsBack) {
  std::vector<float> first_values;
  {
    LocalCluster a;
    Start(a, "a", 2, 0, {});
    auto c = Connect(a, ClientRole::kObserver);
    Table w;
    ASSERT_TRUE(c->CreateTable(Dense(), &w).ok());
    std::string out;
    ASSERT_EQ(Ctl({"snapshot", a.coordinator(), "--timeout-sec", "60"}, &out), 0) << out;
    first_values.resize(w.size());
    ASSERT_TRUE(c->Pull(w, first_values).Wait().ok());
    std::vector<float> g(w.size(), 1.0f);
    ASSERT_TRUE(c->Push(w, g).Wait().ok());
    ASSERT_EQ(Ctl({"snapshot", a.coordinator(), "--timeout-sec", "60"}, &out), 0) << out;
  }
  std::vector<snapshot::Listing> all;
  ASSERT_TRUE(snapshot::List(snaps_, &all).ok());
  ASSERT_EQ(all.size(), 2u);
  const std::string file = all[1].dir + "/server-1.sst";
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    for (int pos : {300, 301, 302}) {
      f.seekg(pos);
      char ch;
      f.read(&ch, 1);
      f.seekp(pos);
      ch ^= 0x3c;
      f.write(&ch, 1);
    }
  }
  std::string out;
  EXPECT_EQ(Cli({"verify", all[1].dir}, &out), 1) << out;
  EXPECT_NE(out.find("server-1.sst"), std::string::npos) << out;
  EXPECT_EQ(Cli({"verify", all[1].dir, "--json"}, &out), 1);
  EXPECT_NE(out.find("\"ok\": false"), std::string::npos) << out;
  LocalCluster b;
  Start(b, "b", 2, 0, {"--restore"});
  auto c = Connect(b, ClientRole::kObserver);
  Table w;
  ASSERT_TRUE(c->GetTable("w", &w).ok());
  std::vector<float> restored(w.size());
  ASSERT_TRUE(c->Pull(w, restored).Wait().ok());
  EXPECT_EQ(restored, first_values);
  const std::string log = b.Log("coordinator");
  EXPECT_NE(log.find("refusing snapshot"), std::string::npos) << log;
  EXPECT_NE(log.find(all[1].dir), std::string::npos) << log;
}

TEST_F(SnapshotRestoreTest, TimedSnapshotsKeepOnlyTheNewestK) {
  {
    LocalCluster a;
    Start(a, "a", 2, 0, {"--snapshot-every-sec", "1", "--keep-snapshots", "2"});
    auto c = Connect(a, ClientRole::kObserver);
    Table w;
    ASSERT_TRUE(c->CreateTable(Dense(), &w).ok());
    // Snapshots keep coming every second; older ones go once newer ones are complete.
    ASSERT_TRUE(WaitFor([&] { return a.Log("coordinator").find("removed old snapshot") != std::string::npos; }, 60s))
        << a.Log("coordinator");
  }  // stopped: nothing changes below
  std::vector<snapshot::Listing> all;
  ASSERT_TRUE(snapshot::List(snaps_, &all).ok());
  size_t complete = 0;
  for (const auto& l : all) complete += l.complete;
  EXPECT_LE(complete, 2u);
  EXPECT_GE(complete, 1u);
  std::string out;
  for (const auto& l : all)
    if (l.complete) EXPECT_EQ(Cli({"verify", l.dir}, &out), 0) << out;
}

TEST_F(SnapshotRestoreTest, EveryCliVerbWithJsonAndExportReadBack) {
  {
    LocalCluster a;
    Start(a, "a", 2, 0, {});
    auto c = Connect(a, ClientRole::kObserver);
    Table w, e;
    TableSpec d = Dense();
    d.init = InitKind::kConstant;
    d.init_a = 0.25f;
    ASSERT_TRUE(c->CreateTable(d, &w).ok());
    ASSERT_TRUE(c->CreateTable(Sparse(), &e).ok());
    std::vector<uint64_t> ids = {5, 77, 123456789};
    std::vector<float> ev(ids.size() * 8), zero(ids.size() * 8, 0.0f);
    // A push creates the rows (a zero gradient leaves their initial values);
    // an observer's read would not.
    ASSERT_TRUE(c->Push(e, ids, zero).Wait().ok());
    ASSERT_TRUE(c->Pull(e, ids, ev).Wait().ok());
    std::string out;
    ASSERT_EQ(Ctl({"snapshot", a.coordinator(), "--timeout-sec", "60"}, &out), 0) << out;
  }
  std::vector<snapshot::Listing> all;
  ASSERT_TRUE(snapshot::List(snaps_, &all).ok());
  ASSERT_EQ(all.size(), 1u);
  const std::string snap = all[0].dir;
  auto py = [&](const std::string& json, const std::string& expr) {
    std::ofstream(root_ + "/out.json") << json;
    std::string r;
    EXPECT_EQ(RunCommand({"python3", "-c", "import json,sys; d=json.load(open(sys.argv[1])); print(repr((" + expr + ")))", root_ + "/out.json"}, &r), 0) << r << json;
    while (!r.empty() && r.back() == '\n') r.pop_back();
    return r;
  };
  std::string out;
  ASSERT_EQ(Cli({"list", snaps_, "--json"}, &out), 0);
  EXPECT_EQ(py(out, "len(d), d[0]['complete']"), "(1, True)");
  ASSERT_EQ(Cli({"info", snap, "--json"}, &out), 0);
  EXPECT_EQ(py(out, "d['servers'], [(t['name'], t['kind'], t['rows'], t['cols'], t['optimizer'], t['stored_rows']) for t in d['tables']]"),
            "(2, [('w', 'dense', 3000, 4, 'adam', 3000), ('emb', 'sparse', 0, 8, 'adagrad', 3)])");
  ASSERT_EQ(Cli({"show", snap, "w", "--rows", "10:12", "--json"}, &out), 0);
  EXPECT_EQ(py(out, "d['rows'], d['stats']['min'], d['stats']['max'], d['stats']['mean'], d['stats']['nan'], round(d['stats']['l2'], 3), d['values']['11']"),
            "(3000, 0.25, 0.25, 0.25, 0, " + std::to_string(std::round(std::sqrt(12000 * 0.0625) * 1000) / 1000).substr(0, 6) + ", [0.25, 0.25, 0.25, 0.25])");
  ASSERT_EQ(Cli({"show", snap, "emb", "--ids", "5,77", "--json"}, &out), 0);
  EXPECT_EQ(py(out, "d['rows'], sorted(d['values'].keys())"), "(3, ['5', '77'])");
  ASSERT_EQ(Cli({"diff", snap, snap, "--json"}, &out), 0);
  EXPECT_EQ(py(out, "[(t['table'], t['max_abs_diff'], t['rows_only_in_a']) for t in d['tables']]"), "[('w', 0, 0), ('emb', 0, 0)]");
  ASSERT_EQ(Cli({"verify", snap, "--json"}, &out), 0);
  EXPECT_EQ(py(out, "d['ok']"), "True");
  // export: parse the .npy here (magic, header, little-endian float32).
  ASSERT_EQ(Cli({"export", snap, "w", "--format", "npy", root_ + "/w.npy"}, &out), 0) << out;
  {
    std::ifstream f(root_ + "/w.npy", std::ios::binary);
    char magic[8];
    f.read(magic, 8);
    ASSERT_EQ(std::string(magic, 6), "\x93NUMPY");
    uint16_t hl = static_cast<uint8_t>(f.get());
    hl |= static_cast<uint16_t>(static_cast<uint8_t>(f.get()) << 8);
    std::string header(hl, ' ');
    f.read(header.data(), hl);
    EXPECT_NE(header.find("'descr': '<f4'"), std::string::npos) << header;
    EXPECT_NE(header.find("'shape': (3000, 4)"), std::string::npos) << header;
    EXPECT_EQ((10 + hl) % 64, 0);
    std::vector<float> v(12000);
    f.read(reinterpret_cast<char*>(v.data()), 48000);
    ASSERT_TRUE(f.good());
    for (float x : v) ASSERT_EQ(x, 0.25f);
  }
  ASSERT_EQ(Cli({"export", snap, "emb", "--format", "csv", root_ + "/emb.csv"}, &out), 0) << out;
  {
    std::ifstream f(root_ + "/emb.csv");
    std::string line;
    std::getline(f, line);
    EXPECT_EQ(line, "id,c0,c1,c2,c3,c4,c5,c6,c7");
    int n = 0;
    while (std::getline(f, line)) ++n;
    EXPECT_EQ(n, 3);
  }
  // Bad arguments: clear messages, non-zero exits.
  EXPECT_NE(Cli({"info", root_ + "/nope"}, &out), 0);
  EXPECT_NE(out.find("no MANIFEST"), std::string::npos) << out;
  EXPECT_NE(Cli({"info", snaps_}, &out), 0);
  EXPECT_NE(out.find("holds snapshots"), std::string::npos) << out;
  EXPECT_NE(Cli({"show", snap, "nope"}, &out), 0);
  EXPECT_NE(out.find("no table 'nope'"), std::string::npos) << out;
  EXPECT_NE(Cli({"show", snap, "w", "--rows", "9:3"}, &out), 0);
  EXPECT_NE(Cli({"export", snap, "w", "--format", "parquet", root_ + "/x"}, &out), 0);
  EXPECT_NE(Cli({"frobnicate"}, &out), 0);
  EXPECT_EQ(Cli({"show", "--help"}, &out), 0);
  EXPECT_NE(out.find("--rows"), std::string::npos);
  EXPECT_NE(Cli({"list", root_ + "/missing"}, &out), 0);
  EXPECT_NE(out.find("cannot read"), std::string::npos) << out;
}

}  // namespace
}  // namespace shardps
