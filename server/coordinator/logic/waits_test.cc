#include "server/coordinator/logic/waits.h"

#include <gtest/gtest.h>

namespace shardps {
namespace {

TEST(WhoWaitsOnWhom, AHeldPullWaitsForTheWorkersBelowItsNeed) {
  // Bound 2: worker 2 pulls at clock 17, needing 15; worker 0 is at 14.
  ServerWaitView s{{14, 16, 17}, {{2, 15}}};
  auto w = WhoWaitsOnWhom(2, {s}, {true, true, true});
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].worker, 2);
  EXPECT_EQ(w[0].clock, 17);
  EXPECT_EQ(w[0].waits_for, 0);
  EXPECT_EQ(w[0].their_clock, 14);
}

TEST(WhoWaitsOnWhom, SyncPairsAreMergedOverServersKeepingTheNewest) {
  ServerWaitView a{{5, 6, 6}, {{1, 6}, {2, 6}}};
  ServerWaitView b{{5, 7, 7}, {{1, 7}}};
  auto w = WhoWaitsOnWhom(0, {a, b}, {true, true, true});
  ASSERT_EQ(w.size(), 2u);  // 1 on 0 (clock 7 from b), 2 on 0
  EXPECT_EQ(w[0].worker, 1);
  EXPECT_EQ(w[0].clock, 7);
  EXPECT_EQ(w[0].waits_for, 0);
  EXPECT_EQ(w[1].worker, 2);
  EXPECT_EQ(w[1].waits_for, 0);
}

TEST(WhoWaitsOnWhom, DeadWorkersAndNoHeldPullsMeanNobodyWaits) {
  ServerWaitView s{{3, 9}, {{1, 9}}};
  EXPECT_TRUE(WhoWaitsOnWhom(0, {s}, {false, true}).empty());
  EXPECT_TRUE(WhoWaitsOnWhom(0, {ServerWaitView{{3, 9}, {}}}, {true, true}).empty());
  EXPECT_TRUE(WhoWaitsOnWhom(0, {}, {true, true}).empty());
}

}  // namespace
}  // namespace shardps
