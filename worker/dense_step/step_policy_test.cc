// The step loop's decisions, without a cluster: when a worker is held
// back, which batches are extra ones, how far ahead the prediction goes,
// the push-staleness figures and how long a straggler sleeps.
#include "worker/dense_step/step_policy.h"

#include <gtest/gtest.h>

namespace shardps::worker {
namespace {

TEST(StepPolicy, HeldBackOnlyUnderBoundedStalenessBeyondTheBound) {
  // clock 5, s = 2: held back while the slowest was below clock 3.
  EXPECT_TRUE(HeldBack(Consistency::kBounded, 5, 2, 2));
  EXPECT_FALSE(HeldBack(Consistency::kBounded, 5, 2, 3));
  EXPECT_FALSE(HeldBack(Consistency::kSync, 5, 0, 0));
  EXPECT_FALSE(HeldBack(Consistency::kAsync, 5, 0, 0));
  EXPECT_TRUE(HeldBack(Consistency::kBounded, 1, 0, 0));
}

TEST(StepPolicy, ExtraBatchesOnlyWhenHeldBackPersistently) {
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

TEST(StepPolicy, AStragglerSleepsItsOwnShareTimesTheSlowdownLessOne) {
  EXPECT_DOUBLE_EQ(StragglerSleep(0.010, 0.002, 2.0), 0.012);
  EXPECT_DOUBLE_EQ(StragglerSleep(0.010, 0.002, 3.0), 0.024);
  EXPECT_DOUBLE_EQ(StragglerSleep(0.010, 0.002, 1.0), 0.0);
  EXPECT_DOUBLE_EQ(StragglerSleep(-1.0, 0.0, 2.0), 0.0);  // a clock step back: no negative sleep
}

TEST(StepPolicy, PredictionGoesTheStalenessShareOfADrift) {
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

TEST(StepPolicy, TheStalenessMeanFollowsTheRecentPushes) {
  StalenessMean m;
  EXPECT_EQ(m.mean(), 0.0);
  m.Add(1);
  EXPECT_DOUBLE_EQ(m.mean(), 0.02);
  for (int i = 0; i < 500; ++i) m.Add(2);
  EXPECT_NEAR(m.mean(), 2.0, 1e-3);
  for (int i = 0; i < 500; ++i) m.Add(0);
  EXPECT_NEAR(m.mean(), 0.0, 1e-3);
}

// Extra batches: at most max_fill per clock, only while held back, and a
// clock's hold counted in the history once (at its first batch, once a step
// has trained), not once per extra batch.
TEST(StepPolicy, ExtraBatchesAtMostMaxFillPerClockWhileHeld) {
  FillPolicy p(2, 0.0);  // 0: whenever held back
  EXPECT_FALSE(p.Decide(false, true));
  EXPECT_TRUE(p.Decide(true, true));
  EXPECT_TRUE(p.AnotherMayFollow());
  EXPECT_TRUE(p.Decide(true, true));
  EXPECT_FALSE(p.AnotherMayFollow());
  EXPECT_FALSE(p.Decide(true, true));  // the third of the clock waits
  EXPECT_EQ(p.fills_this_clock(), 2);
  p.NewClock();
  EXPECT_TRUE(p.Decide(true, true));
  EXPECT_EQ(p.filled(), 3);
  EXPECT_TRUE(p.Expected(true));
  EXPECT_FALSE(p.Expected(false));

  FillPolicy off(0, 0.0);
  EXPECT_FALSE(off.Decide(true, true));
  EXPECT_FALSE(off.Expected(true));
}

TEST(StepPolicy, ExtraBatchesOnlyOnceTheHistoryOfClocksIsPersistent) {
  FillPolicy p(2, 0.5);
  // Held at the first batch of 15 clocks: no full window yet.
  for (int c = 0; c < HoldHistory::kWindow - 1; ++c) {
    EXPECT_FALSE(p.Decide(true, true)) << c;
    p.NewClock();
  }
  // Before a step trained nothing is counted.
  EXPECT_FALSE(p.Decide(true, false));
  EXPECT_TRUE(p.Decide(true, true));  // the 16th held clock: persistent
  // The extra batch of this clock is not a clock of its own: the next
  // batch at it is a second extra one, and the window stays at 16 held.
  EXPECT_TRUE(p.Decide(true, true));
  p.NewClock();
  EXPECT_FALSE(p.Decide(false, true));  // 15 of 16 held: still persistent, but not held now
  EXPECT_TRUE(p.Expected(true));
  EXPECT_EQ(p.filled(), 2);
}

TEST(StepPolicy, PushStalenessHasTheMaxTheMeanAndTheRecentMean) {
  PushStaleness s;
  EXPECT_EQ(s.mean(), 0.0);  // none yet
  s.Add(0);
  s.Add(3);
  s.Add(1);
  EXPECT_EQ(s.max(), 3u);
  EXPECT_DOUBLE_EQ(s.mean(), 4.0 / 3.0);
  StalenessMean m;
  m.Add(0);
  m.Add(3);
  m.Add(1);
  EXPECT_DOUBLE_EQ(s.tau(), m.mean());
}

TEST(StepPolicy, RecentWaitsKeepTheQuickestOfTheLast32) {
  RecentWaits w;
  EXPECT_EQ(w.Quickest(), 1e9);
  w.Add(0.5);
  w.Add(0.25);
  EXPECT_EQ(w.Quickest(), 0.25);
  for (int i = 0; i < RecentWaits::kSize - 1; ++i) w.Add(1.0);  // 0.5 and then 0.25 leave
  EXPECT_EQ(w.Quickest(), 0.25);
  w.Add(1.0);
  EXPECT_EQ(w.Quickest(), 1.0);
}

}  // namespace
}  // namespace shardps::worker
