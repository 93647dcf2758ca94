#include "server/snapshot/snapshot_cut.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "server/snapshot/snapshot_chain.h"
#include "server/tables/table.h"
#include "tests/table_spec.h"

namespace shardps {
namespace {

class SnapshotCutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shardps-cut-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    spec_ = testing::Dense("w", 8, 2).Constant(1.0f).Sgd(1.0f);
    tables_.push_back(std::make_unique<ServerTable>(spec_, 4, std::vector<uint32_t>{0, 1, 2, 3}));
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  std::string Dir(int64_t clock) const { return root_ + "/" + snapshot::DirName(clock); }
  // Waits for the writer (up to 20 s) and returns what it reported.
  std::deque<CutDone> WaitDone(SnapshotCut& cut, size_t n) {
    std::deque<CutDone> all, some;
    for (int i = 0; i < 2000 && all.size() < n; ++i) {
      if (cut.TakeDone(&some))
        for (auto& d : some) all.push_back(std::move(d));
      some.clear();
      if (all.size() < n) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return all;
  }
  // The rows of the cut written at `clock` (server 0's file), row -> values.
  std::map<uint64_t, std::vector<float>> Written(int64_t clock, const CutDone& d) {
    snapshot::Manifest m;
    m.tables.push_back(spec_);
    m.parts = d.parts;
    std::map<uint64_t, std::vector<float>> rows;
    for (uint32_t p = 0; p < 4; ++p) {
      Status s = snapshot::ForEachRow(Dir(clock), m, 0, p, [&](uint64_t row, const float* v, uint32_t stride) {
        rows[row].assign(v, v + stride);
      });
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    return rows;
  }
  void Step(uint64_t begin, uint64_t end) {  // every value of the rows down by 1
    std::vector<float> g((end - begin) * 2, 1.0f);
    tables_[0]->ApplyRange(begin, end, g.data(), 1.0f);
  }

  std::string root_;
  TableSpec spec_;
  std::vector<std::unique_ptr<ServerTable>> tables_;
};

TEST_F(SnapshotCutTest, TheCutHoldsTheRowsAsTheyWereAtItsClockThoughRequestsChangeThemWhileCopying) {
  SnapshotCut cut(tables_, Millis(0));
  cut.Take(3, 0, root_, Dir(3));
  ASSERT_TRUE(cut.active());
  EXPECT_EQ(cut.last_cut(), 3);
  // As the server does: rows kept before each request changes them.
  auto step = [&](uint64_t b, uint64_t e) {
    cut.EnsureCopiedRange(0, b, e);
    Step(b, e);
  };
  step(0, 2);        // partition 0 kept before a push changes it
  cut.CopySome(0);   // one slice between requests: partition 0 (its kept copy)
  ASSERT_TRUE(cut.active());
  const uint64_t keys[] = {7};
  cut.EnsureCopiedKeys(0, keys, 1);  // partition 3
  Step(6, 8);
  step(2, 4);
  step(0, 2);  // partition 0 was handed over already
  cut.Finish();
  EXPECT_FALSE(cut.active());
  Step(4, 6);  // after the cut: not in it

  auto done = WaitDone(cut, 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].clock, 3);
  EXPECT_EQ(done[0].error, "");
  EXPECT_GT(done[0].bytes, 0u);
  ASSERT_EQ(done[0].parts.size(), 4u);
  auto rows = Written(3, done[0]);
  ASSERT_EQ(rows.size(), 8u);
  for (const auto& [row, v] : rows) EXPECT_EQ(v, (std::vector<float>{1.0f, 1.0f})) << "row " << row;
  // The table itself moved on.
  std::vector<float> now(16);
  tables_[0]->ReadRange(0, 8, now.data());
  for (size_t i = 0; i < 16; ++i) EXPECT_EQ(now[i], i < 4 ? -1.0f : 0.0f) << i;
}

TEST_F(SnapshotCutTest, ACutStillCopyingIsFinishedBeforeTheNextAndACompleteSnapshotIsNotOverwritten) {
  SnapshotCut cut(tables_, Millis(0));
  snapshot::Manifest complete;
  complete.tables.push_back(spec_);
  std::filesystem::create_directories(Dir(4));
  ASSERT_TRUE(snapshot::WriteManifest(Dir(4), complete).ok());
  cut.Take(2, 0, root_, Dir(2));
  Step(0, 8);  // (no copy first: the cut at 2 sees this step; a request would have copied)
  cut.Take(4, 0, root_, Dir(4));
  cut.Finish();
  auto done = WaitDone(cut, 2);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].clock, 2);
  EXPECT_EQ(done[0].error, "");
  EXPECT_EQ(done[1].clock, 4);
  EXPECT_NE(done[1].error.find("is a complete snapshot already: not overwritten"), std::string::npos) << done[1].error;
}

TEST_F(SnapshotCutTest, ACutWithNothingHeldIsWrittenAtOnce) {
  std::vector<std::unique_ptr<ServerTable>> none(1);
  SnapshotCut cut(none, Millis(0));
  cut.Take(1, 0, root_, Dir(1));
  EXPECT_FALSE(cut.active());
  auto done = WaitDone(cut, 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_TRUE(done[0].parts.empty());
  EXPECT_EQ(done[0].error, "");
}

// Snapshots of what changed, on an embedding table whose rows are made,
// updated and evicted between cuts: each cut writes only what changed
// since the one before (rows gone included), a full part every
// `full_every`, and the chain reads back as the table was at each cut
// though pushes change rows while a cut is written.
class SnapshotChainTest : public SnapshotCutTest {
 protected:
  using Rows = std::map<uint64_t, std::vector<float>>;
  void SetUp() override {
    SnapshotCutTest::SetUp();
    spec_ = testing::Sparse("emb", 2).Constant(1.0f).Sgd(0.5f).EvictAfterClocks(3);
    tables_.clear();
    tables_.push_back(std::make_unique<ServerTable>(spec_, 4, std::vector<uint32_t>{0, 1, 2, 3}));
  }
  void Push(SnapshotCut& cut, std::vector<uint64_t> ids, float g) {
    cut.EnsureCopiedKeys(0, ids.data(), ids.size());
    std::vector<float> grad(ids.size() * 2, g);
    tables_[0]->ApplyKeys(ids.data(), ids.size(), grad.data(), 1.0f);
  }
  static std::vector<uint64_t> Range(uint64_t b, uint64_t e) {
    std::vector<uint64_t> v;
    for (uint64_t i = b; i < e; ++i) v.push_back(i);
    return v;
  }
  Rows Now() {
    std::vector<PartitionData> parts;
    tables_[0]->Export(0, &parts);
    Rows rows;
    for (const auto& p : parts)
      for (size_t i = 0; i < p.rows.size(); ++i)
        rows[p.rows[i]].assign(p.values.begin() + i * p.stride, p.values.begin() + (i + 1) * p.stride);
    return rows;
  }
  // The coordinator's part: the manifest of a written cut.
  CutDone Complete(SnapshotCut& cut, int64_t clock) {
    cut.Finish();
    auto done = WaitDone(cut, 1);
    EXPECT_EQ(done.size(), 1u);
    if (done.empty()) return {};
    EXPECT_EQ(done[0].error, "");
    snapshot::Manifest m;
    m.clock = clock;
    m.num_servers = 1;
    m.partitions = 4;
    m.owner.assign(4, 0);
    m.tables.push_back(spec_);
    m.files.push_back({0, snapshot::ServerFileName(0), done[0].bytes, done[0].checksum});
    m.parts = done[0].parts;
    EXPECT_TRUE(snapshot::WriteManifest(Dir(clock), m).ok());
    return done[0];
  }
  Rows Read(int64_t clock) {
    snapshot::Chain chain;
    Rows rows;
    Status s = chain.Open(Dir(clock));
    for (uint32_t p = 0; s.ok() && p < 4; ++p)
      s = snapshot::ForEachChainRow(chain, 0, p, [&](uint64_t row, const float* v, uint32_t n) { rows[row].assign(v, v + n); });
    EXPECT_TRUE(s.ok()) << s.ToString();
    return rows;
  }
  static uint64_t Count(const CutDone& d, bool deleted) {
    uint64_t n = 0;
    for (const auto& p : d.parts) n += deleted ? p.deleted : p.rows;
    return n;
  }
  static bool AllBase(const CutDone& d, int64_t base) {
    for (const auto& p : d.parts)
      if (p.base != base) return false;
    return d.parts.size() == 4;
  }
};

TEST_F(SnapshotChainTest, EachCutWritesWhatChangedAndItsChainReadsAsTheTableWasAtTheCut) {
  SnapshotCut cut(tables_, Millis(0));
  ServerTable& t = *tables_[0];
  t.SetClock(1);
  Push(cut, Range(1, 201), 1.0f);
  cut.Take(1, 0, root_, Dir(1), 1, 3);
  const Rows at1 = Now();
  Push(cut, Range(1, 11), 1.0f);  // while the cut is written: kept as at the cut
  const CutDone d1 = Complete(cut, 1);
  EXPECT_TRUE(AllBase(d1, -1));
  EXPECT_EQ(Count(d1, false), 200u);

  t.SetClock(3);
  Push(cut, Range(1, 151), 1.0f);
  t.SetClock(5);
  Push(cut, Range(300, 311), 2.0f);  // new rows
  EXPECT_EQ(t.EvictSome(1 << 20), 50u);  // 151..200, idle since clock 1
  cut.Take(5, 0, root_, Dir(5), 5, 3);
  const Rows at5 = Now();
  Push(cut, {1, 2, 3, 400, 305}, -1.0f);  // changes while written, a new row among them
  cut.CopySome(0);
  Push(cut, {4, 150, 310}, -1.0f);
  const CutDone d5 = Complete(cut, 5);
  EXPECT_TRUE(AllBase(d5, 1));
  EXPECT_EQ(Count(d5, false), 161u);  // 1..150 updated, 300..310 made
  EXPECT_EQ(Count(d5, true), 50u);    // 151..200 gone

  t.SetClock(6);
  Push(cut, {7}, 1.0f);
  cut.Take(7, 0, root_, Dir(7), 7, 3);
  const Rows at7 = Now();
  const CutDone d7 = Complete(cut, 7);
  EXPECT_TRUE(AllBase(d7, 5));
  EXPECT_EQ(Count(d7, false), 9u);  // 7, and the 8 rows pushed while snap-5 was written
  EXPECT_LT(d7.bytes, d1.bytes);

  cut.Take(9, 0, root_, Dir(9), 9, 3);  // the third since the full one: full again
  const Rows at9 = Now();
  const CutDone d9 = Complete(cut, 9);
  EXPECT_TRUE(AllBase(d9, -1));

  EXPECT_EQ(Read(1), at1);
  EXPECT_EQ(Read(5), at5);
  EXPECT_EQ(Read(7), at7);
  EXPECT_EQ(Read(9), at9);
  EXPECT_EQ(at9, Now());

  // A cut whose base never completed (no MANIFEST: its cut failed) writes
  // every row.
  Push(cut, {1}, 1.0f);
  cut.Take(11, 0, root_, Dir(11), 11, 3);
  CutDone d11 = Complete(cut, 11);
  EXPECT_TRUE(AllBase(d11, 9));
  std::filesystem::remove(Dir(11) + "/MANIFEST");
  Push(cut, {2}, 1.0f);
  cut.Take(12, 0, root_, Dir(12), 12, 3);
  EXPECT_TRUE(AllBase(Complete(cut, 12), -1));
  EXPECT_EQ(Read(12), Now());
}

// A chain with a missing or corrupt link is refused, the link named, and
// the newest snapshot whose chain is whole is the one restored.
TEST_F(SnapshotChainTest, AChainWithABrokenLinkIsRefusedWithTheLinkNamed) {
  SnapshotCut cut(tables_, Millis(0));
  tables_[0]->SetClock(1);
  Push(cut, Range(1, 101), 1.0f);
  cut.Take(1, 0, root_, Dir(1), 1, 8);
  Complete(cut, 1);
  for (int64_t c : {2, 3}) {
    Push(cut, {static_cast<uint64_t>(c)}, 1.0f);
    cut.Take(c, 0, root_, Dir(c), c, 8);
    EXPECT_TRUE(AllBase(Complete(cut, c), c - 1));
  }
  std::string dir;
  snapshot::Manifest m;
  std::vector<std::string> refused;
  ASSERT_TRUE(snapshot::FindNewestGood(root_, -1, &dir, &m, &refused).ok());
  EXPECT_EQ(dir, Dir(3));
  // Corrupt the middle link: snap-3 is refused naming snap-2, snap-2 too,
  // snap-1 restores.
  {
    std::fstream f(Dir(2) + "/" + snapshot::ServerFileName(0), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x5a');
  }
  refused.clear();
  ASSERT_TRUE(snapshot::FindNewestGood(root_, -1, &dir, &m, &refused).ok());
  EXPECT_EQ(dir, Dir(1));
  ASSERT_EQ(refused.size(), 2u);
  EXPECT_NE(refused[0].find("link " + Dir(2)), std::string::npos) << refused[0];
  // A missing link: named as well.
  std::filesystem::remove_all(Dir(2));
  snapshot::Chain chain;
  Status s = chain.Open(Dir(3));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(Dir(2)), std::string::npos) << s.message();
}

TEST(SnapshotCutSchedule, SyncCutsAreDueAtScheduledOrPeriodicClocksNotTakenYet) {
  std::vector<std::unique_ptr<ServerTable>> none;
  SnapshotCut cut(none, Millis(0));
  EXPECT_FALSE(cut.DueAt(0, 2));  // never at clock 0
  EXPECT_TRUE(cut.DueAt(2, 2));
  EXPECT_FALSE(cut.DueAt(3, 2));
  EXPECT_FALSE(cut.DueAt(3, 0));
  cut.Schedule(3);
  EXPECT_TRUE(cut.DueAt(3, 0));
  cut.Cancel(3);
  EXPECT_FALSE(cut.DueAt(3, 0));
  cut.Schedule(5);
  cut.Take(4, 0, "/nonexistent", "/nonexistent/snap");  // (nothing held: handed to the writer at once)
  EXPECT_FALSE(cut.DueAt(4, 2));  // taken
  EXPECT_FALSE(cut.DueAt(2, 2));  // before the last cut
  EXPECT_TRUE(cut.DueAt(5, 0));
}

TEST(SnapshotCutSchedule, BoundedCutsAreDueOnceTheSlowestWorkerPassedThem) {
  std::vector<std::unique_ptr<ServerTable>> none;
  SnapshotCut cut(none, Millis(0));
  EXPECT_EQ(cut.DueBehind(7, 3), 6);  // the newest periodic cut behind the slowest worker
  EXPECT_EQ(cut.DueBehind(2, 3), -1);
  cut.Schedule(4);
  cut.Schedule(9);
  EXPECT_EQ(cut.DueBehind(5, 0), 4);
  EXPECT_EQ(cut.DueBehind(5, 5), 5);
  EXPECT_EQ(cut.DueBehind(8, 0), 4);
  cut.Take(4, 0, "/nonexistent", "/nonexistent/snap");
  EXPECT_EQ(cut.DueBehind(8, 0), -1);
  EXPECT_EQ(cut.DueBehind(9, 0), 9);
  // With no live worker: the first scheduled cut not taken yet.
  cut.Schedule(2);
  EXPECT_EQ(cut.FirstScheduled(), 9);
}

}  // namespace
}  // namespace shardps
