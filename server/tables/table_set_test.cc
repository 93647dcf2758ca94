#include "server/tables/table_set.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace shardps
