#include "common/cluster/partition.h"

#include <gtest/gtest.h>

#include <set>

namespace shardps {
namespace {

TEST(Partition, RowRangesCoverTableExactlyOnce) {
  for (uint64_t rows : {1ull, 7ull, 10ull, 64ull, 3000ull, 100003ull}) {
    for (uint32_t parts : {1u, 3u, 4u, 64u, 256u}) {
      EXPECT_EQ(PartitionRowBegin(0, rows, parts), 0u);
      EXPECT_EQ(PartitionRowBegin(parts, rows, parts), rows);
      for (uint32_t p = 0; p < parts; ++p)
        EXPECT_LE(PartitionRowBegin(p, rows, parts), PartitionRowBegin(p + 1, rows, parts));
    }
  }
}

TEST(Partition, OfRowAgreesWithRanges) {
  for (uint64_t rows : {1ull, 7ull, 10ull, 3000ull, 4099ull}) {
    for (uint32_t parts : {1u, 3u, 4u, 64u, 256u}) {
      for (uint64_t r = 0; r < rows; ++r) {
        uint32_t p = PartitionOfRow(r, rows, parts);
        ASSERT_LT(p, parts);
        ASSERT_LE(PartitionRowBegin(p, rows, parts), r) << rows << " " << parts << " " << r;
        ASSERT_LT(r, PartitionRowBegin(p + 1, rows, parts)) << rows << " " << parts << " " << r;
      }
    }
  }
}

TEST(Partition, HugeRowCountsDoNotOverflow) {
  uint64_t rows = 1ull << 62;
  uint32_t parts = 1u << 16;
  uint64_t r = rows - 1;
  uint32_t p = PartitionOfRow(r, rows, parts);
  EXPECT_EQ(p, parts - 1);
  EXPECT_LE(PartitionRowBegin(p, rows, parts), r);
}

TEST(Partition, SparseIdsSpreadOverPartitions) {
  const uint32_t parts = 64;
  std::vector<int> count(parts);
  for (uint64_t id = 0; id < 64000; ++id) count[PartitionOfId(id, parts)]++;
  for (int c : count) {
    EXPECT_GT(c, 800);
    EXPECT_LT(c, 1200);
  }
}

TEST(ShardMap, ContiguousBlocksAreBalancedAndOrdered) {
  ShardMap m = ShardMap::Contiguous(64, 3, 1);
  EXPECT_EQ(m.partitions(), 64u);
  std::set<uint32_t> seen;
  for (uint32_t p = 1; p < 64; ++p) EXPECT_GE(m.owner[p], m.owner[p - 1]);
  for (uint32_t s = 0; s < 3; ++s) {
    auto owned = m.OwnedBy(s);
    EXPECT_GE(owned.size(), 21u);
    EXPECT_LE(owned.size(), 22u);
  }
}

TEST(ShardMap, OneReplicaIsTheContiguousBlocks) {
  ShardMap m = ShardMap::Contiguous(64, 3, 1);
  ASSERT_EQ(m.groups(), 3u);
  for (uint32_t p = 0; p < 64; ++p) EXPECT_EQ(m.GroupOf(p), m.owner[p]);
  for (uint32_t g = 0; g < 3; ++g) {
    EXPECT_EQ(m.replicas[g], std::vector<uint32_t>{g});
    EXPECT_TRUE(m.Backups(g).empty());
    EXPECT_EQ(m.HeldBy(g), m.OwnedBy(g));
    EXPECT_EQ(m.OfGroup(g), m.OwnedBy(g));
  }
}

TEST(ShardMap, ReplicasGoToTheNextServersOtherHostsFirst) {
  ShardMap m = ShardMap::Replicated(8, 4, 2, {}, 1);
  EXPECT_EQ(m.replicas, (std::vector<std::vector<uint32_t>>{{0, 1}, {1, 2}, {2, 3}, {3, 0}}));
  EXPECT_EQ(m.OwnedBy(1), (std::vector<uint32_t>{2, 3}));
  EXPECT_EQ(m.HeldBy(1), (std::vector<uint32_t>{0, 1, 2, 3}));  // group 0's copy and its own
  EXPECT_EQ(m.Backups(3), std::vector<uint32_t>{0});
  // Servers 0, 1 on host a, 2, 3 on host b: each group's backup is on the other host.
  ShardMap h = ShardMap::Replicated(8, 4, 2, {"a", "a", "b", "b"}, 1);
  EXPECT_EQ(h.replicas, (std::vector<std::vector<uint32_t>>{{0, 2}, {1, 2}, {2, 0}, {3, 0}}));
  // More copies than hosts: the rest in ring order.
  ShardMap three = ShardMap::Replicated(6, 3, 3, {"a", "a", "b"}, 1);
  EXPECT_EQ(three.replicas, (std::vector<std::vector<uint32_t>>{{0, 2, 1}, {1, 2, 0}, {2, 0, 1}}));
  // Never more copies than servers.
  EXPECT_EQ(ShardMap::Replicated(4, 2, 5, {}, 1).replicas[0].size(), 2u);
}

// [job] groups: more groups than servers, each server a contiguous run of
// them (so a dense table is still one row range per server).
TEST(ShardMap, MoreGroupsThanServersAreContiguousRunsPerServer) {
  ShardMap m = ShardMap::Replicated(16, 2, 2, {}, 1, 4);
  ASSERT_EQ(m.groups(), 4u);
  EXPECT_EQ(m.replicas, (std::vector<std::vector<uint32_t>>{{0, 1}, {0, 1}, {1, 0}, {1, 0}}));
  EXPECT_EQ(m.OfGroup(1), (std::vector<uint32_t>{4, 5, 6, 7}));
  EXPECT_EQ(m.OwnedBy(0), (std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(m.Load(0), 4u);
  // groups = servers (or 0) is the one-group-per-server map of before.
  EXPECT_EQ(ShardMap::Replicated(8, 4, 2, {}, 1, 4).replicas, ShardMap::Replicated(8, 4, 2, {}, 1).replicas);
  EXPECT_EQ(ShardMap::Replicated(8, 4, 2, {}, 1, 4).group, ShardMap::Replicated(8, 4, 2, {}, 1).group);
}

// A move's end: one copy of a group leaves, the others keep their order;
// the primary leaving makes the next copy the primary.
TEST(ShardMap, ACopyLeavingAGroupKeepsTheRestOfItsChain) {
  ShardMap m = ShardMap::Replicated(16, 2, 2, {}, 1, 4).WithJoining(2, 2).WithCopy(2, 2);
  EXPECT_EQ(m.replicas[2], (std::vector<uint32_t>{1, 0, 2}));
  EXPECT_EQ(m.Load(2), 1u);
  ShardMap a = m.WithoutCopy(2, 0);
  EXPECT_EQ(a.version, m.version + 1);
  EXPECT_EQ(a.replicas[2], (std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(a.Feeder(2, 2), 1u);
  ShardMap b = m.WithoutCopy(2, 1);
  EXPECT_EQ(b.replicas[2], (std::vector<uint32_t>{0, 2}));
  EXPECT_EQ(b.owner[8], 0u);
  EXPECT_EQ(b.OwnedBy(1), (std::vector<uint32_t>{12, 13, 14, 15}));
  // The last copy never leaves.
  EXPECT_EQ(b.WithoutCopy(2, 0).WithoutCopy(2, 2).replicas[2], std::vector<uint32_t>{2});
}

TEST(ShardMap, WithoutAServerItsGroupsAreServedByTheirBackups) {
  ShardMap m = ShardMap::Replicated(8, 4, 2, {}, 3);
  std::vector<uint32_t> lost;
  ShardMap w = m.Without(1, &lost);
  EXPECT_TRUE(lost.empty());
  EXPECT_EQ(w.version, 4u);
  EXPECT_EQ(w.replicas, (std::vector<std::vector<uint32_t>>{{0}, {2}, {2, 3}, {3, 0}}));
  EXPECT_EQ(w.OwnedBy(2), (std::vector<uint32_t>{2, 3, 4, 5}));  // group 1 and its own
  EXPECT_TRUE(w.OwnedBy(1).empty());
  EXPECT_EQ(w.group, m.group);  // groups never change
  // Group 1 had servers 1 and 2: with 2 gone too, it is lost.
  ShardMap w2 = w.Without(2, &lost);
  EXPECT_EQ(lost, std::vector<uint32_t>{1});
  EXPECT_EQ(w2.Primary(1), ShardMap::kNone);
  EXPECT_EQ(w2.owner[2], ShardMap::kNone);
  EXPECT_EQ(w2.Primary(2), 3u);
  // With one replica a dead server's group is lost at once.
  lost.clear();
  ShardMap one = ShardMap::Contiguous(4, 2, 1).Without(0, &lost);
  EXPECT_EQ(lost, std::vector<uint32_t>{0});
}

// Re-replication: a server being filled with a copy of a group holds it
// (its partitions) but is no copy and serves nothing until WithCopy puts it
// at the end of the chain; the last copy feeds it; a dead joiner's fill is
// over, a dead source's fill goes on from the copy before it.
TEST(ShardMap, AServerBeingFilledJoinsTheEndOfTheChainOnceFilled) {
  ShardMap m = ShardMap::Replicated(8, 4, 2, {}, 3);  // group 1 on servers 1, 2
  std::vector<uint32_t> lost;
  m = m.Without(2, &lost);  // group 1 on 1 only, group 2 on 3 only
  ShardMap j = m.WithJoining(1, 0);
  EXPECT_EQ(j.version, m.version + 1);
  EXPECT_EQ(j.Joining(1), 0u);
  EXPECT_EQ(j.Joining(2), ShardMap::kNone);
  EXPECT_TRUE(j.Holds(0, 1));
  EXPECT_FALSE(j.IsCopy(0, 1));
  EXPECT_EQ(j.Copies(1), 1u);
  EXPECT_EQ(j.Feeder(1, 0), 1u);               // the last full copy feeds it
  EXPECT_EQ(j.OwnedBy(0), m.OwnedBy(0));       // it serves nothing more
  EXPECT_EQ(j.HeldBy(0), (std::vector<uint32_t>{0, 1, 2, 3, 6, 7}));  // but holds group 1's partitions
  ShardMap full = j.WithCopy(1, 0);
  EXPECT_EQ(full.replicas[1], (std::vector<uint32_t>{1, 0}));
  EXPECT_TRUE(full.joining.empty());
  EXPECT_EQ(full.Feeder(1, 0), 1u);
  EXPECT_EQ(full.OwnedBy(1), (std::vector<uint32_t>{2, 3}));
  // The joiner dies: the fill is over. The source dies: nothing to fill from.
  EXPECT_TRUE(j.Without(0, &lost).joining.empty());
  lost.clear();
  ShardMap gone = j.Without(1, &lost);
  EXPECT_EQ(lost, std::vector<uint32_t>{1});
  EXPECT_TRUE(gone.joining.empty());
}

}  // namespace
}  // namespace shardps
