// RowCache (row_cache.h): a row is served while its read is within the
// bound, never past it; least recently used rows go first; counts.
#include "client/row_cache.h"

#include <gtest/gtest.h>

#include <vector>

namespace shardps::detail {
namespace {

TEST(RowCache, ServesARowOnlyWhileItsReadIsWithinTheBound) {
  RowCache c(1 << 20);
  const float row[2] = {1, 2};
  float out[2] = {0, 0};
  c.Put(0, 42, /*clock=*/5, row, 2);
  EXPECT_TRUE(c.Get(0, 42, 5, 2, 2, out));
  EXPECT_EQ(out[1], 2);
  EXPECT_TRUE(c.Get(0, 42, 7, 2, 2, out));   // 7 - 5 <= 2
  EXPECT_FALSE(c.Get(0, 42, 8, 2, 2, out));  // 8 - 5 > 2: never older than the bound
  EXPECT_FALSE(c.Get(1, 42, 5, 2, 2, out));  // another table
  EXPECT_FALSE(c.Get(0, 43, 5, 2, 2, out));
  const float newer[2] = {3, 4};
  c.Put(0, 42, 8, newer, 2);
  EXPECT_TRUE(c.Get(0, 42, 8, 2, 2, out));
  EXPECT_EQ(out[0], 3);
  c.Put(0, 42, 6, row, 2);  // an older read arriving late keeps the newer row
  EXPECT_TRUE(c.Get(0, 42, 10, 2, 2, out));
  EXPECT_EQ(out[0], 3);
  const RowCache::Stats s = c.stats();
  EXPECT_EQ(s.lookups, 7u);
  EXPECT_EQ(s.hits, 4u);
  EXPECT_EQ(s.rows, 1u);
}

TEST(RowCache, TheLeastRecentlyUsedRowsGoFirstWhenFull) {
  const uint64_t one = RowCache::RowBytes(4);
  RowCache c(3 * one);
  const float row[4] = {};
  float out[4];
  for (uint64_t k = 0; k < 3; ++k) c.Put(0, k, 0, row, 4);
  ASSERT_TRUE(c.Get(0, 0, 0, 1, 4, out));  // 0 is now the most recent
  c.Put(0, 3, 0, row, 4);                  // evicts 1
  EXPECT_TRUE(c.Get(0, 0, 0, 1, 4, out));
  EXPECT_FALSE(c.Get(0, 1, 0, 1, 4, out));
  EXPECT_TRUE(c.Get(0, 2, 0, 1, 4, out));
  EXPECT_TRUE(c.Get(0, 3, 0, 1, 4, out));
  EXPECT_EQ(c.stats().bytes, 3 * one);
  RowCache tiny(10);  // smaller than a row: keeps nothing
  tiny.Put(0, 1, 0, row, 4);
  EXPECT_EQ(tiny.stats().rows, 0u);
}

}  // namespace
}  // namespace shardps::detail
