#include "tools/ctl_status.h"

#include <gtest/gtest.h>

namespace shardps::ctl {
namespace {

TEST(WhoWaitsOnWhom, BoundedWaitsOnlyBeyondTheBound) {
  // Worker 2 at 17 with bound 2 needs everyone at >= 15: worker 0 (14) holds it.
  std::vector<WorkerClock> w{{0, 14, true}, {1, 16, true}, {2, 17, true}};
  auto waits = WhoWaitsOnWhom(Consistency::kBounded, 2, w);
  ASSERT_EQ(waits.size(), 1u);
  EXPECT_EQ(waits[0].worker, 2);
  EXPECT_EQ(waits[0].clock, 17);
  EXPECT_EQ(waits[0].waits_for, 0);
  EXPECT_EQ(waits[0].their_clock, 14);
  EXPECT_TRUE(WhoWaitsOnWhom(Consistency::kBounded, 3, w).empty());
}

TEST(WhoWaitsOnWhom, SyncWaitsForEverySlowerWorker) {
  std::vector<WorkerClock> w{{0, 5, true}, {1, 6, true}, {2, 7, true}};
  auto waits = WhoWaitsOnWhom(Consistency::kSync, 0, w);
  ASSERT_EQ(waits.size(), 3u);  // 1 on 0, 2 on 0, 2 on 1
  EXPECT_EQ(waits[0].worker, 1);
  EXPECT_EQ(waits[0].waits_for, 0);
  EXPECT_EQ(waits[1].worker, 2);
  EXPECT_EQ(waits[1].waits_for, 0);
  EXPECT_EQ(waits[2].worker, 2);
  EXPECT_EQ(waits[2].waits_for, 1);
}

TEST(WhoWaitsOnWhom, DeadUnknownAndAsyncWaitForNobody) {
  std::vector<WorkerClock> w{{0, 1, false}, {1, 9, true}, {2, -1, true}};
  EXPECT_TRUE(WhoWaitsOnWhom(Consistency::kSync, 0, w).empty());
  std::vector<WorkerClock> v{{0, 1, true}, {1, 9, true}};
  EXPECT_TRUE(WhoWaitsOnWhom(Consistency::kAsync, 0, v).empty());
  EXPECT_EQ(WhoWaitsOnWhom(Consistency::kSync, 0, v).size(), 1u);
}

}  // namespace
}  // namespace shardps::ctl
