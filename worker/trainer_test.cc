// The trainer's decisions, without a cluster: which batches an epoch
// trains, when a worker is held back, how long a straggler sleeps, and the
// progress line. (The whole loop against real servers: tests/trainer_test.cc.)
#include "worker/trainer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace shardps::worker {
namespace {

using Claim = std::tuple<uint64_t, uint64_t, uint32_t, uint32_t, bool>;  // pool, total, max, granule, per clock

std::vector<std::pair<uint64_t, int>> Drain(EpochBatches& b) {
  std::vector<std::pair<uint64_t, int>> got;
  for (Batch x; b.Next(&x).ok() && (x.n > 0 || x.idle);) got.emplace_back(x.first, x.idle ? -1 : x.n);
  return got;
}

TEST(EpochBatches, AStaticShardIsEveryWholeBatchInOrder) {
  EpochBatches b([](uint64_t, uint64_t, uint32_t, const ClaimOptions&, WorkRange*) { return Status::Internal("no claims"); },
                 [] { return false; }, BatchSource::kShard, 4 * 8 + 5, 8, 8);
  EXPECT_EQ(b.examples(), 32u);  // whole batches only: every shard takes the same number of steps
  for (int epoch = 1; epoch <= 2; ++epoch) {
    b.Start(epoch);
    EXPECT_EQ(Drain(b), (std::vector<std::pair<uint64_t, int>>{{0, 8}, {8, 8}, {16, 8}, {24, 8}}));
    EXPECT_EQ(b.handed(), 32u);
  }
}

// Pooled: batches come from claims of the epoch's pool (units: examples,
// whole batches), `chunk` batches at a time, until a claim comes back
// empty; the last batch of the pool may be partial; a failed claim is the
// trainer's error.
TEST(EpochBatches, APoolIsClaimedInChunksOfWholeBatchesUntilEmpty) {
  std::vector<Claim> claims;
  uint64_t next = 0;
  const uint64_t total = 10 * 4 + 3;
  EpochBatches b(
      [&](uint64_t pool, uint64_t t, uint32_t max, const ClaimOptions& o, WorkRange* out) {
        claims.emplace_back(pool, t, max, o.granule, o.per_clock);
        *out = WorkRange{};
        out->begin = next;
        out->end = std::min(total, next + 12);  // the coordinator grants 3 batches (fewer than asked)
        out->handed = total;
        next = out->end;
        return Status::OK();
      },
      [] { return false; }, BatchSource::kPool, total, 4, 4);
  b.Start(7);
  std::vector<std::pair<uint64_t, int>> want;
  for (uint64_t f = 0; f < 40; f += 4) want.emplace_back(f, 4);
  want.emplace_back(40, 3);
  EXPECT_EQ(Drain(b), want);
  ASSERT_EQ(claims.size(), 5u);  // 4 grants and the empty one
  EXPECT_EQ(claims[0], Claim(7, total, 16, 4, false));
  EXPECT_EQ(b.handed(), total);

  EpochBatches failing(
      [](uint64_t, uint64_t, uint32_t, const ClaimOptions&, WorkRange*) { return Status::Timeout("coordinator away"); },
      [] { return false; }, BatchSource::kPool, 10, 4, 4);
  failing.Start(1);
  Batch x;
  Status s = failing.Next(&x);
  EXPECT_EQ(s.code(), Code::kTimeout);
  EXPECT_EQ(x.n, 0);
}

// Sync: one claim per clock, one batch each; "wait" is an idle clock, the
// pool's "finished" ends the epoch; a dead worker's batch of an earlier
// epoch is trained in that epoch's order.
TEST(EpochBatches, PerClockOneBatchPerClaimIdleClocksAndEarlierEpochs) {
  std::vector<Claim> claims;
  std::vector<WorkRange> answers(4);
  answers[0].begin = 0, answers[0].end = 8, answers[0].pool = 3;
  answers[1].begin = 16, answers[1].end = 24, answers[1].pool = 2;  // handed back by a dead worker
  answers[2].wait = true;
  answers[3].handed = 40;  // finished
  size_t i = 0;
  EpochBatches b(
      [&](uint64_t pool, uint64_t t, uint32_t max, const ClaimOptions& o, WorkRange* out) {
        claims.emplace_back(pool, t, max, o.granule, o.per_clock);
        *out = answers.at(i++);
        return Status::OK();
      },
      [] { return false; }, BatchSource::kPerClock, 40, 8, 4);
  b.Start(3);
  std::vector<Batch> got;
  for (Batch x; b.Next(&x).ok() && (x.n > 0 || x.idle);) got.push_back(x);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].epoch, 3);
  EXPECT_EQ(got[0].n, 8);
  EXPECT_EQ(got[1].epoch, 2);
  EXPECT_EQ(got[1].first, 16u);
  EXPECT_TRUE(got[2].idle);
  EXPECT_EQ(claims[0], Claim(3, 40, 8, 1, true));
  EXPECT_EQ(b.handed(), 40u);
}

TEST(EpochBatches, AStopEndsTheEpoch) {
  bool stop = false;
  EpochBatches b([](uint64_t, uint64_t, uint32_t, const ClaimOptions&, WorkRange*) { return Status::OK(); },
                 [&] { return stop; }, BatchSource::kShard, 800, 8, 8);
  b.Start(1);
  Batch x;
  ASSERT_TRUE(b.Next(&x).ok());
  EXPECT_EQ(x.n, 8);
  stop = true;
  ASSERT_TRUE(b.Next(&x).ok());
  EXPECT_EQ(x.n, 0);
  EXPECT_FALSE(x.idle);
  EXPECT_TRUE(b.stopped());
}

TEST(EpochBatches, TheSourceFollowsTheConsistencyModel) {
  EXPECT_EQ(ChooseBatchSource(Consistency::kSync, false), BatchSource::kPerClock);
  EXPECT_EQ(ChooseBatchSource(Consistency::kBounded, false), BatchSource::kPool);
  EXPECT_EQ(ChooseBatchSource(Consistency::kAsync, false), BatchSource::kPool);
  EXPECT_EQ(ChooseBatchSource(Consistency::kSync, true), BatchSource::kShard);
}

TEST(Trainer, HeldBackOnlyUnderBoundedStalenessBeyondTheBound) {
  // clock 5, s = 2: held back while the slowest was below clock 3.
  EXPECT_TRUE(HeldBack(Consistency::kBounded, 5, 2, 2));
  EXPECT_FALSE(HeldBack(Consistency::kBounded, 5, 2, 3));
  EXPECT_FALSE(HeldBack(Consistency::kSync, 5, 0, 0));
  EXPECT_FALSE(HeldBack(Consistency::kAsync, 5, 0, 0));
  EXPECT_TRUE(HeldBack(Consistency::kBounded, 1, 0, 0));
}

TEST(Trainer, ExtraBatchesOnlyWhenHeldBackPersistently) {
  HoldHistory h(0.5);
  for (int i = 0; i < HoldHistory::kWindow - 1; ++i) h.Add(true);
  EXPECT_FALSE(h.Persistent());  // not a full window yet
  h.Add(true);
  EXPECT_TRUE(h.Persistent());
  // Held at every other clock: exactly half of the window.
  for (int i = 0; i < HoldHistory::kWindow; ++i) h.Add(i % 2 == 0);
  EXPECT_TRUE(h.Persistent());
  h.Add(false);  // the oldest held clock leaves the window, 7 of 16 remain
  EXPECT_FALSE(h.Persistent());
  for (int i = 0; i < HoldHistory::kWindow; ++i) h.Add(false);
  EXPECT_FALSE(h.Persistent());
  EXPECT_TRUE(HoldHistory(0).Persistent());  // 0: whenever held back
}

TEST(Trainer, AStragglerSleepsItsOwnShareTimesTheSlowdownLessOne) {
  EXPECT_DOUBLE_EQ(StragglerSleep(0.010, 0.002, 2.0), 0.012);
  EXPECT_DOUBLE_EQ(StragglerSleep(0.010, 0.002, 3.0), 0.024);
  EXPECT_DOUBLE_EQ(StragglerSleep(0.010, 0.002, 1.0), 0.0);
  EXPECT_DOUBLE_EQ(StragglerSleep(-1.0, 0.0, 2.0), 0.0);  // a clock step back: no negative sleep
}

TEST(Trainer, PredictionGoesTheStalenessShareOfADrift) {
  // Two workers reading their own step: a drift of 2 updates between loads,
  // the push lands 1 update after its pull.
  EXPECT_DOUBLE_EQ(PredictionFactor(1.0, 1.0, 2), 0.5);
  EXPECT_DOUBLE_EQ(PredictionFactor(1.0, 3.0, 4), 0.75);
  EXPECT_DOUBLE_EQ(PredictionFactor(1.0, 1.0, 1), 1.0);  // a pull that missed its own step
  EXPECT_DOUBLE_EQ(PredictionFactor(1.0, 3.0, 1), 1.0);  // never further than k drifts
  EXPECT_DOUBLE_EQ(PredictionFactor(2.0, 3.0, 2), 2.0);
  EXPECT_DOUBLE_EQ(PredictionFactor(2.0, 1.0, 2), 1.0);
  EXPECT_DOUBLE_EQ(PredictionFactor(1.0, 0.0, 2), 0.0);  // nothing stale: the values as pulled
  EXPECT_DOUBLE_EQ(PredictionFactor(0.0, 2.0, 2), 0.0);  // off
  EXPECT_DOUBLE_EQ(PredictionFactor(1.0, 1.0, 0), 0.0);  // no drift
  EXPECT_DOUBLE_EQ(PredictionFactor(1.0, 1.0, -1), 0.0);  // not known (a server restarted, the first load)
}

TEST(Trainer, TheStalenessMeanFollowsTheRecentPushes) {
  StalenessMean m;
  EXPECT_EQ(m.mean(), 0.0);
  m.Add(1);
  EXPECT_DOUBLE_EQ(m.mean(), 0.02);
  for (int i = 0; i < 500; ++i) m.Add(2);
  EXPECT_NEAR(m.mean(), 2.0, 1e-3);
  for (int i = 0; i < 500; ++i) m.Add(0);
  EXPECT_NEAR(m.mean(), 0.0, 1e-3);
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
