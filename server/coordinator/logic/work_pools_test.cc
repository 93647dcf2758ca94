#include "server/coordinator/logic/work_pools.h"

#include <gtest/gtest.h>

#include <climits>

namespace shardps {
namespace {

using Range = std::pair<uint64_t, uint64_t>;

WorkClaim Claim(int rank, int64_t clock, uint64_t pool, uint64_t total, uint32_t max) {
  WorkClaim c;
  c.rank = c.said_rank = rank;
  c.alive = true;
  c.clock = clock;
  c.pool = pool;
  c.total = total;
  c.max = max;
  return c;
}

WorkClaim PerClock(int rank, int64_t clock, uint64_t pool, uint64_t total, uint32_t max) {
  WorkClaim c = Claim(rank, clock, pool, total, max);
  c.granule = 1;
  c.per_clock = true;
  return c;
}

WorkClaim Pooled(int rank, uint64_t seq, uint64_t pool, uint64_t total, uint32_t max, uint32_t granule,
                 int64_t clock = 0) {
  WorkClaim c = Claim(rank, clock, pool, total, max);
  c.seq = seq;
  c.granule = granule;
  return c;
}

Grant MustClaim(WorkPools& w, const WorkClaim& c, const std::vector<uint32_t>& live, const CutClocks& cuts = {}) {
  Grant g;
  Status s = w.Claim(c, live, cuts, &g);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return g;
}

Range Units(const Grant& g) { return {g.begin, g.end}; }

TEST(WorkPool, UsedUpAndHandedCountReturnedUnits) {
  WorkPool p;
  p.total = 100;
  p.next = 100;
  p.returned.push_back({10, 20});
  EXPECT_FALSE(p.used_up());
  EXPECT_EQ(p.handed(), 90u);
  EXPECT_EQ(p.TakeReturned(4), Range(10, 14));
  EXPECT_EQ(p.handed(), 94u);  // [14, 20) is still back
  EXPECT_EQ(p.TakeReturned(100), Range(14, 20));
  EXPECT_TRUE(p.used_up());
  EXPECT_EQ(p.handed(), 100u);
  EXPECT_EQ(p.TakeReturned(10), Range(0, 0));
}

TEST(WorkPool, FirstUndoneIsBeforeEveryOutstandingOrReturnedGrant) {
  WorkPool p;
  p.total = 200;
  p.next = 100;
  EXPECT_EQ(p.FirstUndone(), 100u);
  p.last[3] = {40, 60};
  EXPECT_EQ(p.FirstUndone(), 40u);
  p.returned.push_back({20, 30});
  EXPECT_EQ(p.FirstUndone(), 20u);
}

TEST(WorkPool, SlotsAreCutShortAtTheBlocksEnd) {
  WorkPool::Block b;
  b.begin = 100;
  b.end = 125;
  b.per = 10;
  EXPECT_EQ(WorkPool::Slot(b, 0), Range(100, 110));
  EXPECT_EQ(WorkPool::Slot(b, 2), Range(120, 125));
  EXPECT_EQ(WorkPool::Slot(b, 3), Range(125, 125));
}

TEST(WorkPoolsPerClock, EachClocksBlockIsCutInRankOrderWhoeverClaimsFirst) {
  WorkPools w;
  const std::vector<uint32_t> live{0, 1, 2};
  EXPECT_EQ(Units(MustClaim(w, PerClock(1, 0, 1, 100, 10), live)), Range(10, 20));
  EXPECT_EQ(Units(MustClaim(w, PerClock(2, 0, 1, 100, 10), live)), Range(20, 30));
  EXPECT_EQ(Units(MustClaim(w, PerClock(0, 0, 1, 100, 10), live)), Range(0, 10));
  EXPECT_EQ(Units(MustClaim(w, PerClock(2, 1, 1, 100, 10), live)), Range(50, 60));
  EXPECT_EQ(Units(MustClaim(w, PerClock(0, 1, 1, 100, 10), live)), Range(30, 40));
  // A claim repeated at the same clock (a lost reply) gets the same grant.
  const Grant again = MustClaim(w, PerClock(1, 0, 1, 100, 10), live);
  EXPECT_EQ(Units(again), Range(10, 20));
  EXPECT_EQ(again.state, Grant::kGranted);
  EXPECT_EQ(w.data().pools.at(1).next, 60u);
}

TEST(WorkPoolsPerClock, AWorkerThatJoinedAfterTheCutTakesFreshUnits) {
  WorkPools w;
  EXPECT_EQ(Units(MustClaim(w, PerClock(0, 0, 1, 100, 10), {0, 1})), Range(0, 10));
  EXPECT_EQ(Units(MustClaim(w, PerClock(2, 0, 1, 100, 10), {0, 1, 2})), Range(20, 30));
  EXPECT_EQ(Units(MustClaim(w, PerClock(1, 0, 1, 100, 10), {0, 1, 2})), Range(10, 20));
}

TEST(WorkPoolsPerClock, ADeadWorkersUnclaimedSlotGoesToTheNextClaimer) {
  WorkPools w;
  const std::vector<uint32_t> live{0, 1, 2};
  EXPECT_EQ(Units(MustClaim(w, PerClock(0, 0, 1, 100, 10), live)), Range(0, 10));
  w.ForgetWorkOf(2, /*dead=*/true, /*counted=*/-1);  // never claimed its slot [20, 30)
  // Worker 1 is served with it; its own slot goes back for another.
  EXPECT_EQ(Units(MustClaim(w, PerClock(1, 0, 1, 100, 10), {0, 1})), Range(20, 30));
  EXPECT_EQ(Units(MustClaim(w, PerClock(0, 1, 1, 100, 10), {0, 1})), Range(10, 20));
}

TEST(WorkPoolsPerClock, ADeadWorkersGrantGoesBackUnlessTheServersCountedItsClock) {
  for (int64_t counted : {int64_t{-1}, int64_t{0}, int64_t{1}}) {
    WorkPools w;
    EXPECT_EQ(Units(MustClaim(w, PerClock(0, 0, 1, 100, 10), {0, 1})), Range(0, 10));
    EXPECT_EQ(Units(MustClaim(w, PerClock(1, 0, 1, 100, 10), {0, 1})), Range(10, 20));
    w.ForgetWorkOf(0, true, counted);
    const Grant g = MustClaim(w, PerClock(1, 1, 1, 100, 10), {1});
    if (counted <= 0)  // its clock-0 gradient never counted: the units are trained again
      EXPECT_EQ(Units(g), Range(0, 10)) << "counted " << counted;
    else
      EXPECT_EQ(Units(g), Range(20, 30)) << "counted " << counted;
    EXPECT_FALSE(w.data().clock_grants.count(0));
  }
}

TEST(WorkPoolsPerClock, BlocksBeforeClockMinusFourAreDroppedAndTheirUnclaimedSlotsGoBack) {
  WorkPools w;
  EXPECT_EQ(Units(MustClaim(w, PerClock(0, 0, 1, 100, 10), {0, 1})), Range(0, 10));  // worker 1 never claims clock 0
  // At clock 4 the block of clock 0 is kept (0 is not before 4 - 4).
  EXPECT_EQ(Units(MustClaim(w, PerClock(0, 4, 1, 100, 10), {0, 1})), Range(20, 30));
  EXPECT_TRUE(w.data().pools.at(1).blocks.count(0));
  // At clock 5 it is dropped: worker 1's slot [10, 20) goes back, first out.
  EXPECT_EQ(Units(MustClaim(w, PerClock(0, 5, 1, 100, 10), {0, 1})), Range(10, 20));
  EXPECT_FALSE(w.data().pools.at(1).blocks.count(0));
}

TEST(WorkPoolsPerClock, FinishedOnceTheLastBlockIsBehindElseWaitNextClock) {
  WorkPools w;
  EXPECT_EQ(Units(MustClaim(w, PerClock(0, 0, 1, 20, 10), {0, 1})), Range(0, 10));
  EXPECT_EQ(Units(MustClaim(w, PerClock(1, 0, 1, 20, 10), {0, 1})), Range(10, 20));
  // A worker that joined after the cut, at the clock of the last block.
  const Grant wait = MustClaim(w, PerClock(2, 0, 1, 20, 10), {0, 1, 2});
  EXPECT_EQ(wait.state, Grant::kWaitNextClock);
  EXPECT_EQ(wait.handed, 20u);
  const Grant done = MustClaim(w, PerClock(0, 1, 1, 20, 10), {0, 1, 2});
  EXPECT_EQ(done.state, Grant::kFinished);
  EXPECT_EQ(Units(done), Range(0, 0));
}

TEST(WorkPoolsPerClock, ASlotLeftToAWorkerStillToReachItsClockDoesNotHoldTheOthersBack) {
  WorkPools w;
  EXPECT_EQ(Units(MustClaim(w, PerClock(0, 0, 1, 30, 10), {0, 1})), Range(0, 10));
  EXPECT_EQ(Units(MustClaim(w, PerClock(1, 0, 1, 30, 10), {0, 1})), Range(10, 20));
  EXPECT_EQ(MustClaim(w, PerClock(1, 1, 1, 30, 10), {0, 1}).state, Grant::kWaitNextClock);  // worker 0's [20, 30)
  EXPECT_EQ(MustClaim(w, PerClock(1, 2, 1, 30, 10), {0, 1}).state, Grant::kFinished);       // left to worker 0
  EXPECT_EQ(Units(MustClaim(w, PerClock(0, 1, 1, 30, 10), {0, 1})), Range(20, 30));
  EXPECT_EQ(MustClaim(w, PerClock(0, 2, 1, 30, 10), {0, 1}).state, Grant::kFinished);
}

TEST(WorkPoolsPerClock, WorkersAnyNumberOfClocksApartTrainEveryUnitOnce) {
  // Nothing in a claim makes the workers' clocks meet (a worker that never
  // pulls under sync runs ahead): however far apart, every unit exactly
  // once, and every worker told the pool is finished.
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    const int n = 2 + static_cast<int>(seed % 2);
    const std::vector<uint32_t> live = n == 2 ? std::vector<uint32_t>{0, 1} : std::vector<uint32_t>{0, 1, 2};
    WorkPools w;
    std::vector<int> seen(100 + seed % 97, 0);
    std::vector<int64_t> clock(n, 0);
    std::vector<bool> done(n, false);
    uint32_t r = seed;
    for (int left = n; left > 0;) {
      r = r * 1103515245u + 12345u;
      int rank = static_cast<int>((r >> 16) % n);
      while (done[rank]) rank = (rank + 1) % n;
      const Grant g = MustClaim(w, PerClock(rank, clock[rank]++, 1, seen.size(), 10), live);
      for (uint64_t u = g.begin; u < g.end; ++u) ++seen[u];
      if (g.state == Grant::kFinished) done[rank] = true, --left;
      ASSERT_LT(clock[rank], 1000) << "seed " << seed << ": worker " << rank << " never finished";
    }
    for (size_t u = 0; u < seen.size(); ++u) ASSERT_EQ(seen[u], 1) << "seed " << seed << ": unit " << u;
  }
}

TEST(WorkPoolsPerClock, EveryClocksBlockIsRecordedInAJobTakingSnapshots) {
  WorkPools w;
  CutClocks cuts;
  cuts.enabled = true;
  EXPECT_EQ(Units(MustClaim(w, PerClock(0, 1, 7, 100, 10), {0, 1}, cuts)), Range(0, 10));
  EXPECT_EQ(Units(MustClaim(w, PerClock(1, 2, 7, 100, 10), {0, 1}, cuts)), Range(30, 40));
  ASSERT_EQ(w.data().work_at.size(), 2u);
  WorkPosition at;
  bool recorded = false;
  ASSERT_TRUE(w.PositionAt(2, &at, &recorded));
  EXPECT_TRUE(recorded);
  EXPECT_EQ(at.pool, 7u);
  EXPECT_EQ(at.position, 20u);
  // No block at clock 3 (the workers idle at it): not the block of clock 2
  // (trained before a cut at 3), the pool now.
  ASSERT_TRUE(w.PositionAt(3, &at, &recorded));
  EXPECT_TRUE(recorded);
  EXPECT_EQ(at.pool, 7u);
  EXPECT_EQ(at.position, 40u);  // per-clock grants are not tracked in `last`
  // The workers went on at clock 5: a cut at 3 or 4 resumes where clock 5's block begins.
  MustClaim(w, PerClock(0, 5, 7, 100, 10), {0, 1}, cuts);
  ASSERT_TRUE(w.PositionAt(4, &at, &recorded));
  EXPECT_EQ(at.position, 40u);
  // A pool used up (its last block at clock 2): a cut after it starts the next pool.
  WorkPools done;
  for (int64_t clock : {1, 2})
    for (int rank : {0, 1}) MustClaim(done, PerClock(rank, clock, 7, 40, 10), {0, 1}, cuts);
  EXPECT_TRUE(done.data().pools.at(7).used_up());
  ASSERT_TRUE(done.PositionAt(5, &at, &recorded));
  EXPECT_TRUE(recorded);
  EXPECT_EQ(at.pool, 8u);
  EXPECT_EQ(at.position, 0u);
  // Before every record: the pools' now.
  ASSERT_TRUE(w.PositionAt(0, &at, &recorded));
  EXPECT_FALSE(recorded);
  // A job taking no snapshots records nothing.
  WorkPools none;
  MustClaim(none, PerClock(0, 1, 7, 100, 10), {0}, {});
  EXPECT_TRUE(none.data().work_at.empty());
}

TEST(WorkPoolsPooled, GrantsShrinkNearTheEndInWholeGranulesAndTheLastIsPartial) {
  WorkPools w;
  const std::vector<uint32_t> live{0, 1};
  const std::vector<Range> want{{0, 64}, {64, 112}, {112, 144}, {144, 160}, {160, 176}, {176, 192}, {192, 200}};
  for (size_t i = 0; i < want.size(); ++i) {
    const Grant g = MustClaim(w, Pooled(static_cast<int>(i % 2), i + 1, 3, 200, 100, 16), live);
    EXPECT_EQ(Units(g), want[i]) << "claim " << i;
    EXPECT_EQ(g.state, Grant::kGranted);
    EXPECT_EQ(g.handed, want[i].second);
  }
  const Grant done = MustClaim(w, Pooled(0, 99, 3, 200, 100, 16), live);
  EXPECT_EQ(done.state, Grant::kFinished);
  EXPECT_EQ(Units(done), Range(200, 200));
  EXPECT_TRUE(w.data().pools.at(3).used_up());
}

TEST(WorkPoolsPooled, AtMostMaxUnitsAndTheLastGrantIsPartial) {
  WorkPools w;
  const std::vector<Range> want{{0, 50}, {50, 80}, {80, 100}, {100, 105}};
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(Units(MustClaim(w, Pooled(0, i + 1, 1, 105, 50, 10), {0})), want[i]) << "claim " << i;
}

TEST(WorkPoolsPooled, ADeadWorkersLastGrantGoesToTheNextClaimer) {
  WorkPools w;
  const std::vector<uint32_t> live{0, 1};
  EXPECT_EQ(Units(MustClaim(w, Pooled(0, 1, 5, 1000, 100, 10), live)), Range(0, 100));
  EXPECT_EQ(Units(MustClaim(w, Pooled(1, 1, 5, 1000, 100, 10), live)), Range(100, 200));
  EXPECT_EQ(w.data().pools.at(5).FirstUndone(), 0u);
  w.ForgetWorkOf(0, /*dead=*/true, -1);
  EXPECT_EQ(w.data().pools.at(5).handed(), 100u);
  // At most `max` of it per claim.
  EXPECT_EQ(Units(MustClaim(w, Pooled(1, 2, 5, 1000, 60, 10), {1})), Range(0, 60));
  EXPECT_EQ(Units(MustClaim(w, Pooled(1, 3, 5, 1000, 60, 10), {1})), Range(60, 100));
  EXPECT_EQ(Units(MustClaim(w, Pooled(1, 4, 5, 1000, 60, 10), {1})), Range(200, 260));
}

TEST(WorkPoolsPooled, AWorkerThatLeftFinishedItsGrant) {
  WorkPools w;
  EXPECT_EQ(Units(MustClaim(w, Pooled(0, 1, 5, 1000, 100, 10), {0, 1})), Range(0, 100));
  w.ForgetWorkOf(0, /*dead=*/false, -1);
  EXPECT_TRUE(w.data().pools.at(5).returned.empty());
  EXPECT_EQ(w.data().pools.at(5).FirstUndone(), 100u);
}

TEST(WorkPoolsPooled, AClaimSentAgainWithTheSameSeqGetsTheSameGrant) {
  WorkPools w;
  const std::vector<uint32_t> live{0};
  EXPECT_EQ(Units(MustClaim(w, Pooled(0, 7, 1, 1000, 50, 10), live)), Range(0, 50));
  const Grant again = MustClaim(w, Pooled(0, 7, 1, 1000, 50, 10), live);
  EXPECT_EQ(Units(again), Range(0, 50));
  EXPECT_EQ(again.state, Grant::kGranted);
  EXPECT_EQ(w.data().pools.at(1).next, 50u);  // nothing more handed out
  EXPECT_EQ(Units(MustClaim(w, Pooled(0, 8, 1, 1000, 50, 10), live)), Range(50, 100));
  // A claim without a seq is never taken for a resent one.
  EXPECT_EQ(Units(MustClaim(w, Pooled(0, 0, 1, 1000, 50, 10), live)), Range(100, 150));
  EXPECT_EQ(Units(MustClaim(w, Pooled(0, 0, 1, 1000, 50, 10), live)), Range(150, 200));
  // A new process of the rank numbers its claims from 1 again.
  EXPECT_EQ(Units(MustClaim(w, Pooled(0, 9, 1, 1000, 50, 10), live)), Range(200, 250));
  w.ForgetClaim(0);
  EXPECT_EQ(Units(MustClaim(w, Pooled(0, 9, 1, 1000, 50, 10), live)), Range(250, 300));
}

TEST(WorkPoolsPooled, EveryClaimRecordsTheFirstUndoneUnitAndACutUsesTheLastRecordBeforeIt) {
  WorkPools w;
  CutClocks cuts;
  cuts.enabled = true;
  const std::vector<uint32_t> live{0, 1};
  MustClaim(w, Pooled(0, 1, 2, 1000, 100, 10, 3), live, cuts);  // [0, 100)
  MustClaim(w, Pooled(1, 1, 2, 1000, 100, 10, 4), live, cuts);  // [100, 200)
  MustClaim(w, Pooled(1, 2, 2, 1000, 100, 10, 7), live, cuts);  // [200, 300)
  // Recorded before each claim is answered: at clock 7 worker 0's [0, 100)
  // is still outstanding (and worker 1's [100, 200) too).
  EXPECT_EQ(w.data().work_at.at(7).position, 0u);
  MustClaim(w, Pooled(0, 2, 2, 1000, 100, 10, 8), live, cuts);   // [0, 100) trained
  MustClaim(w, Pooled(0, 3, 2, 1000, 100, 10, 10), live, cuts);  // [300, 400) trained
  EXPECT_EQ(w.data().work_at.at(10).position, 200u);  // worker 1's [200, 300) is outstanding
  // A cut between two claims (the coordinator was down across it, or
  // chosen at a clock nobody claimed at): the last record before it, so
  // nothing trained after the cut is taken for trained before it.
  WorkPosition at;
  bool recorded = false;
  ASSERT_TRUE(w.PositionAt(9, &at, &recorded));
  EXPECT_TRUE(recorded);
  EXPECT_EQ(at.pool, 2u);
  EXPECT_EQ(at.position, 0u);  // clock 8's, taken before that claim handed [0, 100) in
  ASSERT_TRUE(w.PositionAt(500, &at, &recorded));
  EXPECT_TRUE(recorded);
  EXPECT_EQ(at.position, 200u);
  // Before every record: the pools' now.
  ASSERT_TRUE(w.PositionAt(2, &at, &recorded));
  EXPECT_FALSE(recorded);
  // Saved and taken back (a coordinator restart) it answers the same.
  WorkPools again;
  again.Restore(w.data());
  ASSERT_TRUE(again.PositionAt(9, &at, &recorded));
  EXPECT_TRUE(recorded);
  EXPECT_EQ(at.position, 0u);
  // A tool's claim (no worker rank) records nothing.
  MustClaim(w, Pooled(-1, 0, 2, 1000, 100, 10, 15), live, cuts);
  EXPECT_FALSE(w.data().work_at.count(15));
}

TEST(WorkPoolsPooled, OldRecordsGoButThoseACutMayAskFor) {
  WorkPools w;
  CutClocks cuts;
  cuts.enabled = true;
  cuts.every = 100;
  cuts.chosen = {155};
  // One worker, a unit per claim, claiming at clocks 3, 6, 9, ...: its
  // previous grant is done at each claim.
  for (uint64_t i = 1; i <= 300; ++i) MustClaim(w, Pooled(0, i, 1, 100000, 1, 1, static_cast<int64_t>(3 * i)), {0}, cuts);
  EXPECT_EQ(w.data().work_at.size(), 64u + 2 * 8);  // the newest 64, two around 100, 155, 200, ..., 700 (of 300)
  for (int64_t cut : {100, 155, 300, 600}) {
    WorkPosition at;
    bool recorded = false;
    ASSERT_TRUE(w.PositionAt(cut, &at, &recorded)) << cut;
    EXPECT_TRUE(recorded) << cut;
    // The last claim at or before the cut, claim i at clock 3i, found the
    // units before i - 2 done (unit i - 2, its previous grant, still out).
    EXPECT_EQ(at.position, static_cast<uint64_t>(cut / 3 - 2)) << cut;
  }
}

TEST(WorkPools, ARestoredJobResumesAtItsPoolAndPosition) {
  WorkPools w;
  w.SetResume({3, 40});
  EXPECT_EQ(MustClaim(w, Pooled(0, 1, 2, 100, 50, 1), {0}).state, Grant::kFinished);
  EXPECT_EQ(Units(MustClaim(w, Pooled(0, 2, 3, 100, 50, 1), {0})), Range(40, 70));
  EXPECT_EQ(Units(MustClaim(w, Pooled(0, 3, 4, 100, 10, 1), {0})), Range(0, 10));
  WorkPosition at;
  bool recorded = true;
  ASSERT_TRUE(w.PositionAt(9, &at, &recorded));
  EXPECT_FALSE(recorded);
  EXPECT_EQ(at.pool, 3u);
  EXPECT_EQ(at.position, 40u);  // worker 0's last grant of pool 3 is outstanding
  w.Clear();
  EXPECT_EQ(w.size(), 0u);
  EXPECT_FALSE(w.PositionAt(9, &at, &recorded));
  EXPECT_EQ(Units(MustClaim(w, Pooled(0, 1, 3, 100, 10, 1), {0})), Range(40, 50));  // the resume point is kept
}

TEST(WorkPools, EveryPoolUsedUpResumesAtTheNextPool) {
  WorkPools w;
  uint64_t seq = 1;
  while (MustClaim(w, Pooled(0, seq, 4, 10, 10, 1), {0}).state == Grant::kGranted) ++seq;  // the last: Finished
  EXPECT_EQ(seq, 6u);  // 5, 2, 1, 1 and 1 units, then none
  WorkPosition at;
  bool recorded = true;
  ASSERT_TRUE(w.PositionAt(1, &at, &recorded));
  EXPECT_EQ(at.pool, 5u);
  EXPECT_EQ(at.position, 0u);
}

TEST(WorkPools, BadClaimsAreRefusedSayingWhy) {
  WorkPools w;
  Grant g;
  WorkClaim c = Pooled(0, 1, 1, 0, 10, 1);
  Status s = w.Claim(c, {0}, {}, &g);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("total > 0 units"), std::string::npos) << s.message();
  c = PerClock(-1, 0, 1, 10, 1);
  c.said_rank = 9;
  s = w.Claim(c, {0}, {}, &g);
  EXPECT_NE(s.message().find("per-clock claims are for live workers (rank 9)"), std::string::npos) << s.message();
  c = PerClock(0, 0, 1, 10, 1);
  c.alive = false;
  EXPECT_EQ(w.Claim(c, {0}, {}, &g).code(), Code::kInvalidArgument);
  s = w.Claim(PerClock(0, -1, 1, 10, 1), {0}, {}, &g);
  EXPECT_NE(s.message().find("negative clock"), std::string::npos) << s.message();
  EXPECT_EQ(w.size(), 0u);  // none of them made a pool
  MustClaim(w, Pooled(0, 1, 1, 10, 1, 1), {0});
  s = w.Claim(Pooled(0, 2, 1, 11, 1, 1), {0}, {}, &g);
  EXPECT_EQ(s.code(), Code::kConflict);
  EXPECT_EQ(s.message(), "ClaimWork: pool 1 has 10 units, this claim says 11");
}

TEST(WorkPools, PastFourThousandPoolsTheOldestFinishedOneIsForgotten) {
  WorkPools w;
  for (uint64_t id = 0; id < 4096; ++id) MustClaim(w, Pooled(-1, 0, id, 1, 1, 1), {0});  // each used up at once
  MustClaim(w, Pooled(-1, 0, 5000, 2, 1, 1), {0});
  EXPECT_EQ(w.size(), 4096u);
  EXPECT_FALSE(w.data().pools.count(0));
  // With 4096 unfinished ones a new pool is refused.
  WorkPools open;
  for (uint64_t id = 0; id < 4096; ++id) MustClaim(open, Pooled(-1, 0, id, 2, 1, 1), {0});
  Grant g;
  Status s = open.Claim(Pooled(-1, 0, 9999, 2, 1, 1), {0}, {}, &g);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("unfinished work pools"), std::string::npos);
}

}  // namespace
}  // namespace shardps
