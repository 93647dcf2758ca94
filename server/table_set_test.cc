#include "server/table_set.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/table_spec.h"

namespace shardps {
namespace {

// Two servers, 4 partitions (this one, rank 0, holds 0 and 1).
ClusterView View(std::vector<TableSpec> tables) {
  ClusterView v;
  v.num_servers = 2;
  v.map = ShardMap::Contiguous(4, 2, 1);
  for (uint32_t i = 0; i < tables.size(); ++i) tables[i].id = i;
  v.tables = std::move(tables);
  return v;
}

TEST(TableSet, HoldsTheServersPartitionsOfEveryTableDefined) {
  TableSet ts(1 << 20);
  EXPECT_FALSE(ts.ready());
  ClusterView v = View({testing::Dense("w", 100, 2), testing::Sparse("e", 4)});
  ASSERT_TRUE(ts.Define(v, 0).ok());
  EXPECT_TRUE(ts.ready());
  ASSERT_EQ(ts.size(), 2u);
  ASSERT_NE(ts.get(0), nullptr);
  EXPECT_EQ(ts.get(0)->rows_held(), 50u);  // half the partitions
  EXPECT_TRUE(ts.get(0)->Holds(1));
  EXPECT_FALSE(ts.get(0)->Holds(2));
  EXPECT_EQ(ts.get(2), nullptr);
  EXPECT_EQ(ts.Bytes(), ts.get(0)->bytes() + ts.get(1)->bytes());
  // A later view keeps the tables held (their rows too) and adds new ones.
  std::vector<float> g(2, 1.0f);
  ts.get(0)->ApplyRange(0, 1, g.data(), 1.0f);
  const uint64_t version = ts.get(0)->RangeVersion(0, 1);
  v = View({testing::Dense("w", 100, 2), testing::Sparse("e", 4), testing::Dense("x", 10, 1)});
  ASSERT_TRUE(ts.Define(v, 0).ok());
  EXPECT_EQ(ts.size(), 3u);
  EXPECT_EQ(ts.get(0)->RangeVersion(0, 1), version);
  EXPECT_NE(ts.get(2), nullptr);
}

TEST(TableSet, ATablePastTheMemoryBudgetIsRefusedAndNeverHeld) {
  TableSet ts(64 << 10);
  ClusterView v = View({testing::Dense("small", 100, 4), testing::Dense("big", 100000, 4)});
  ASSERT_TRUE(ts.Define(v, 0).ok());
  EXPECT_NE(ts.get(0), nullptr);
  EXPECT_EQ(ts.get(1), nullptr);
  EXPECT_TRUE(ts.refused(1));
  EXPECT_FALSE(ts.refused(0));
  EXPECT_LE(ts.Bytes(), ts.budget());
  ASSERT_TRUE(ts.Define(v, 0).ok());  // asked again: still refused
  EXPECT_EQ(ts.get(1), nullptr);
}

TEST(TableSet, SparseGrowthStopsAtTheServersShareOfMaxRows) {
  TableSet ts(1 << 20);
  ASSERT_TRUE(ts.Define(View({testing::Sparse("e", 2).MaxRows(10)}), 0).ok());
  ServerTable& t = *ts.get(0);
  // Ids of the partitions this server holds (0 and 1 of 4).
  std::vector<uint64_t> mine;
  for (uint64_t id = 0; mine.size() < 8; ++id)
    if (t.CheckKeys(&id, 1).ok()) mine.push_back(id);
  // Share: ceil(10 * 2 / 4) = 5 rows.
  EXPECT_TRUE(ts.CheckSparseGrowth(t, mine.data(), 5).ok());
  std::vector<float> g(5 * 2, 0.0f);
  t.ApplyKeys(mine.data(), 5, g.data(), 1.0f);  // a push makes them
  EXPECT_TRUE(ts.CheckSparseGrowth(t, mine.data(), 5).ok());  // no new id
  Status s = ts.CheckSparseGrowth(t, mine.data(), 6);
  EXPECT_EQ(s.code(), Code::kTooLarge);
  EXPECT_EQ(s.message(), "sparse table 'e' holds 5 rows on server 0; 1 new ids would pass its share (5) of max_rows 10");
}

TEST(TableSet, SparseGrowthStopsAtTheMemoryBudget) {
  TableSet ts(16 << 10);
  ASSERT_TRUE(ts.Define(View({testing::Sparse("e", 2)}), 1).ok());
  ServerTable& t = *ts.get(0);
  std::vector<uint64_t> ids;
  for (uint64_t id = 0; ids.size() < 4000; ++id)
    if (t.CheckKeys(&id, 1).ok()) ids.push_back(id);
  Status s = ts.CheckSparseGrowth(t, ids.data(), ids.size());
  EXPECT_EQ(s.code(), Code::kTooLarge);
  EXPECT_NE(s.message().find("server 1 holds 0 bytes of tables; 4000 new rows of sparse table 'e' would pass its "
                             "memory budget of 16384 bytes"),
            std::string::npos)
      << s.message();
  EXPECT_TRUE(ts.CheckSparseGrowth(t, ids.data(), 10).ok());
}

class TableSetRestore : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shardps-tables-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // A snapshot of `spec` (id 0) as one server holding every partition, with
  // each row's values shifted by +10.
  void Write(const TableSpec& spec) {
    ServerTable all(spec, 4, {0, 1, 2, 3});
    std::vector<float> g(spec.rows * spec.cols, -10.0f);
    all.ApplyRange(0, spec.rows, g.data(), 1.0f);
    std::vector<snapshot::PartitionData> parts;
    all.Export(0, &parts);
    snapshot::Manifest m;
    m.tables.push_back(spec);
    m.partitions = 4;
    m.num_servers = 1;
    m.owner = {0, 0, 0, 0};
    snapshot::FileEntry f{0, snapshot::ServerFileName(0), 0, 0};
    ASSERT_TRUE(snapshot::WriteServerFile(dir_ + "/" + f.name, 0, parts, &m.parts, &f.bytes, &f.checksum).ok());
    m.files.push_back(f);
    ASSERT_TRUE(snapshot::WriteManifest(dir_, m).ok());
  }
  std::string dir_;
};

TEST_F(TableSetRestore, ATableIsFilledFromTheSnapshotWhenDefined) {
  TableSpec spec = testing::Dense("w", 40, 2).Constant(1.0f).Sgd(1.0f);
  spec.id = 0;
  Write(spec);
  TableSet ts(1 << 20);
  ClusterView v = View({spec});
  v.restore_from = dir_;
  ASSERT_TRUE(ts.Define(v, 1).ok());
  const ServerTable& t = *ts.get(0);
  EXPECT_EQ(t.rows_held(), 20u);
  std::vector<float> rows(20 * 2);
  t.ReadRange(20, 40, rows.data());
  for (float x : rows) EXPECT_EQ(x, 11.0f);
}

TEST_F(TableSetRestore, ATableOfAnotherShapeFailsTheRestore) {
  TableSpec spec = testing::Dense("w", 40, 2);
  spec.id = 0;
  Write(spec);
  TableSet ts(1 << 20);
  ClusterView v = View({testing::Dense("w", 40, 3)});
  v.restore_from = dir_;
  Status s = ts.Define(v, 0);
  EXPECT_EQ(s.code(), Code::kConflict);
  EXPECT_EQ(s.message(), "table 'w' differs from the one in " + dir_);
}

}  // namespace
}  // namespace shardps
