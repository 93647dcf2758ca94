#include "server/coordinator/logic/table_directory.h"

#include <gtest/gtest.h>

#include "server/tables/table.h"
#include "tests/table_spec.h"

namespace shardps {
namespace {

using Clock = TableDirectory::Clock;

TEST(TableDirectory, TheJobFilesTablesAreNumberedInOrder) {
  TableDirectory d({testing::Dense("w", 10, 2), testing::Sparse("e", 4)});
  ASSERT_EQ(d.tables().size(), 2u);
  EXPECT_EQ(d.tables()[0].id, 0u);
  EXPECT_EQ(d.tables()[1].id, 1u);
  EXPECT_EQ(d.tables()[1].name, "e");
  EXPECT_FALSE(d.complete());
  EXPECT_FALSE(d.ready());
}

TEST(TableDirectory, AKnownTableIsAnsweredAndAnotherShapeRefused) {
  TableDirectory d({testing::Dense("w", 10, 2)});
  d.SetMap(ShardMap::Contiguous(4, 1, 1));
  d.AwaitMap(5, 1);
  d.Ack(0, 5);
  ASSERT_TRUE(d.ready());
  auto l = d.Find(testing::Dense("w", 10, 2), {"a", 1}, false);
  EXPECT_EQ(l.kind, TableDirectory::Lookup::kAnswer);
  EXPECT_EQ(l.table, 0u);
  l = d.Find(testing::Dense("w", 10, 3), {"a", 2}, false);
  EXPECT_EQ(l.kind, TableDirectory::Lookup::kRefused);
  EXPECT_EQ(l.error.code(), Code::kConflict);
  EXPECT_EQ(l.error.message(), "table 'w' already exists with another shape, initializer or optimizer");
  EXPECT_EQ(d.Find(testing::Dense("x", 10, 2), {"a", 3}, false).kind, TableDirectory::Lookup::kNew);
}

TEST(TableDirectory, TheClusterIsReadyOnceEveryServerAcknowledgedTheMap) {
  TableDirectory d({});
  EXPECT_FALSE(d.AwaitReady({"early", 1}));
  d.SetMap(ShardMap::Contiguous(8, 2, 1));
  EXPECT_TRUE(d.complete());
  d.AwaitMap(10, 2);
  EXPECT_TRUE(d.Ack(0, 9).clusters.empty());  // an older update
  EXPECT_FALSE(d.ready());
  EXPECT_TRUE(d.Ack(0, 10).clusters.empty());
  EXPECT_FALSE(d.ready());
  const auto a = d.Ack(1, 12);  // acknowledges everything up to 12
  EXPECT_TRUE(d.ready());
  ASSERT_EQ(a.clusters.size(), 1u);
  EXPECT_EQ(a.clusters[0].routing_id, "early");
  EXPECT_TRUE(d.AwaitReady({"late", 2}));
}

TEST(TableDirectory, ANewTableIsAnsweredOnceEveryServerAcknowledgedItsUpdate) {
  TableDirectory d({});
  d.SetMap(ShardMap::Contiguous(4, 2, 1));
  d.AwaitMap(1, 2);
  d.Ack(0, 1);
  d.Ack(1, 1);
  const uint32_t id = d.Define(testing::Dense("w", 10, 2));
  EXPECT_EQ(id, 0u);
  d.AwaitTable(id, {"creator", 7}, 4, Clock::now() + std::chrono::seconds(30), {0, 1});
  // A second creator of the same table waits with the first.
  EXPECT_EQ(d.Find(testing::Dense("w", 10, 2), {"second", 8}, false).kind, TableDirectory::Lookup::kWaits);
  EXPECT_TRUE(d.Ack(0, 3).tables.empty());  // before the table's update
  EXPECT_TRUE(d.Ack(0, 4).tables.empty());
  const auto a = d.Ack(1, 4);
  ASSERT_EQ(a.tables.size(), 2u);
  EXPECT_EQ(a.tables[0].first.routing_id, "creator");
  EXPECT_EQ(a.tables[1].first.routing_id, "second");
  EXPECT_EQ(a.tables[1].second, id);
  EXPECT_EQ(d.Find(testing::Dense("w", 10, 2), {"third", 9}, false).kind, TableDirectory::Lookup::kAnswer);
}

TEST(TableDirectory, AResumedCoordinatorAnswersKnownTablesOnceTheClusterIsReady) {
  TableDirectory d({testing::Dense("w", 10, 2)});
  const auto l = d.Find(testing::Dense("w", 10, 2), {"a", 1}, /*resumed=*/true);
  EXPECT_EQ(l.kind, TableDirectory::Lookup::kWaits);
  d.SetMap(ShardMap::Contiguous(4, 1, 1));
  d.AwaitMap(3, 1);
  const auto a = d.Ack(0, 3);
  ASSERT_EQ(a.tables.size(), 1u);
  EXPECT_EQ(a.tables[0].first.routing_id, "a");
  EXPECT_EQ(a.tables[0].second, 0u);
}

TEST(TableDirectory, UnconfirmedTablesExpireNamingTheMissingServers) {
  TableDirectory d({});
  const auto t0 = Clock::now();
  d.AwaitTable(d.Define(testing::Dense("w", 10, 2)), {"c", 1}, 2, t0 + std::chrono::seconds(1), {0, 2});
  EXPECT_TRUE(d.Expire(t0).empty());
  d.Ack(0, 2);
  const auto gone = d.Expire(t0 + std::chrono::seconds(2));
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].first.routing_id, "c");
  EXPECT_EQ(gone[0].second.code(), Code::kUnavailable);
  EXPECT_EQ(gone[0].second.message(), "servers [2] did not confirm table 'w' in time");
  EXPECT_TRUE(d.Expire(t0 + std::chrono::seconds(3)).empty());
}

TEST(TableDirectory, ADenseTableMustFitEachServersBudgetNextToTheTablesBeforeIt) {
  TableDirectory d({testing::Dense("a", 100, 10)});
  const uint32_t partitions = 4;
  // No budget known: anything fits; sparse tables without max_rows are counted as rows come.
  EXPECT_TRUE(d.CheckBudget(testing::Dense("b", 1000000, 100), 1, {0, 0}, partitions).ok());
  EXPECT_TRUE(d.CheckBudget(testing::Sparse("s", 1000), 1, {1, 1}, partitions).ok());
  // Before there is a map: the contiguous one, server 0 holding partitions 0 and 1.
  const ShardMap map = ShardMap::Contiguous(partitions, 2, 1);
  const TableSpec b = testing::Dense("b", 200, 10);
  const uint64_t used = ServerTable::DenseBytes(d.tables()[0], partitions, map.OwnedBy(0));
  const uint64_t need = ServerTable::DenseBytes(b, partitions, map.OwnedBy(0));
  const uint64_t all = need + ServerTable::DenseBytes(b, partitions, map.OwnedBy(1));
  ASSERT_GT(used, 0u);
  ASSERT_GT(need, 0u);
  EXPECT_TRUE(d.CheckBudget(b, 1, {used + need, 0}, partitions).ok());
  Status s = d.CheckBudget(b, 1, {used + need - 1, 0}, partitions);
  EXPECT_EQ(s.code(), Code::kTooLarge);
  EXPECT_EQ(s.message(), "table 'b' needs " + std::to_string(need) + " bytes on server 0 (" + std::to_string(all) +
                             " in all), but server 0 has " + std::to_string(need - 1) + " of its " +
                             std::to_string(used + need - 1) + "-byte memory budget left; nothing was created");
  // Counting only the tables before it (the first map checks each in turn).
  EXPECT_TRUE(d.CheckBudget(b, 0, {need, 0}, partitions).ok());
  // On the map there is: a map giving everything to server 1.
  ShardMap to_one;
  to_one.version = 1;
  to_one.owner = {1, 1, 1, 1};
  d.SetMap(to_one);
  EXPECT_TRUE(d.CheckBudget(b, 1, {1, 0}, partitions).ok());
  EXPECT_EQ(d.CheckBudget(b, 1, {0, 1}, partitions).code(), Code::kTooLarge);
}

TEST(TableDirectory, ASparseTableWithMaxRowsMustFitItsShareOfThem) {
  TableDirectory d({});
  const uint32_t partitions = 4;
  // 10 M rows of 16 bf16 values with Adagrad's 16 floats of state: each of
  // two servers holds half: 5 M records of 112 bytes and 8 bytes of index.
  const TableSpec e = testing::Sparse("e", 16).Adagrad(0.05f).Type(DType::kBF16).MaxRows(10'000'000);
  const uint64_t half = 5'000'000ull * (112 + 8);
  const ShardMap map = ShardMap::Contiguous(partitions, 2, 1);
  ASSERT_EQ(ServerTable::BudgetBytes(e, partitions, map.OwnedBy(0)), half);
  EXPECT_TRUE(d.CheckBudget(e, 0, {half, half}, partitions).ok());
  Status s = d.CheckBudget(e, 0, {half, half - 1}, partitions);
  EXPECT_EQ(s.code(), Code::kTooLarge);
  EXPECT_EQ(s.message(), "table 'e' needs " + std::to_string(half) + " bytes on server 1 (" + std::to_string(2 * half) +
                             " in all), but server 1 has " + std::to_string(half - 1) + " of its " +
                             std::to_string(half - 1) + "-byte memory budget left; nothing was created");
}

TEST(TableDirectory, ARollbackForgetsTheMapAndRefusesUnconfirmedTables) {
  TableDirectory d({testing::Dense("a", 10, 2)});
  d.SetMap(ShardMap::Contiguous(4, 1, 1));
  d.AwaitMap(1, 1);
  d.Ack(0, 1);
  d.AwaitTable(d.Define(testing::Dense("b", 10, 2)), {"c", 3}, 2, Clock::now() + std::chrono::seconds(30), {0});
  const auto refused = d.RollBack();
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].routing_id, "c");
  EXPECT_FALSE(d.complete());
  EXPECT_FALSE(d.ready());
  EXPECT_EQ(d.tables().size(), 2u);  // the tables stay
  EXPECT_TRUE(d.Ack(0, 5).tables.empty());
  EXPECT_FALSE(d.ready());  // no map update awaited yet
}

// Replicas: a changed map is told to clients only once every live server
// acknowledged it (a dead one not waited for); a resumed job makes its map
// again from the saved replica lists, without a server declared dead
// meanwhile, and a rollback forgets them (the new servers start afresh).
TEST(TableDirectory, AFailOversMapIsPublishedOnceTheLiveServersHoldItAndResumedWithoutTheDead) {
  TableDirectory d({});
  d.set_replicas(2);
  const ShardMap first = ShardMap::Replicated(6, 3, 2, {}, 1);
  d.SetMap(first);
  std::vector<uint32_t> lost;
  d.ChangeMap(first.Without(1, &lost), 7, {0, 2});
  EXPECT_EQ(d.map().version, 2u);
  EXPECT_EQ(d.published().version, 1u);
  d.Ack(0, 7);
  EXPECT_EQ(d.published().version, 1u);
  d.ForgetServer(2);  // server 2 died too: not waited for
  EXPECT_EQ(d.published().version, 2u);

  uint64_t saved_version = 0;
  std::vector<std::vector<uint32_t>> saved;
  ASSERT_TRUE(d.MapToSave(&saved_version, &saved));
  EXPECT_EQ(saved_version, 2u);
  EXPECT_EQ(saved, d.map().replicas);

  TableDirectory resumed({});
  EXPECT_FALSE(resumed.MapToSave(&saved_version, &saved));  // no map: the first is made from the layout
  const ShardMap four = ShardMap::Replicated(8, 4, 2, {}, 1);  // groups on {0,1} {1,2} {2,3} {3,0}
  lost.clear();
  resumed.SetResumedMap(2, four.Without(1, &lost).replicas);  // saved after server 1's fail-over
  // Saved again before the servers came back: the resumed map, not none
  // (the next coordinator would make v1, older than the servers' v2).
  ASSERT_TRUE(resumed.MapToSave(&saved_version, &saved));
  EXPECT_EQ(saved_version, 2u);
  EXPECT_EQ(saved, four.Without(1, &lost).replicas);
  resumed.DropFromResumed(four, 3, &lost);  // server 3 dead before the servers came back
  ASSERT_TRUE(lost.empty());
  const ShardMap again = resumed.FirstMap(four);
  EXPECT_EQ(again.version, 3u);
  EXPECT_EQ(again.replicas, (std::vector<std::vector<uint32_t>>{{0}, {2}, {2}, {0}}));
  EXPECT_EQ(again.owner, (std::vector<uint32_t>{0, 0, 2, 2, 2, 2, 0, 0}));
  resumed.DropFromResumed(four, 0, &lost);  // groups 0 and 3 would lose their last copy: nothing changes
  EXPECT_EQ(lost, (std::vector<uint32_t>{0, 3}));
  EXPECT_EQ(resumed.FirstMap(four).version, 3u);
  resumed.RollBack();
  EXPECT_EQ(resumed.FirstMap(four).replicas, four.replicas);
}

}  // namespace
}  // namespace shardps
