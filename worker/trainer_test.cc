// The trainer's decisions, without a cluster: which batches an epoch
// trains, when a worker is held back, how long a straggler sleeps, and the
// progress line. (The whole loop against real servers: tests/trainer_test.cc.)
#include "worker/trainer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <set>
#include <string>
#include <vector>

namespace shardps::worker {
namespace {

TEST(EpochBatches, AStaticShardIsEveryStepInOrder) {
  EpochBatches b([](uint64_t, uint64_t, uint32_t, WorkRange*) { return Status::Internal("no claims"); },
                 [] { return false; }, false, 4, 8);
  for (int epoch = 1; epoch <= 2; ++epoch) {
    b.Start(epoch);
    std::vector<int> got;
    for (int step; b.Next(&step).ok() && step >= 0;) got.push_back(step);
    EXPECT_EQ(got, (std::vector<int>{0, 1, 2, 3}));
  }
}

// Pooled: batches come from claims of the epoch's pool, `chunk` at a time,
// until a claim comes back empty; a failed claim is the trainer's error.
TEST(EpochBatches, APoolIsClaimedInChunksUntilEmpty) {
  std::vector<std::tuple<uint64_t, uint64_t, uint32_t>> claims;
  uint64_t next = 0;
  const uint64_t total = 10;
  EpochBatches b(
      [&](uint64_t pool, uint64_t t, uint32_t max, WorkRange* out) {
        claims.emplace_back(pool, t, max);
        *out = {next, std::min(total, next + 3)};  // the coordinator grants 3 (fewer than asked)
        next = out->end;
        return Status::OK();
      },
      [] { return false; }, true, 10, 4);
  b.Start(7);
  std::vector<int> got;
  int step;
  while (b.Next(&step).ok() && step >= 0) got.push_back(step);
  EXPECT_EQ(got, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  ASSERT_EQ(claims.size(), 5u);  // 4 grants and the empty one
  EXPECT_EQ(claims[0], std::make_tuple(uint64_t{7}, uint64_t{10}, uint32_t{4}));

  EpochBatches failing([](uint64_t, uint64_t, uint32_t, WorkRange*) { return Status::Timeout("coordinator away"); },
                       [] { return false; }, true, 10, 4);
  failing.Start(1);
  Status s = failing.Next(&step);
  EXPECT_EQ(s.code(), Code::kTimeout);
  EXPECT_EQ(step, -1);
}

TEST(EpochBatches, AStopEndsTheEpoch) {
  bool stop = false;
  EpochBatches b([](uint64_t, uint64_t, uint32_t, WorkRange*) { return Status::OK(); }, [&] { return stop; }, false,
                 100, 8);
  b.Start(1);
  int step;
  ASSERT_TRUE(b.Next(&step).ok());
  EXPECT_EQ(step, 0);
  stop = true;
  ASSERT_TRUE(b.Next(&step).ok());
  EXPECT_EQ(step, -1);
  EXPECT_TRUE(b.stopped());
}

TEST(Trainer, HeldBackOnlyUnderBoundedStalenessBeyondTheBound) {
  // clock 5, s = 2: held back while the slowest was below clock 3.
  EXPECT_TRUE(HeldBack(Consistency::kBounded, 5, 2, 2));
  EXPECT_FALSE(HeldBack(Consistency::kBounded, 5, 2, 3));
  EXPECT_FALSE(HeldBack(Consistency::kSync, 5, 0, 0));
  EXPECT_FALSE(HeldBack(Consistency::kAsync, 5, 0, 0));
  EXPECT_TRUE(HeldBack(Consistency::kBounded, 1, 0, 0));
}

TEST(Trainer, AStragglerSleepsItsOwnShareTimesTheSlowdownLessOne) {
  EXPECT_DOUBLE_EQ(StragglerSleep(0.010, 0.002, 2.0), 0.012);
  EXPECT_DOUBLE_EQ(StragglerSleep(0.010, 0.002, 3.0), 0.024);
  EXPECT_DOUBLE_EQ(StragglerSleep(0.010, 0.002, 1.0), 0.0);
  EXPECT_DOUBLE_EQ(StragglerSleep(-1.0, 0.0, 2.0), 0.0);  // a clock step back: no negative sleep
}

TEST(Progress, ALineSaysEpochStepLossRateAndStaleness) {
  FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  Progress p(0.0, f);  // a line every step
  p.Step(3, 2, 10, 40, 64, 0.5, 1);
  p.Step(3, 2, 11, 40, 64, 0.25, 4);
  EXPECT_EQ(p.samples(), 128);
  std::rewind(f);
  char buf[4096] = {};
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  std::string out(buf, n);
  EXPECT_NE(out.find("worker 3 | epoch 2 step    10/40 | loss 0.5000 |"), std::string::npos) << out;
  EXPECT_NE(out.find("worker 3 | epoch 2 step    11/40 | loss 0.2500 |"), std::string::npos) << out;
  EXPECT_NE(out.find("| staleness 4\n"), std::string::npos) << out;
}

}  // namespace
}  // namespace shardps::worker
