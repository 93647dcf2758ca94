#include "server/consistency/worker_clocks.h"

#include <gtest/gtest.h>

#include <string>

namespace shardps {
namespace {

// A request's frames: identity, header, a payload of `bytes`.
std::vector<zmq::message_t> Frames(const std::string& who, size_t bytes = 8) {
  std::vector<zmq::message_t> f;
  f.emplace_back(who.data(), who.size());
  f.emplace_back("header", 6);
  f.emplace_back(bytes);
  return f;
}

std::string Who(const std::vector<zmq::message_t>& frames) { return frames[0].to_string(); }

// `n` workers, all live, under `c`.
WorkerClocks Job(Consistency c, uint32_t n, uint32_t staleness = 0, uint64_t held = 1 << 20) {
  WorkerClocks w(held);
  w.SetModel(c, staleness);
  std::vector<uint32_t> live;
  for (uint32_t r = 0; r < n; ++r) live.push_back(r);
  w.SetMembership(n, live);
  return w;
}

void Hold(WorkerClocks& w, int rank, int64_t clock, uint32_t table = 0, const std::string& who = "") {
  auto f = Frames(who.empty() ? "w" + std::to_string(rank) : who);
  const uint64_t bytes = FramesBytes(f);
  ASSERT_TRUE(w.CheckHold(rank, clock, 1, bytes).ok()) << w.CheckHold(rank, clock, 1, bytes).ToString();
  w.Hold(static_cast<uint32_t>(rank), clock, table, std::move(f), bytes);
}

void TickOk(WorkerClocks& w, int rank, int64_t clock, bool idle = false) {
  Status s = w.Tick(true, rank, clock, idle);
  ASSERT_TRUE(s.ok()) << s.ToString();
}

TEST(WorkerClocks, BspClockCompletesOnlyWhenEveryLiveWorkerTicked) {
  WorkerClocks w = Job(Consistency::kSync, 3);
  Hold(w, 2, 0, 0, "w2-a");
  Hold(w, 0, 0);
  Hold(w, 1, 0);
  Hold(w, 2, 0, 0, "w2-b");
  TickOk(w, 0, 0);
  TickOk(w, 1, 0);
  EXPECT_EQ(w.CompleteBelow(), 0);  // worker 2 has not ticked clock 0
  TickOk(w, 2, 0);
  EXPECT_EQ(w.MinClock(), 1);
  ASSERT_EQ(w.CompleteBelow(), 1);

  WorkerClocks::CompleteClock c;
  w.TakeClock(1, &c);
  EXPECT_EQ(c.clock, 0);
  EXPECT_EQ(w.applied_clock(), 1);
  ASSERT_EQ(c.pushes.size(), 4u);
  // By worker, then in arrival order.
  EXPECT_EQ(Who(c.pushes[0].frames), "w0");
  EXPECT_EQ(Who(c.pushes[1].frames), "w1");
  EXPECT_EQ(Who(c.pushes[2].frames), "w2-a");
  EXPECT_EQ(Who(c.pushes[3].frames), "w2-b");
  EXPECT_EQ(c.trained, 3u);
  EXPECT_EQ(c.Divisor(0), 3u);
  EXPECT_EQ(w.held_pushes(), 0u);
  EXPECT_EQ(w.CompleteBelow(), 1);  // clock 1 waits for every worker again
}

TEST(WorkerClocks, ADeadWorkerStopsBeingWaitedForAndItsUnfinishedPushesAreDropped) {
  WorkerClocks w = Job(Consistency::kSync, 2);
  Hold(w, 1, 0);
  TickOk(w, 1, 0);  // worker 1 finished clock 0 ...
  Hold(w, 1, 1);    // ... but not clock 1
  Hold(w, 0, 0);
  Hold(w, 0, 1);
  EXPECT_EQ(w.held_pushes(), 4u);
  w.SetMembership(2, {0});  // worker 1 died
  EXPECT_FALSE(w.IsLive(1));
  EXPECT_EQ(w.held_pushes(), 3u);  // its push for clock 1 is gone, the one for clock 0 counts
  TickOk(w, 0, 0);
  TickOk(w, 0, 1);
  ASSERT_EQ(w.CompleteBelow(), 2);  // nobody waits for worker 1
  WorkerClocks::CompleteClock c;
  w.TakeClock(1, &c);
  ASSERT_EQ(c.pushes.size(), 2u);
  EXPECT_EQ(c.trained, 2u);
  w.TakeClock(1, &c);
  ASSERT_EQ(c.pushes.size(), 1u);
  EXPECT_EQ(c.pushes[0].rank, 0u);
  EXPECT_EQ(c.trained, 1u);
  // A tick or push from the dead worker is refused.
  EXPECT_EQ(w.Tick(true, 1, 1, false).code(), Code::kUnavailable);
}

// A worker declared dead under sync is first retiring: still waited for,
// its requests refused, its clock here final (and reported); then retired
// at the clock the coordinator decided: the ticks this server missed are
// taken (counted as trained, as the tick another server saw said), so its
// push of that clock is applied; a server that never saw it retiring (a
// restarted one) takes nothing, nor does one told a clock far past its
// own (no report can say that).
TEST(WorkerClocks, ARetiredWorkerTakesTheTicksOtherServersSawUpToItsDecidedClock) {
  WorkerClocks w = Job(Consistency::kSync, 2);
  Hold(w, 0, 0);
  Hold(w, 1, 0);
  Hold(w, 1, 1);  // ahead: a clock it never finished anywhere
  TickOk(w, 0, 0);
  w.SetMembership(2, {0, 1}, {1});
  EXPECT_TRUE(w.IsRetiring(1));
  EXPECT_FALSE(w.IsLive(1));
  EXPECT_EQ(w.Tick(true, 1, 0, false).code(), Code::kUnavailable);  // refused from now on
  EXPECT_EQ(w.CompleteBelow(), 0);                                   // still waited for
  const WorkerFinal here = w.Final(1, 7);
  EXPECT_EQ(here.clock, 0);
  EXPECT_EQ(here.group, 7u);
  // Another server saw its tick of clock 0 (trained): decided at clock 1.
  w.SetMembership(2, {0}, {}, {{1, WorkerFinal::kAllGroups, 1, true}});
  EXPECT_FALSE(w.IsRetiring(1));
  EXPECT_EQ(w.clock(1), 1);
  ASSERT_EQ(w.CompleteBelow(), 1);
  WorkerClocks::CompleteClock c;
  w.TakeClock(1, &c);
  EXPECT_EQ(c.pushes.size(), 2u);  // both workers' pushes of clock 0
  EXPECT_EQ(c.Divisor(0), 2u);
  EXPECT_EQ(w.held_pushes(), 0u);  // its push of clock 1 was dropped
  // The same decision again (every later view carries it): nothing more.
  w.SetMembership(2, {0}, {}, {{1, WorkerFinal::kAllGroups, 3, true}});
  EXPECT_EQ(w.clock(1), 1);

  // A server that never saw it retiring ignores the decision.
  WorkerClocks fresh = Job(Consistency::kSync, 2);
  fresh.SetMembership(2, {0}, {}, {{1, WorkerFinal::kAllGroups, 1, true}});
  EXPECT_EQ(fresh.clock(1), 0);

  // A decision far past where it is here is refused (it could not have come
  // from any server's report): the worker is dropped as gone.
  WorkerClocks far = Job(Consistency::kSync, 2);
  far.SetMembership(2, {0, 1}, {1});
  far.SetMembership(2, {0}, {}, {{1, WorkerFinal::kAllGroups, 2, true}});  // two ticks missing: none is taken
  EXPECT_EQ(far.clock(1), 0);
  EXPECT_FALSE(far.IsRetiring(1));

  // A new process for a rank, not joined here yet, reports no clock, and
  // takes no tick here when it is retired.
  WorkerClocks again = Job(Consistency::kSync, 2);
  again.SetMembership(2, {0});
  again.SetMembership(2, {0, 1});  // live again: joining
  again.SetMembership(2, {0, 1}, {1});
  EXPECT_EQ(again.Final(1, 0).clock, -1);
  again.SetMembership(2, {0}, {}, {{1, WorkerFinal::kAllGroups, 1, true}});
  EXPECT_EQ(again.clock(1), 0);
}

TEST(WorkerClocks, TheStepIsTheMeanOverWorkersThatTrainedElseOverThoseThatPushed) {
  WorkerClocks w = Job(Consistency::kSync, 3);
  Hold(w, 0, 0, 0);
  Hold(w, 1, 0, 0);
  Hold(w, 1, 0, 1);
  TickOk(w, 0, 0);
  TickOk(w, 1, 0);
  TickOk(w, 2, 0, /*idle=*/true);  // no batch at this clock
  WorkerClocks::CompleteClock c;
  w.TakeClock(2, &c);
  EXPECT_EQ(c.trained, 2u);
  EXPECT_EQ(c.Divisor(0), 2u);
  EXPECT_EQ(c.Divisor(1), 2u);  // the same count for a table only one worker reached
  // Every tick idle: the workers that pushed to each table.
  Hold(w, 0, 1, 0);
  Hold(w, 0, 1, 0);
  Hold(w, 2, 1, 0);
  Hold(w, 2, 1, 1);
  for (int r = 0; r < 3; ++r) TickOk(w, r, 1, true);
  w.TakeClock(2, &c);
  EXPECT_EQ(c.trained, 0u);
  EXPECT_EQ(c.contributors, (std::vector<uint32_t>{2, 1}));
  EXPECT_EQ(c.Divisor(0), 2u);
  EXPECT_EQ(c.Divisor(1), 1u);
}

TEST(WorkerClocks, WithNoLiveWorkerEveryHeldClockCompletes) {
  WorkerClocks w = Job(Consistency::kSync, 2);
  Hold(w, 0, 0);
  TickOk(w, 0, 0);
  Hold(w, 0, 1);
  TickOk(w, 0, 1);
  TickOk(w, 1, 0);
  EXPECT_EQ(w.CompleteBelow(), 1);
  w.SetMembership(2, {});
  EXPECT_FALSE(w.any_live());
  EXPECT_EQ(w.CompleteBelow(), 2);  // worker 0's push for clock 1 was finished: it is applied
}

TEST(WorkerClocks, SyncHoldsPushesForTheClockBeingAppliedPastTheLimitOnlyLaterOnesAreBounded) {
  const uint64_t held = 100;
  WorkerClocks w = Job(Consistency::kSync, 2, 0, held);
  auto f = Frames("w0", 200);
  const uint64_t bytes = FramesBytes(f);
  ASSERT_GT(bytes, held);
  EXPECT_TRUE(w.CheckHold(0, 0, 1, bytes).ok());  // the clock being applied: always taken
  Status s = w.CheckHold(0, 1, 1, bytes);
  EXPECT_EQ(s.code(), Code::kTooLarge);
  EXPECT_EQ(s.message(), "synchronous pushes held for clocks after 0 would pass 100 bytes (the held-bytes limit)");
  EXPECT_EQ(w.CheckHold(0, 3, 1, 8).code(), Code::kInvalidArgument);  // past the worker's clock + 2
  EXPECT_EQ(w.CheckHold(0, -1, 1, 8).code(), Code::kInvalidArgument);
  EXPECT_EQ(w.CheckHold(0, 0, 2, 8).code(), Code::kInvalidArgument);  // one step per sync push
  // Held bytes ahead are counted, and recounted the same from the pushes.
  Hold(w, 0, 1);
  const uint64_t ahead = w.ahead_bytes();
  EXPECT_GT(ahead, 0u);
  w.RecountAhead();
  EXPECT_EQ(w.ahead_bytes(), ahead);
  // A push for a clock already applied is stale.
  TickOk(w, 0, 0);
  TickOk(w, 1, 0);
  WorkerClocks::CompleteClock c;
  w.TakeClock(1, &c);
  s = w.CheckHold(1, 0, 1, 8);
  EXPECT_EQ(s.code(), Code::kStaleClock);
  EXPECT_EQ(s.message(), "push for clock 0 arrived after that clock was applied (now 1)");
}

TEST(WorkerClocks, BoundedStalenessParksAPullUntilTheSlowestIsWithinTheBound) {
  WorkerClocks w = Job(Consistency::kBounded, 2, /*staleness=*/2);
  for (int c = 0; c < 3; ++c) TickOk(w, 0, c);  // worker 0 at clock 3, worker 1 at 0
  bool park = true;
  int64_t need = -1;
  ASSERT_TRUE(w.GatePull(0, 2, &park, &need).ok());
  EXPECT_FALSE(park);  // needs clock 0: served
  ASSERT_TRUE(w.GatePull(0, 3, &park, &need).ok());
  EXPECT_TRUE(park);
  EXPECT_EQ(need, 1);
  ASSERT_TRUE(w.Park(need, 0, Frames("p"), Clock::now()).ok());
  std::deque<WorkerClocks::Parked> go;
  w.TakeReleasable(&go);
  EXPECT_TRUE(go.empty());
  TickOk(w, 1, 0);  // the slowest reaches clock 1
  w.TakeReleasable(&go);
  ASSERT_EQ(go.size(), 1u);
  EXPECT_EQ(Who(go[0].frames), "p");
  EXPECT_EQ(w.parked_bytes(), 0u);
  // A pull far ahead of the worker's own clock is refused.
  EXPECT_EQ(w.GatePull(0, 6, &park, &need).code(), Code::kInvalidArgument);
}

TEST(WorkerClocks, ParkedPullsAreReleasedInArrivalOrderOnceTheirClockIsReached) {
  WorkerClocks w = Job(Consistency::kSync, 3);
  TickOk(w, 0, 0);
  TickOk(w, 0, 1);
  TickOk(w, 1, 0);
  const auto t0 = Clock::now();
  ASSERT_TRUE(w.Park(2, 0, Frames("a"), t0).ok());
  ASSERT_TRUE(w.Park(1, 1, Frames("b"), t0).ok());
  ASSERT_TRUE(w.Park(2, 1, Frames("c"), t0).ok());
  ASSERT_TRUE(w.Park(1, 0, Frames("d"), t0).ok());
  std::deque<WorkerClocks::Parked> go;
  TickOk(w, 2, 0);  // min clock 1
  w.TakeReleasable(&go);
  ASSERT_EQ(go.size(), 2u);
  EXPECT_EQ(Who(go[0].frames), "b");
  EXPECT_EQ(Who(go[1].frames), "d");
  go.clear();
  TickOk(w, 1, 1);
  TickOk(w, 2, 1);  // min clock 2
  w.TakeReleasable(&go);
  ASSERT_EQ(go.size(), 2u);
  EXPECT_EQ(Who(go[0].frames), "a");
  EXPECT_EQ(Who(go[1].frames), "c");
  EXPECT_TRUE(w.parked().empty());
}

TEST(WorkerClocks, ParkingIsBoundedAndTheOldestExpiresFirst) {
  WorkerClocks w = Job(Consistency::kSync, 2, 0, /*held=*/40);
  TickOk(w, 0, 0);
  const auto t0 = Clock::now();
  ASSERT_TRUE(w.Park(1, 0, Frames("a", 8), t0).ok());
  ASSERT_TRUE(w.Park(1, 0, Frames("b", 8), t0 + Millis(5)).ok());
  Status s = w.Park(1, 0, Frames("c", 8), t0);
  EXPECT_EQ(s.code(), Code::kTooLarge);
  EXPECT_EQ(s.message(), "pulls held for slower workers would pass 40 bytes (the held-bytes limit)");
  WorkerClocks::Parked p;
  EXPECT_FALSE(w.TakeExpired(t0 + Millis(10), Millis(10), &p));  // held exactly max_hold: not yet
  ASSERT_TRUE(w.TakeExpired(t0 + Millis(11), Millis(10), &p));
  EXPECT_EQ(Who(p.frames), "a");
  EXPECT_FALSE(w.TakeExpired(t0 + Millis(11), Millis(10), &p));
  EXPECT_EQ(w.parked().size(), 1u);
  EXPECT_EQ(w.parked_bytes(), FramesBytes(w.parked().front().frames));
}

TEST(WorkerClocks, AJoiningWorkerIsWaitedForByNobodyAndStartsAtTheFastestClock) {
  WorkerClocks w = Job(Consistency::kSync, 2);
  ASSERT_FALSE(w.IsRetry(1, 5));
  EXPECT_TRUE(w.IsRetry(1, 5));
  w.SetMembership(2, {0});
  TickOk(w, 0, 0);
  TickOk(w, 0, 1);
  w.SetMembership(2, {0, 1});  // worker 1 restarted: joining
  EXPECT_TRUE(w.IsLive(1));
  EXPECT_EQ(w.MinClock(), 2);  // worker 1 (at clock 0) not counted
  EXPECT_EQ(w.CompleteBelow(), 2);
  EXPECT_FALSE(w.IsRetry(1, 1));  // a new process: its sequence starts again
  WorkerClocks::CompleteClock c;
  w.TakeClock(1, &c);
  int64_t at = -1;
  ASSERT_TRUE(w.Join(true, 1, 0, &at).ok());
  EXPECT_EQ(at, 2);  // the fastest live worker's clock
  EXPECT_EQ(w.clock(1), 2);
  EXPECT_EQ(w.MinClock(), 2);
  // Joined at a later clock by another server: moved up, until it pushed.
  ASSERT_TRUE(w.Join(true, 1, 3, &at).ok());
  EXPECT_EQ(at, 3);
  Hold(w, 1, 3);
  Status s = w.Join(true, 1, 4, &at);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "join at clock 4: worker 1 already pushed for clock 3");
}

TEST(WorkerClocks, TicksAreRefusedFromNonWorkersUnknownRanksAndAfterALostTick) {
  WorkerClocks w = Job(Consistency::kAsync, 2);
  Status s = w.Tick(false, 0, 0, false);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "tick from a non-worker or an unknown rank 0");
  EXPECT_EQ(w.Tick(true, 2, 0, false).code(), Code::kInvalidArgument);
  EXPECT_EQ(w.Tick(true, -1, 0, false).code(), Code::kInvalidArgument);
  s = w.Tick(true, 0, 1, false);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "tick for clock 1 but worker 0 is at clock 0: a tick was lost");
  TickOk(w, 0, 0);
  TickOk(w, 0, 0);  // a retried tick: accepted, changes nothing
  EXPECT_EQ(w.clock(0), 1);
  EXPECT_EQ(w.MaxClock(), 1);
  EXPECT_EQ(w.MinClock(), 0);
  int64_t at;
  EXPECT_EQ(w.Join(true, 5, 0, &at).code(), Code::kInvalidArgument);
}

// A fill (re-replication): a copy loaded from Save behaves as the
// original from there on — the same clocks, held pushes, push numbering,
// parked pulls — and a damaged state is refused with nothing changed.
TEST(WorkerClocks, ACopyLoadedFromSaveGoesOnAsTheOriginal) {
  WorkerClocks w = Job(Consistency::kSync, 3);
  Hold(w, 0, 0, 0, "w0-a");
  Hold(w, 2, 0, 1, "w2-a");
  TickOk(w, 0, 0);
  Hold(w, 0, 1, 0, "w0-next");  // a push for the next clock, ahead
  EXPECT_FALSE(w.IsRetry(1, 7));
  ASSERT_TRUE(w.Park(1, 1, Frames("parked-dc"), Clock::now()).ok());
  ASSERT_TRUE(w.Park(1, 2, Frames("parked-plain"), Clock::now()).ok());
  std::string saved;
  w.Save(&saved, [](const WorkerClocks::Parked& p) { return Who(p.frames) == "parked-dc"; });

  WorkerClocks copy(1 << 20);
  copy.SetModel(Consistency::kSync, 0);
  ASSERT_TRUE(copy.Load(saved).ok());
  EXPECT_EQ(copy.clocks(), w.clocks());
  EXPECT_EQ(copy.held_pushes(), w.held_pushes());
  EXPECT_EQ(copy.ahead_bytes(), w.ahead_bytes());
  EXPECT_TRUE(copy.IsRetry(1, 7));   // its push numbering came along
  EXPECT_FALSE(copy.IsRetry(1, 8));
  ASSERT_EQ(copy.parked().size(), 1u);  // only the pulls the filter kept
  EXPECT_EQ(Who(copy.parked()[0].frames), "parked-dc");
  for (WorkerClocks* c : {&w, &copy}) {
    TickOk(*c, 1, 0);
    TickOk(*c, 2, 0);
    ASSERT_EQ(c->CompleteBelow(), 1);
    WorkerClocks::CompleteClock done;
    c->TakeClock(2, &done);
    ASSERT_EQ(done.pushes.size(), 2u);
    EXPECT_EQ(Who(done.pushes[0].frames), "w0-a");
    EXPECT_EQ(Who(done.pushes[1].frames), "w2-a");
    EXPECT_EQ(done.pushes[1].table, 1u);
    EXPECT_EQ(done.trained, 3u);
  }
  // Cut short, or anything else: refused, nothing changed.
  WorkerClocks other = Job(Consistency::kSync, 2);
  Status s = other.Load(std::string_view(saved).substr(0, saved.size() - 3));
  EXPECT_EQ(s.code(), Code::kBadMessage) << s.ToString();
  EXPECT_NE(s.message().find("worker clocks"), std::string::npos) << s.message();
  EXPECT_EQ(other.clocks().size(), 2u);
  EXPECT_EQ(other.Load("not clocks at all").code(), Code::kBadMessage);
  EXPECT_EQ(other.Load(saved + "x").code(), Code::kBadMessage);  // bytes left over
}

}  // namespace
}  // namespace shardps
