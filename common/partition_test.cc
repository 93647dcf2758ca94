#include "common/partition.h"

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

}  // namespace
}  // namespace shardps
