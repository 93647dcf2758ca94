#include "server/coordinator/logic/membership.h"

#include <gtest/gtest.h>

namespace shardps {
namespace {

using Clock = Membership::Clock;
using Millis = Membership::Millis;

Membership::Options Job(uint32_t servers, uint32_t workers, uint32_t max_workers = 0) {
  Membership::Options o;
  o.num_servers = servers;
  o.num_workers = workers;
  o.max_workers = max_workers;
  o.heartbeat_timeout = Millis(1000);
  o.join_timeout = Millis(5000);
  return o;
}

Registration Server(const std::string& endpoint, int rank = -1, uint64_t budget = 0) {
  Registration r;
  r.requested_rank = rank;
  r.endpoint = endpoint;
  r.memory_budget = budget;
  r.id.host = "host-" + endpoint;
  return r;
}

Registration Worker(uint32_t pid, int rank = -1, const std::string& host = "w") {
  Registration r;
  r.requested_rank = rank;
  r.id.pid = pid;
  r.id.host = host;
  return r;
}

int MustRegisterServer(Membership& m, const std::string& from, const Registration& r, Clock::time_point now) {
  int rank = -1;
  Status s = m.RegisterServer(from, r, now, &rank);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return rank;
}

int MustRegisterWorker(Membership& m, const std::string& from, const Registration& r, Clock::time_point now,
                       Membership::Join want) {
  int rank = -1;
  Membership::Join how = Membership::Join::kAgain;
  Status s = m.RegisterWorker(from, r, false, now, &rank, &how);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(how, want);
  return rank;
}

TEST(Membership, ServersTakeTheFirstFreeRankAndKeepItWhenTheyRegisterAgain) {
  Membership m(Job(2, 1));
  const auto now = Clock::now();
  EXPECT_EQ(MustRegisterServer(m, "a", Server("tcp://a:1"), now), 0);
  EXPECT_FALSE(m.AllServersRegistered());
  EXPECT_EQ(MustRegisterServer(m, "a", Server("tcp://a:1"), now), 0);  // sent again
  EXPECT_EQ(MustRegisterServer(m, "b", Server("tcp://b:1", -1, 4096), now), 1);
  EXPECT_TRUE(m.AllServersRegistered());
  EXPECT_EQ(m.ServerRankOf("b"), 1);
  EXPECT_EQ(m.ServerRankOf("c"), -1);
  EXPECT_EQ(m.Budgets(), (std::vector<uint64_t>{0, 4096}));
  EXPECT_EQ(m.RegisteredServers(), (std::vector<uint32_t>{0, 1}));
  int rank = -1;
  Status s = m.RegisterServer("c", Server("tcp://c:1"), now, &rank);
  EXPECT_EQ(s.code(), Code::kConflict);
  EXPECT_EQ(s.message(), "all 2 server ranks are taken (shardps-ctl add-server opens one more while the job runs)");
  s = m.RegisterServer("c", Server("tcp://c:1", 1), now, &rank);
  EXPECT_EQ(s.code(), Code::kConflict);
  EXPECT_EQ(s.message(), "server rank 1 is held by a live server at tcp://b:1");
  s = m.RegisterServer("c", Server("tcp://c:1", 2), now, &rank);
  EXPECT_EQ(s.message(), "server rank 2 but the job has 2 servers");
  s = m.RegisterServer("c", Server(""), now, &rank);
  EXPECT_EQ(s.message(), "a server must give its endpoint");
}

// add-server: a rank opened while the job runs is not waited for, the next
// server without a rank of its own takes it, and it is saved and restored.
TEST(Membership, ARankOpenedByAddServerIsTakenByTheNextServer) {
  Membership m(Job(2, 1));
  const auto now = Clock::now();
  MustRegisterServer(m, "a", Server("tcp://a:1"), now);
  MustRegisterServer(m, "b", Server("tcp://b:1"), now);
  EXPECT_EQ(m.AddServer(), 2u);
  EXPECT_FALSE(m.servers()[2].registered);
  EXPECT_TRUE(m.AllServersRegistered());  // (not waited for)
  EXPECT_EQ(m.servers().size(), 3u);
  EXPECT_EQ(MustRegisterServer(m, "c", Server("tcp://c:1"), now), 2);
  EXPECT_TRUE(m.servers()[2].registered);
  EXPECT_EQ(m.RegisteredServers(), (std::vector<uint32_t>{0, 1, 2}));
  int rank = -1;
  EXPECT_EQ(m.RegisterServer("d", Server("tcp://d:1"), now, &rank).code(), Code::kConflict);
  // A resumed coordinator gets the added rank back with the others.
  Membership r(Job(2, 1));
  r.Restore(m.SavedServers(), m.SavedWorkers(), m.version(), now);
  ASSERT_EQ(r.servers().size(), 3u);
  EXPECT_EQ(r.servers()[2].endpoint, "tcp://c:1");
  r.AdoptServers();
  EXPECT_TRUE(r.servers()[2].adopt);
  EXPECT_FALSE(r.AllServersRegistered());  // (it held copies: waited for like the others)
  // A rollback starts the job again on its own servers: the added rank goes.
  m.RollBack();
  EXPECT_EQ(m.servers().size(), 2u);
  EXPECT_FALSE(m.AllServersRegistered());
  EXPECT_EQ(MustRegisterServer(m, "a2", Server("tcp://a:2"), now), 0);
  EXPECT_EQ(MustRegisterServer(m, "b2", Server("tcp://b:2"), now), 1);
  EXPECT_TRUE(m.AllServersRegistered());
}

TEST(Membership, ASilentServersRankIsTakenByItsReplacement) {
  Membership m(Job(1, 1));
  const auto t0 = Clock::now();
  MustRegisterServer(m, "a", Server("tcp://a:1"), t0);
  m.ExpireServers(t0 + Millis(500));
  EXPECT_EQ(m.AnsweringServers().size(), 1u);
  m.ExpireServers(t0 + Millis(1500));
  EXPECT_TRUE(m.AnsweringServers().empty());
  EXPECT_EQ(MustRegisterServer(m, "a2", Server("tcp://a:2", 0), t0 + Millis(1600)), 0);
  EXPECT_EQ(m.servers()[0].endpoint, "tcp://a:2");
  EXPECT_EQ(m.ServerRankOf("a"), -1);
}

TEST(Membership, WorkersTakePendingThenDeadThenVacantRanks) {
  Membership m(Job(1, 2, 3));
  const auto t0 = Clock::now();
  EXPECT_EQ(m.LiveWorkers(), (std::vector<uint32_t>{0, 1}));  // pending count as live
  EXPECT_EQ(MustRegisterWorker(m, "w0", Worker(10), t0, Membership::Join::kJoined), 0);
  EXPECT_EQ(MustRegisterWorker(m, "w1", Worker(11), t0, Membership::Join::kJoined), 1);
  EXPECT_EQ(m.workers()[1].clock, 0);
  // Worker 0 goes silent and is declared dead; the next one takes its rank.
  EXPECT_FALSE(m.ExpireWorker(0, t0 + Millis(900), t0));
  EXPECT_TRUE(m.ExpireWorker(0, t0 + Millis(1100), t0));
  EXPECT_EQ(m.workers()[0].state, WorkerState::kDead);
  EXPECT_EQ(MustRegisterWorker(m, "w0b", Worker(12), t0, Membership::Join::kJoinedRunning), 0);
  EXPECT_EQ(MustRegisterWorker(m, "w2", Worker(13), t0, Membership::Join::kJoinedRunning), 2);  // elastic
  int rank = -1;
  Membership::Join how;
  Status s = m.RegisterWorker("w3", Worker(14), false, t0, &rank, &how);
  EXPECT_EQ(s.code(), Code::kConflict);
  EXPECT_EQ(s.message(), "all 3 worker ranks are taken (raise [job] max_workers to let more join)");
  s = m.RegisterWorker("w3", Worker(14, 3), false, t0, &rank, &how);
  EXPECT_EQ(s.message(), "worker rank 3 but the job has 3 worker ranks (max_workers)");
  s = m.RegisterWorker("w3", Worker(14), true, t0, &rank, &how);
  EXPECT_EQ(s.code(), Code::kUnavailable);
}

TEST(Membership, TheSameWorkerProcessRegisteringAgainGetsTheSameAnswer) {
  Membership m(Job(1, 1));
  const auto t0 = Clock::now();
  MustRegisterWorker(m, "w0", Worker(10), t0, Membership::Join::kJoined);
  // A restarted coordinator's new connection, same process (host and pid).
  EXPECT_EQ(MustRegisterWorker(m, "w0-new", Worker(10, 0), t0, Membership::Join::kAgain), 0);
  EXPECT_EQ(m.workers()[0].routing_id, "w0-new");
  // Another process for the live rank waits until the old one is declared dead.
  int rank = -1;
  Membership::Join how;
  Status s = m.RegisterWorker("x", Worker(99, 0, "other"), false, t0, &rank, &how);
  EXPECT_EQ(s.code(), Code::kNotReady);
  EXPECT_EQ(s.message(),
            "worker rank 0 is held by a live worker on w (a dead one is declared dead after 1000 ms of silence)");
  EXPECT_TRUE(m.Leave(0));
  EXPECT_FALSE(m.Leave(0));
  s = m.RegisterWorker("x", Worker(99, 0), false, t0, &rank, &how);
  EXPECT_EQ(s.message(), "worker rank 0 finished and left the job");
}

TEST(Membership, APendingWorkerIsDeclaredDeadAfterTheJoinTimeout) {
  Membership m(Job(1, 2));
  const auto t0 = Clock::now();
  MustRegisterWorker(m, "w0", Worker(10), t0, Membership::Join::kJoined);
  EXPECT_FALSE(m.ExpireWorker(1, t0 + Millis(4000), t0));
  EXPECT_TRUE(m.ExpireWorker(1, t0 + Millis(6000), t0));
  EXPECT_EQ(m.workers()[1].state, WorkerState::kDead);
  EXPECT_EQ(m.LiveWorkers(), (std::vector<uint32_t>{0}));
}

TEST(Membership, AnyMessageIsAHeartbeatAndAResumedServerIsTakenBack) {
  Membership m(Job(2, 1));
  const auto t0 = Clock::now();
  m.Restore({{"tcp://a:1", 100, "ha"}, {"", 0, ""}}, {{WorkerState::kAlive, "hw", 7}}, 5, t0);
  EXPECT_EQ(m.version(), 6u);
  m.AdoptServers();
  EXPECT_TRUE(m.servers()[0].adopt);
  EXPECT_FALSE(m.servers()[1].adopt);  // never registered
  // A Register is not taken for a comeback (it registers).
  EXPECT_EQ(m.Hear("a", Membership::Speaker::kServer, 0, true, t0).server, -1);
  // A worker's message with a server's rank is not one either.
  EXPECT_EQ(m.Hear("a", Membership::Speaker::kWorker, 0, false, t0).server, -1);
  const auto heard = m.Hear("a", Membership::Speaker::kServer, 0, false, t0 + Millis(10));
  EXPECT_EQ(heard.server, 0);
  EXPECT_TRUE(heard.adopted);
  EXPECT_TRUE(m.servers()[0].registered && m.servers()[0].alive);
  EXPECT_EQ(m.ServerRankOf("a"), 0);
  EXPECT_FALSE(m.Hear("a", Membership::Speaker::kServer, 0, false, t0).adopted);
  // The restored live worker's heartbeat deadline runs from the restore.
  EXPECT_FALSE(m.ExpireWorker(0, t0 + Millis(900), t0));
  m.Hear("w", Membership::Speaker::kWorker, 0, false, t0 + Millis(800));
  EXPECT_FALSE(m.ExpireWorker(0, t0 + Millis(1700), t0));
  EXPECT_TRUE(m.ExpireWorker(0, t0 + Millis(1900), t0));
  // A silent server answering again is alive again.
  m.ExpireServers(t0 + Millis(2000));
  EXPECT_FALSE(m.servers()[0].alive);
  m.Hear("a", Membership::Speaker::kOther, -1, false, t0 + Millis(2100));
  EXPECT_TRUE(m.servers()[0].alive);
}

TEST(Membership, HeartbeatsCarryClocksAndServerReports) {
  Membership m(Job(2, 2));
  const auto t0 = Clock::now();
  MustRegisterServer(m, "a", Server("tcp://a:1"), t0);
  MustRegisterServer(m, "b", Server("tcp://b:1"), t0);
  MustRegisterWorker(m, "w0", Worker(1), t0, Membership::Join::kJoined);
  EXPECT_EQ(m.WorkerHeartbeat(1, 3).code(), Code::kUnavailable);  // pending: not alive
  EXPECT_TRUE(m.WorkerHeartbeat(0, 5).ok());
  EXPECT_TRUE(m.WorkerHeartbeat(0, 4).ok());  // clocks never go back
  EXPECT_EQ(m.workers()[0].clock, 5);
  EXPECT_EQ(m.FurthestClock(), 5);
  EXPECT_EQ(m.CountedClock(0), -1);  // no server reported yet
  ServerReport ra;
  ra.sample.pushes = 10;
  ra.waits.clocks = {4, 2};
  m.ServerHeartbeat(0, ra);
  ServerReport rb;
  rb.sample.pushes = 20;
  rb.waits.clocks = {3};
  m.ServerHeartbeat(1, rb);
  EXPECT_EQ(m.CountedClock(0), 3);   // the lowest over the servers
  EXPECT_EQ(m.CountedClock(1), -1);  // server 1 has no clock for worker 1
  rb.sample.pushes = 25;
  m.ServerHeartbeat(1, rb);
  EXPECT_EQ(m.servers()[1].prev.pushes, 20u);
  EXPECT_EQ(m.servers()[1].last.pushes, 25u);
}

TEST(Membership, AStopWaitsForTheLiveWorkersAndPendingOnesNeverJoin) {
  Membership m(Job(1, 3));
  const auto t0 = Clock::now();
  MustRegisterWorker(m, "w0", Worker(1, 1), t0, Membership::Join::kJoined);  // rank 1 alive, 0 and 2 pending
  bool changed = false;
  EXPECT_FALSE(m.NoWorkerAlive(&changed));
  EXPECT_TRUE(changed);
  // Both, before and after the live one: under sync the live worker's step
  // would wait for their clocks, and the stop for that step (seen under
  // TSan: launch_prometheus's stop right after a rollback timed out).
  EXPECT_EQ(m.workers()[0].state, WorkerState::kLeft);
  EXPECT_EQ(m.workers()[2].state, WorkerState::kLeft);
  EXPECT_FALSE(m.NoWorkerAlive(&changed));
  EXPECT_FALSE(changed);
  m.Leave(1);
  EXPECT_TRUE(m.NoWorkerAlive(&changed));
  EXPECT_FALSE(changed);
}

TEST(Membership, TheVersionCountsChangesAndARollbackStartsTheSlotsAgain) {
  Membership m(Job(1, 1, 2));
  const auto t0 = Clock::now();
  MustRegisterServer(m, "a", Server("tcp://a:1"), t0);
  MustRegisterWorker(m, "w0", Worker(1), t0, Membership::Join::kJoined);
  MustRegisterWorker(m, "w1", Worker(2), t0, Membership::Join::kJoinedRunning);
  EXPECT_EQ(m.version(), 1u);
  m.Changed();
  EXPECT_EQ(m.version(), 2u);
  m.RollBack();
  EXPECT_EQ(m.version(), 3u);
  EXPECT_FALSE(m.servers()[0].registered);
  EXPECT_EQ(m.servers()[0].endpoint, "tcp://a:1");  // known, not registered
  EXPECT_EQ(m.workers()[0].state, WorkerState::kPending);
  EXPECT_EQ(m.workers()[1].state, WorkerState::kVacant);
  EXPECT_EQ(m.workers()[0].clock, -1);
}

TEST(Membership, SavedSlotsRoundTrip) {
  Membership m(Job(2, 2));
  const auto t0 = Clock::now();
  MustRegisterServer(m, "a", Server("tcp://a:1", -1, 77), t0);
  MustRegisterWorker(m, "w0", Worker(42, -1, "hx"), t0, Membership::Join::kJoined);
  Membership back(Job(2, 2));
  back.Restore(m.SavedServers(), m.SavedWorkers(), m.version(), t0);
  EXPECT_EQ(back.servers()[0].endpoint, "tcp://a:1");
  EXPECT_EQ(back.servers()[0].budget, 77u);
  EXPECT_EQ(back.servers()[0].id.host, "host-tcp://a:1");
  EXPECT_FALSE(back.servers()[0].registered);  // until it calls
  EXPECT_EQ(back.workers()[0].state, WorkerState::kAlive);
  EXPECT_EQ(back.workers()[0].id.pid, 42u);
  EXPECT_EQ(back.workers()[1].state, WorkerState::kPending);
  EXPECT_EQ(back.version(), m.version() + 1);
  EXPECT_STREQ(WorkerStateName(WorkerState::kVacant), "vacant");
}

}  // namespace
}  // namespace shardps
