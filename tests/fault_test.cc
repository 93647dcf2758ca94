// Surviving failures (docs/fault-tolerance.md), the pieces below the
// launcher, against a real coordinator and real servers on loopback: the
// per-clock work pool that lets sync workers share an epoch exactly once,
// a dead worker's batch handed to another, a worker rank that rejoins at
// the running clock, and a push retried after its reply was lost applied
// once, and a worker that dies between its ticks to two servers counted
// the same on both. (Killing and restarting whole worker processes:
// tests/launch.)
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <string>
#include <thread>
#include <vector>

#include "shardps/client.h"
#include "tests/cluster.h"
#include "tests/raw_peer.h"
#include "tests/table_spec.h"

namespace shardps {
namespace {

using testing::ClusterOptions;
using testing::LocalCluster;

class FaultTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure()) cluster_.DumpLogs();
  }
  LocalCluster cluster_;
};

WorkRange Claim(Client& c, uint64_t pool, uint64_t total, uint32_t per) {
  ClaimOptions o;
  o.per_clock = true;
  WorkRange g;
  Status s = c.ClaimWork(pool, total, per, o, &g);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return g;
}

// Sync: each clock's batches are cut in rank order over the live workers,
// whoever claims first; a repeated claim at the same clock gets the same
// grant; at the pool's end a worker without a batch waits a clock, then the
// pool is finished for everyone, having handed out every unit once.
TEST_F(FaultTest, PerClockClaimsCutEachClockInRankOrderAndEndTogether) {
  ClusterOptions o;
  o.servers = 1;
  o.workers = 2;
  ASSERT_TRUE(cluster_.Start(o).ok());
  auto w0 = testing::ConnectClient(cluster_, ClientRole::kWorker, 0);
  auto w1 = testing::ConnectClient(cluster_, ClientRole::kWorker, 1);
  ASSERT_TRUE(w0 && w1);
  const uint64_t total = 3 * 20 + 7;  // 3 clocks of 2 x 10, then 7: one partial batch
  std::vector<int> seen(total, 0);
  for (int clock = 0; clock < 3; ++clock) {
    // Worker 1 claims first: it still gets the second slot.
    WorkRange g1 = Claim(*w1, 1, total, 10), g0 = Claim(*w0, 1, total, 10);
    EXPECT_EQ(g0.begin, static_cast<uint64_t>(20 * clock));
    EXPECT_EQ(g1.begin, static_cast<uint64_t>(20 * clock + 10));
    EXPECT_EQ(g0.size(), 10u);
    EXPECT_EQ(g1.size(), 10u);
    WorkRange again = Claim(*w0, 1, total, 10);  // a lost reply, claimed again
    EXPECT_EQ(again.begin, g0.begin);
    EXPECT_EQ(again.end, g0.end);
    for (const auto& g : {g0, g1})
      for (uint64_t u = g.begin; u < g.end; ++u) ++seen[u];
    ASSERT_TRUE(w0->Clock().ok());
    ASSERT_TRUE(w1->Clock().ok());
  }
  // Clock 3: 7 units for rank 0, none for rank 1 (it waits a clock); clock 4:
  // finished for both.
  int clock = 3;
  bool waited = false;
  for (;; ++clock) {
    ASSERT_LT(clock, 20);
    WorkRange g0 = Claim(*w0, 1, total, 10), g1 = Claim(*w1, 1, total, 10);
    for (const auto& g : {g0, g1})
      for (uint64_t u = g.begin; u < g.end; ++u) ++seen[u];
    if (g0.empty() && g1.empty()) {
      EXPECT_FALSE(g0.wait);  // finished, for both at the same clock
      EXPECT_FALSE(g1.wait);
      EXPECT_EQ(g0.handed, total);
      break;
    }
    if (g1.empty()) {
      EXPECT_TRUE(g1.wait) << "clock " << clock;  // the last clock's batches went to rank 0 only
      waited = true;
    }
    ASSERT_TRUE(w0->Clock().ok());
    ASSERT_TRUE(w1->Clock().ok());
  }
  EXPECT_TRUE(waited);
  for (uint64_t u = 0; u < total; ++u) EXPECT_EQ(seen[u], 1) << "unit " << u;
}

// A worker that dies holding a clock's batch before the servers counted
// that clock: its batch goes to the next claimer, the clock is averaged
// over the gradient that did arrive, and a new process for that rank
// rejoins at the running clock.
TEST_F(FaultTest, ADeadWorkersBatchGoesToTheNextClaimerAndItsRankRejoins) {
  ClusterOptions o;
  o.servers = 1;
  o.workers = 2;
  o.partitions = 4;
  o.heartbeat_timeout_ms = 1000;
  ASSERT_TRUE(cluster_.Start(o).ok());
  testing::RawPeer coord(cluster_.coordinator()), server(cluster_.ServerEndpoint(0));
  testing::RawWorker w1(1);
  ASSERT_TRUE(w1.Register(coord).ok());
  auto w0 = testing::ConnectClient(cluster_, ClientRole::kWorker, 0);
  ASSERT_TRUE(w0);
  Table t;
  ASSERT_TRUE(w0->CreateTable(testing::Dense("w", 4, 1).Sgd(1.0f), &t).ok());
  std::vector<float> g0 = {1, 1, 1, 1}, g1 = {3, 3, 3, 3}, out(4);
  // Clock 0: both push; the step is the mean (2).
  WorkRange a = Claim(*w0, 1, 100, 10), b;
  EXPECT_EQ(a.begin, 0u);
  ASSERT_TRUE(w1.Claim(coord, 1, 100, 10, &b).ok());
  EXPECT_EQ(b.begin, 10u);
  ASSERT_TRUE(w0->Push(t, g0).Wait().ok());
  ASSERT_TRUE(w1.Push(server, t.id, 4, g1.data()).ok());
  ASSERT_TRUE(w0->Clock().ok());
  ASSERT_TRUE(w1.Tick(server).ok());
  w1.clock = 1;
  ASSERT_TRUE(w0->Pull(t, out).Wait().ok());
  EXPECT_FLOAT_EQ(out[0], -2.0f);
  // Clock 1: worker 1 claims, pushes and vanishes before its tick.
  a = Claim(*w0, 1, 100, 10);
  ASSERT_TRUE(w1.Claim(coord, 1, 100, 10, &b).ok());
  EXPECT_EQ(a.begin, 20u);
  EXPECT_EQ(b.begin, 30u);
  ASSERT_TRUE(w1.Push(server, t.id, 4, g1.data()).ok());
  ASSERT_TRUE(w0->Push(t, g0).Wait().ok());
  ASSERT_TRUE(w0->Clock().ok());
  // Worker 0's pull of clock 2 waits until worker 1 is declared dead; its
  // push of clock 1 was dropped, so the step is worker 0's gradient alone.
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(w0->Pull(t, out).Wait().ok());
  const double held = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("worker 0 held %.2f s by the dead worker (heartbeat timeout 1 s)\n", held);
  EXPECT_FLOAT_EQ(out[0], -3.0f);
  // Clock 2: the dead worker's batch first.
  WorkRange c = Claim(*w0, 1, 100, 10);
  EXPECT_EQ(c.begin, 30u);
  EXPECT_EQ(c.end, 40u);
  // Rank 1 again, a new process: it starts at the running clock (2), after
  // the cut of clock 2: fresh units.
  auto again = testing::ConnectClient(cluster_, ClientRole::kWorker, 1);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->clock(), 2);
  WorkRange d = Claim(*again, 1, 100, 10);
  EXPECT_EQ(d.begin, 40u);
  ASSERT_TRUE(w0->Push(t, g0).Wait().ok());
  ASSERT_TRUE(again->Push(t, g1).Wait().ok());
  ASSERT_TRUE(w0->Clock().ok());
  ASSERT_TRUE(again->Clock().ok());
  ASSERT_TRUE(w0->Pull(t, out).Wait().ok());
  EXPECT_FLOAT_EQ(out[0], -5.0f);  // -3 - mean(1, 3)
}

// Sync: a clock's step is the mean over the workers that trained a batch in
// it, counted from their ticks — the same count on every server, also for a
// sparse table whose keys reach only some servers; a worker without a batch
// ticks idle and is not counted.
TEST_F(FaultTest, ASyncStepIsTheMeanOverTheWorkersThatTrained) {
  ClusterOptions o;
  o.servers = 2;
  o.workers = 2;
  o.partitions = 8;
  ASSERT_TRUE(cluster_.Start(o).ok());
  auto w0 = testing::ConnectClient(cluster_, ClientRole::kWorker, 0);
  auto w1 = testing::ConnectClient(cluster_, ClientRole::kWorker, 1);
  ASSERT_TRUE(w0 && w1);
  Table t, t1;
  ASSERT_TRUE(w0->CreateTable(testing::Sparse("emb", 1).Sgd(1.0f), &t).ok());
  ASSERT_TRUE(w1->GetTable("emb", &t1).ok());
  // Clock 0: disjoint keys (spread over both servers), gradients 2 and 4.
  std::vector<uint64_t> k0, k1;
  for (uint64_t k = 0; k < 16; ++k) {
    k0.push_back(k);
    k1.push_back(1000 + k);
  }
  std::vector<float> two(16, 2.0f), four(16, 4.0f), out(16);
  ASSERT_TRUE(w0->Push(t, k0, two).Wait().ok());
  Status pushed = w1->Push(t1, k1, four).Wait();
  ASSERT_TRUE(pushed.ok()) << pushed.ToString();
  ASSERT_TRUE(w0->Clock().ok());
  ASSERT_TRUE(w1->Clock().ok());
  ASSERT_TRUE(w0->Pull(t, k0, out).Wait().ok());
  for (float v : out) EXPECT_FLOAT_EQ(v, -1.0f);  // 2 / 2 workers
  ASSERT_TRUE(w1->Pull(t1, k1, out).Wait().ok());
  for (float v : out) EXPECT_FLOAT_EQ(v, -2.0f);  // 4 / 2 workers
  // Clock 1: worker 1 has no batch (idle tick): worker 0's gradient alone.
  ASSERT_TRUE(w0->Push(t, k0, two).Wait().ok());
  ASSERT_TRUE(w0->Clock().ok());
  ASSERT_TRUE(w1->Clock(/*trained=*/false).ok());
  ASSERT_TRUE(w0->Pull(t, k0, out).Wait().ok());
  for (float v : out) EXPECT_FLOAT_EQ(v, -3.0f);
}

// Sync: a worker that dies between its ticks to two servers counts for the
// same clocks on both. Worker 1 pushes its gradient of clock 0 to both
// servers, ticks server 0 only, and vanishes: once it is declared dead the
// coordinator asks both servers where it is, decides it finished clock 0
// (server 0 saw that tick), and server 1 takes the tick it missed, so both
// apply the mean of both workers' gradients (without it, server 1 would
// apply worker 0's alone). Its batch of clock 0 is not handed to anyone.
void BetweenTicks(LocalCluster& cluster_, int replicas) {
  ClusterOptions o;
  o.servers = 2;
  o.workers = 2;
  o.partitions = 2;  // row 0 on server 0, row 1 on server 1
  o.heartbeat_timeout_ms = 1000;
  if (replicas > 1) o.coordinator_args = {"--replicas", std::to_string(replicas)};
  ASSERT_TRUE(cluster_.Start(o).ok());
  testing::RawPeer coord(cluster_.coordinator()), s0(cluster_.ServerEndpoint(0)), s1(cluster_.ServerEndpoint(1));
  testing::RawWorker w1(1);
  ASSERT_TRUE(w1.Register(coord).ok());
  auto w0 = testing::ConnectClient(cluster_, ClientRole::kWorker, 0);
  ASSERT_TRUE(w0);
  Table t;
  ASSERT_TRUE(w0->CreateTable(testing::Dense("w", 2, 1).Sgd(1.0f), &t).ok());
  WorkRange a = Claim(*w0, 1, 100, 10), b;
  EXPECT_EQ(a.begin, 0u);
  ASSERT_TRUE(w1.Claim(coord, 1, 100, 10, &b).ok());
  EXPECT_EQ(b.begin, 10u);
  // Worker 1: its gradient (3) on both servers, its tick on server 0 only.
  const float three = 3.0f;
  wire::Fields f;
  f.type = wire::MsgType::Push;
  f.table = t.id;
  f.row_begin = 0;
  f.row_end = 1;
  f.seq = 1;
  f.group = 0;  // (with replicas a request names its group: group g's primary is server g)
  ASSERT_TRUE(w1.Send(s0, f, testing::Frames(zmq::message_t(&three, sizeof three))).ok());
  f.row_begin = 1;
  f.row_end = 2;
  f.group = 1;
  ASSERT_TRUE(w1.Send(s1, f, testing::Frames(zmq::message_t(&three, sizeof three))).ok());
  wire::Fields tick;
  tick.type = wire::MsgType::Tick;
  tick.group = 0;
  ASSERT_TRUE(w1.Send(s0, tick).ok());
  // Worker 0: its gradient (1) and its ticks; its pull of clock 1 waits
  // for worker 1 to be declared dead and retired.
  std::vector<float> g0 = {1, 1}, out(2);
  ASSERT_TRUE(w0->Push(t, g0).Wait().ok());
  ASSERT_TRUE(w0->Clock().ok());
  ASSERT_TRUE(w0->Pull(t, out).Wait().ok());
  EXPECT_FLOAT_EQ(out[0], -2.0f) << "server 0: the mean of both gradients";
  EXPECT_FLOAT_EQ(out[1], -2.0f) << "server 1 must count worker 1's clock 0 as server 0 did";
  EXPECT_NE(cluster_.Log("coordinator").find("worker 1 retired at clock 1"), std::string::npos);
  EXPECT_NE(cluster_.Log("server1").find("worker 1 died between its ticks"), std::string::npos);
  if (replicas > 1) {  // server 0's copy of group 1, from its primary's stream
    EXPECT_NE(cluster_.Log("server0").find("worker 1 died between its ticks"), std::string::npos);
  }
  // Its push is refused now, here as on every server.
  f.seq = 2;
  EXPECT_EQ(w1.Send(s1, f, testing::Frames(zmq::message_t(&three, sizeof three))).code(), Code::kUnavailable);
  // Clock 1: worker 0 alone; the pool goes on after worker 1's batch of
  // clock 0, which it trained and both servers counted.
  WorkRange c = Claim(*w0, 1, 100, 10);
  EXPECT_EQ(c.begin, 20u);
  ASSERT_TRUE(w0->Push(t, g0).Wait().ok());
  ASSERT_TRUE(w0->Clock().ok());
  ASSERT_TRUE(w0->Pull(t, out).Wait().ok());
  EXPECT_FLOAT_EQ(out[0], -3.0f);
  EXPECT_FLOAT_EQ(out[1], -3.0f);
  if (replicas < 2) return;
  // The backups settled it the same way: server 1's copy of group 0 (the
  // primary killed) serves it now, with the same values.
  cluster_.KillServer(0, SIGKILL);
  ASSERT_TRUE(w0->Push(t, g0).Wait().ok());
  ASSERT_TRUE(w0->Clock().ok());
  ASSERT_TRUE(w0->Pull(t, out).Wait().ok());
  EXPECT_FLOAT_EQ(out[0], -4.0f);
  EXPECT_FLOAT_EQ(out[1], -4.0f);
}

TEST_F(FaultTest, AWorkerKilledBetweenItsTicksToTwoServersCountsTheSameOnBoth) { BetweenTicks(cluster_, 1); }

// The same with two copies of every group: the backups learn the decision
// in their primaries' streams, and a fail-over keeps it.
TEST_F(FaultTest, AWorkerKilledBetweenItsTicksCountsTheSameOnEveryCopy) { BetweenTicks(cluster_, 2); }

// The server applies a worker's push once per sequence number: a push sent
// again after its reply was lost is answered OK and not applied twice.
TEST_F(FaultTest, APushRetriedAfterALostReplyIsAppliedOnce) {
  ClusterOptions o;
  o.servers = 1;
  o.workers = 1;
  o.consistency = "async";
  ASSERT_TRUE(cluster_.Start(o).ok());
  auto w = testing::ConnectClient(cluster_, ClientRole::kWorker, 0);
  ASSERT_TRUE(w);
  Table t;
  ASSERT_TRUE(w->CreateTable(testing::Dense("x", 1, 1).Sgd(1.0f), &t).ok());

  // Rank 0's pushes, numbered by hand (its client `w` pushes nothing).
  testing::RawPeer server(cluster_.ServerEndpoint(0));
  testing::RawWorker raw(0);
  const float one = 1.0f;
  ASSERT_TRUE(raw.Push(server, t.id, 1, &one, 1).ok());
  ASSERT_TRUE(raw.Push(server, t.id, 1, &one, 1).ok());  // the same push again: answered, not applied
  ASSERT_TRUE(raw.Push(server, t.id, 1, &one, 2).ok());  // the next one
  std::vector<float> out(1);
  ASSERT_TRUE(w->Pull(t, out).Wait().ok());
  EXPECT_FLOAT_EQ(out[0], -2.0f);
}

}  // namespace
}  // namespace shardps
