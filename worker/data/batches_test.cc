// Which batches an epoch trains, without a cluster: a static shard, a pool
// claimed in chunks, one batch per clock under sync (idle clocks, a dead
// worker's batch of an earlier epoch), a stop, a whole epoch's run, and
// the --max-steps cut.
#include "worker/data/batches.h"

#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <utility>
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

// Run: an idle clock goes to idle(), each batch to train(), in order,
// until the pool is finished; the first error of either ends the epoch.
TEST(EpochBatches, RunTrainsEachBatchAndTicksTheIdleClocks) {
  std::vector<WorkRange> answers(4);
  answers[0].begin = 0, answers[0].end = 8, answers[0].pool = 1;
  answers[1].wait = true;
  answers[2].begin = 8, answers[2].end = 12, answers[2].pool = 1;
  answers[3].handed = 12;
  size_t i = 0;
  EpochBatches b(
      [&](uint64_t, uint64_t, uint32_t, const ClaimOptions&, WorkRange* out) {
        *out = answers.at(i++);
        return Status::OK();
      },
      [] { return false; }, BatchSource::kPerClock, 12, 8, 1);
  std::vector<std::string> calls;
  auto idle = [&] {
    calls.push_back("idle");
    return Status::OK();
  };
  auto train = [&](const Batch& x) {
    calls.push_back(std::to_string(x.epoch) + ":" + std::to_string(x.first) + "+" + std::to_string(x.n));
    return Status::OK();
  };
  ASSERT_TRUE(b.Run(1, idle, train).ok());
  EXPECT_EQ(calls, (std::vector<std::string>{"1:0+8", "idle", "1:8+4"}));
  EXPECT_EQ(b.handed(), 12u);
  EXPECT_FALSE(b.stopped());

  i = 0;
  calls.clear();
  Status s = b.Run(1, idle, [&](const Batch&) { return Status::Unavailable("server gone"); });
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_EQ(i, 1u);  // no claim after the failed batch
  i = 1;
  s = b.Run(1, [] { return Status::Timeout("tick"); }, train);
  EXPECT_EQ(s.code(), Code::kTimeout);
  EXPECT_TRUE(calls.empty());
}

TEST(EpochBatches, MaxStepsCutsEachWorkersShareOrThePoolForAll) {
  EXPECT_EQ(CapToMaxSteps(1000, 0, 10, 4, true), 1000u);   // 0: no cut
  EXPECT_EQ(CapToMaxSteps(1000, 5, 10, 4, true), 200u);    // a pool: 5 batches for each of 4 workers
  EXPECT_EQ(CapToMaxSteps(1000, 5, 10, 4, false), 50u);    // a shard: this worker's 5 batches
  EXPECT_EQ(CapToMaxSteps(30, 5, 10, 4, false), 30u);      // never more than there are
}

}  // namespace
}  // namespace shardps::worker
