#include "server/snapshot/snapshot_cut.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

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
  cut.EnsureCopiedRange(0, 0, 2);  // partition 0 copied before a push changes it
  Step(0, 2);
  cut.CopySome(0);  // one partition between requests: partition 1
  ASSERT_TRUE(cut.active());
  const uint64_t keys[] = {7};
  cut.EnsureCopiedKeys(0, keys, 1);  // partition 3
  Step(6, 8);
  Step(2, 4);  // partition 1 was copied already
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
  for (float x : now) EXPECT_EQ(x, 0.0f);
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
