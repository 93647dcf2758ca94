#include "server/coordinator/logic/barrier.h"

#include <gtest/gtest.h>

namespace shardps {
namespace {

TEST(Barrier, ReleasedOnceEveryLiveWorkerArrived) {
  Barrier b;
  EXPECT_TRUE(b.MaybeRelease({0, 1}).empty());  // nobody waits
  b.Arrive(1, {"w1", 10});
  EXPECT_TRUE(b.MaybeRelease({0, 1}).empty());
  b.Arrive(0, {"w0", 11});
  const auto released = b.MaybeRelease({0, 1});
  ASSERT_EQ(released.size(), 2u);
  EXPECT_EQ(released[0].routing_id, "w0");  // by rank
  EXPECT_EQ(released[1].request_id, 10u);
  EXPECT_EQ(b.generation(), 1u);
  EXPECT_TRUE(b.MaybeRelease({0, 1}).empty());  // the next generation is empty
}

TEST(Barrier, AWorkerNoLongerLiveIsNotWaitedFor) {
  Barrier b;
  b.Arrive(0, {"w0", 1});
  b.Arrive(2, {"w2", 2});
  EXPECT_TRUE(b.MaybeRelease({0, 1, 2}).empty());
  // Worker 1 died: the membership change asks again.
  EXPECT_EQ(b.MaybeRelease({0, 2}).size(), 2u);
}

TEST(Barrier, ARequestSentAgainReplacesTheFirst) {
  Barrier b;
  b.Arrive(0, {"w0", 1});
  b.Arrive(0, {"w0-again", 2});
  const auto released = b.MaybeRelease({0});
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0].request_id, 2u);
}

TEST(Barrier, CancelReturnsTheWaitingRequests) {
  Barrier b;
  b.Arrive(3, {"w3", 9});
  const auto waiting = b.Cancel();
  ASSERT_EQ(waiting.size(), 1u);
  EXPECT_EQ(waiting[0].routing_id, "w3");
  EXPECT_TRUE(b.MaybeRelease({}).empty());
  EXPECT_EQ(b.generation(), 0u);
}

}  // namespace
}  // namespace shardps
