#include "server/coordinator/logic/snapshot_scheduler.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/codec/wire.h"
#include "tests/table_spec.h"

namespace shardps {
namespace {

using Clock = SnapshotScheduler::Clock;
using Effects = SnapshotScheduler::Effects;
using wire::MsgType;

class SnapshotSchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static int n = 0;
    dir_ = (std::filesystem::temp_directory_path() /
            ("shardps-scheduler-" + std::to_string(::getpid()) + "-" + std::to_string(n++)))
               .string();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  SnapshotScheduler::Options Opts() const {
    SnapshotScheduler::Options o;
    o.dir = dir_;
    o.timeout = std::chrono::seconds(1);
    return o;
  }
  // A complete snapshot (a manifest) labelled `label` under the root.
  // `base` >= 0: a snapshot of what changed since that one.
  std::string WriteComplete(int64_t label, std::vector<TableSpec> tables = {}, int64_t base = -1) const {
    const std::string d = dir_ + "/" + snapshot::DirName(label);
    std::filesystem::create_directories(d);
    snapshot::Manifest m;
    m.clock = label;
    m.num_servers = 1;
    m.owner = {0, 0, 0, 0};
    m.partitions = 4;
    m.tables = std::move(tables);
    if (base >= 0) m.parts.push_back({0, 0, 0, 1, 1, base, 0});  // (its listing names the base)
    EXPECT_TRUE(snapshot::WriteManifest(d, m).ok());
    return d;
  }
  // Answers every request in `e.asks` (and those they lead to) until no
  // request is left: ClockQuery with `min_clock`, SnapshotAt with `at`
  // (by server).
  void Answer(SnapshotScheduler& s, Effects& e, const SnapshotScheduler::Servers& to, int64_t min_clock,
              const std::function<Status(uint32_t server)>& at) {
    while (!e.asks.empty()) {
      const auto asks = std::move(e.asks);
      e.asks.clear();
      for (const auto& a : asks) {
        const Status st = a.type == MsgType::SnapshotAt ? at(a.server) : Status::OK();
        EXPECT_TRUE(s.OnReply(a.request_id, st, a.type == MsgType::ClockQuery ? min_clock : 0, to, &e));
      }
    }
  }

  std::string dir_;
  uint64_t next_id_ = 100;
  SnapshotScheduler::Servers to_{{0, 1}, &next_id_};
};

snapshot::PartEntry Part(uint32_t server) { return {0, server, server, 10, 1234}; }
snapshot::FileEntry File(uint32_t server) { return {server, snapshot::ServerFileName(server), 100, 5}; }

TEST_F(SnapshotSchedulerTest, OnDemandCutsAtTheFurthestServersClock) {
  SnapshotScheduler s(Opts());
  const auto t0 = Clock::now();
  Effects e;
  const Waiter ctl{"ctl", 5};
  s.StartOnDemand(&ctl, to_, t0, &e);
  ASSERT_EQ(e.asks.size(), 2u);
  EXPECT_EQ(e.asks[0].type, MsgType::ClockQuery);
  EXPECT_EQ(e.asks[0].server, 0u);
  EXPECT_EQ(e.asks[0].request_id, 100u);
  EXPECT_EQ(e.asks[1].request_id, 101u);
  EXPECT_EQ(next_id_, 102u);
  EXPECT_EQ(s.Cuts().chosen, (std::vector<int64_t>{-1}));
  e.asks.clear();
  EXPECT_TRUE(s.OnReply(100, Status::OK(), 7, to_, &e));
  EXPECT_TRUE(e.asks.empty());
  EXPECT_TRUE(s.OnReply(101, Status::OK(), 9, to_, &e));
  ASSERT_EQ(e.asks.size(), 2u);
  EXPECT_EQ(e.asks[0].type, MsgType::SnapshotAt);
  EXPECT_EQ(e.asks[0].clock, 9);  // where idle workers are too
  EXPECT_EQ(s.Cuts().chosen, (std::vector<int64_t>{9}));
  EXPECT_TRUE(s.OnReply(e.asks[0].request_id, Status::OK(), 0, to_, &e));
  EXPECT_TRUE(s.OnReply(e.asks[1].request_id, Status::OK(), 0, to_, &e));
  EXPECT_EQ(e.asks.size(), 2u);  // nothing more asked: the servers write
  EXPECT_FALSE(s.OnReply(999, Status::OK(), 0, to_, &e));  // not a snapshot's request
  s.OnReport(0, {9, std::nullopt, {Part(0)}, {File(0)}}, 2, t0, &e);
  EXPECT_TRUE(e.ended.empty());
  s.OnReport(1, {9, std::nullopt, {Part(1)}, {File(1)}}, 2, t0, &e);
  ASSERT_EQ(e.ended.size(), 1u);
  const auto& done = e.ended[0];
  EXPECT_TRUE(done.status.ok());
  EXPECT_EQ(done.clock, 9);
  EXPECT_EQ(done.parts.size(), 2u);
  EXPECT_EQ(done.files.size(), 2u);
  ASSERT_EQ(done.waiters.size(), 1u);
  EXPECT_EQ(done.waiters[0].routing_id, "ctl");
  EXPECT_FALSE(done.final);
  EXPECT_TRUE(s.Cuts().chosen.empty());
}

TEST_F(SnapshotSchedulerTest, ASecondRequestJoinsTheSnapshotUnderWay) {
  SnapshotScheduler s(Opts());
  Effects e;
  const Waiter a{"a", 1}, b{"b", 2};
  s.StartOnDemand(&a, to_, Clock::now(), &e);
  s.StartOnDemand(&b, to_, Clock::now(), &e);
  EXPECT_EQ(e.asks.size(), 2u);  // asked once
  Answer(s, e, to_, 3, [](uint32_t) { return Status::OK(); });
  s.OnReport(0, {3, std::nullopt, {}, {}}, 2, Clock::now(), &e);
  s.OnReport(1, {3, std::nullopt, {}, {}}, 2, Clock::now(), &e);
  ASSERT_EQ(e.ended.size(), 1u);
  EXPECT_EQ(e.ended[0].waiters.size(), 2u);
}

TEST_F(SnapshotSchedulerTest, AMissedCutIsCancelledAndOfferedFurtherAheadSixTimes) {
  SnapshotScheduler s(Opts());
  Effects e;
  s.StartOnDemand(nullptr, to_, Clock::now(), &e);
  std::vector<int64_t> offered;
  Answer(s, e, to_, 0, [&](uint32_t server) {
    if (server == 0) offered.push_back(s.Cuts().chosen.at(0));
    return server == 0 ? Status(Code::kStaleClock, "past it") : Status::OK();
  });
  EXPECT_EQ(offered, (std::vector<int64_t>{0, 4, 16, 64, 256, 1024}));
  ASSERT_EQ(e.ended.size(), 1u);
  EXPECT_EQ(e.ended[0].status.code(), Code::kTimeout);
  EXPECT_EQ(e.ended[0].status.message(), "training moved past every cut clock offered (6 tries)");
}

TEST_F(SnapshotSchedulerTest, AServersErrorFailsTheSnapshotAndASecondErrorEndsItAgain) {
  SnapshotScheduler s(Opts());
  Effects e;
  const Waiter ctl{"ctl", 5};
  s.StartOnDemand(&ctl, to_, Clock::now(), &e);
  EXPECT_TRUE(s.OnReply(100, Status::Internal("disk"), 0, to_, &e));
  ASSERT_EQ(e.ended.size(), 1u);
  EXPECT_EQ(e.ended[0].status.message(), "disk");
  EXPECT_EQ(e.ended[0].waiters.size(), 1u);
  EXPECT_TRUE(s.Cuts().chosen.empty());  // done: no longer a cut
  // The other server's error still belongs to it (never taken for an
  // acknowledgement): it ends again, with nobody left to answer.
  EXPECT_TRUE(s.OnReply(101, Status::Internal("disk too"), 0, to_, &e));
  ASSERT_EQ(e.ended.size(), 2u);
  EXPECT_TRUE(e.ended[1].waiters.empty());
  EXPECT_EQ(e.asks.size(), 2u);
}

TEST_F(SnapshotSchedulerTest, APeriodicCutTheServersTookIsCollectedFromTheirReports) {
  SnapshotScheduler s(Opts());
  Effects e;
  s.OnReport(1, {10, std::nullopt, {Part(1)}, {File(1)}}, 2, Clock::now(), &e);
  EXPECT_TRUE(e.ended.empty());
  EXPECT_EQ(s.Cuts().chosen, (std::vector<int64_t>{10}));
  s.OnReport(0, {10, std::nullopt, {Part(0)}, {File(0)}}, 2, Clock::now(), &e);
  ASSERT_EQ(e.ended.size(), 1u);
  EXPECT_TRUE(e.ended[0].status.ok());
  EXPECT_EQ(e.ended[0].clock, 10);
  s.OnReport(0, {20, std::string("disk full"), {}, {}}, 2, Clock::now(), &e);
  ASSERT_EQ(e.ended.size(), 2u);
  EXPECT_EQ(e.ended[1].status.code(), Code::kInternal);
  EXPECT_EQ(e.ended[1].status.message(), "server 0: disk full");
  EXPECT_TRUE(e.asks.empty());
}

TEST_F(SnapshotSchedulerTest, DeadlinesFailSnapshotsAndTimedOnesStartWhenDue) {
  SnapshotScheduler::Options o = Opts();
  o.every_sec = 10;
  SnapshotScheduler s(o);
  const auto t0 = Clock::now();
  Effects e;
  s.StartOnDemand(nullptr, to_, t0, &e);
  s.CheckTimers(t0 + std::chrono::milliseconds(500), false, to_, &e);
  EXPECT_TRUE(e.ended.empty());
  s.CheckTimers(t0 + std::chrono::seconds(2), false, to_, &e);
  ASSERT_EQ(e.ended.size(), 1u);
  EXPECT_EQ(e.ended[0].status.message(), "snapshot at clock -1 not complete within 1000 ms");
  e.asks.clear();
  s.CheckTimers(t0 + std::chrono::seconds(3), /*map_complete=*/false, to_, &e);
  EXPECT_TRUE(e.asks.empty());  // no shard map, no timer
  s.CheckTimers(t0 + std::chrono::seconds(3), true, to_, &e);  // the first period starts now
  s.CheckTimers(t0 + std::chrono::seconds(12), true, to_, &e);
  EXPECT_TRUE(e.asks.empty());
  s.CheckTimers(t0 + std::chrono::seconds(13), true, to_, &e);
  ASSERT_EQ(e.asks.size(), 2u);
  EXPECT_EQ(e.asks[0].type, MsgType::ClockQuery);
}

TEST_F(SnapshotSchedulerTest, ACutClockAheadNeverNamesACompleteSnapshot) {
  SnapshotScheduler s(Opts());
  s.SetRestorePoint(dir_ + "/old", 100);
  WriteComplete(113);
  WriteComplete(114);
  EXPECT_EQ(s.DirOf(15), dir_ + "/" + snapshot::DirName(115));
  Effects e;
  s.StartOnDemand(nullptr, to_, Clock::now(), &e);
  bool first = true;
  Answer(s, e, to_, 9, [&](uint32_t server) {  // 9 missed once: then 9 + 4
    const bool stale = first && server == 0;
    if (stale) first = false;
    return stale ? Status(Code::kStaleClock, "past it") : Status::OK();
  });
  EXPECT_EQ(s.Cuts().chosen, (std::vector<int64_t>{15}));  // 13 and 14 (labels 113, 114) exist
}

TEST_F(SnapshotSchedulerTest, AnOnDemandCutAtAClockAlreadyTakenIsAnsweredByIt) {
  SnapshotScheduler s(Opts());
  const std::string d = WriteComplete(12);
  Effects e;
  const Waiter ctl{"ctl", 5};
  s.StartOnDemand(&ctl, to_, Clock::now(), &e);
  SnapshotScheduler::Servers live = to_;
  live.workers_live = true;
  Answer(s, e, live, 12, [](uint32_t) { return Status::OK(); });  // idle workers at 12, cut there already
  ASSERT_EQ(e.ended.size(), 1u);
  EXPECT_TRUE(e.ended[0].status.ok());
  EXPECT_TRUE(e.ended[0].existing);
  EXPECT_EQ(e.ended[0].clock, 12);
  EXPECT_EQ(e.ended[0].waiters.size(), 1u);
  EXPECT_TRUE(e.asks.empty());  // (Answer took the clock queries) no SnapshotAt
  EXPECT_TRUE(s.Cuts().chosen.empty());
  // Without live workers the model may have changed at the same clock
  // (pushes of other clients): a new cut, at the next free label.
  Effects e2;
  s.StartOnDemand(&ctl, to_, Clock::now(), &e2);
  Answer(s, e2, to_, 12, [](uint32_t) { return Status::OK(); });
  EXPECT_TRUE(e2.ended.empty());
  EXPECT_EQ(s.Cuts().chosen, (std::vector<int64_t>{13}));
}

TEST_F(SnapshotSchedulerTest, AnOnDemandCutAtAPeriodicCutUnderWayWaitsForIt) {
  SnapshotScheduler s(Opts());
  Effects e;
  s.OnReport(1, {10, std::nullopt, {Part(1)}, {File(1)}}, 2, Clock::now(), &e);  // periodic, half reported
  const Waiter ctl{"ctl", 5};
  s.StartOnDemand(&ctl, to_, Clock::now(), &e);
  Answer(s, e, to_, 10, [](uint32_t) { return Status::OK(); });
  EXPECT_TRUE(e.asks.empty());  // no SnapshotAt: the cut at 10 is taken
  EXPECT_EQ(s.Cuts().chosen, (std::vector<int64_t>{10}));
  s.OnReport(0, {10, std::nullopt, {Part(0)}, {File(0)}}, 2, Clock::now(), &e);
  ASSERT_EQ(e.ended.size(), 1u);
  EXPECT_TRUE(e.ended[0].status.ok());
  EXPECT_FALSE(e.ended[0].existing);
  ASSERT_EQ(e.ended[0].waiters.size(), 1u);
  EXPECT_EQ(e.ended[0].waiters[0].routing_id, "ctl");
  EXPECT_EQ(e.ended[0].parts.size(), 2u);
}

TEST_F(SnapshotSchedulerTest, ACancelledCutsLateReportIsDroppedWithWhatItWrote) {
  SnapshotScheduler s(Opts());
  Effects e;
  s.StartOnDemand(nullptr, to_, Clock::now(), &e);
  bool first = true;
  Answer(s, e, to_, 6, [&](uint32_t server) {  // server 1 cut 6 at once, server 0 had moved past it
    const bool stale = first && server == 0;
    if (stale) first = false;
    return stale ? Status(Code::kStaleClock, "past it") : Status::OK();
  });
  EXPECT_EQ(s.Cuts().chosen, (std::vector<int64_t>{10}));  // 6 + 4
  const std::string six = s.DirOf(6);
  std::filesystem::create_directories(six);  // what server 1 wrote
  s.OnReport(1, {6, std::nullopt, {Part(1)}, {File(1)}}, 2, Clock::now(), &e);
  EXPECT_TRUE(e.ended.empty());
  EXPECT_FALSE(std::filesystem::exists(six));
  EXPECT_EQ(s.Cuts().chosen, (std::vector<int64_t>{10}));  // no op made for 6
}

TEST_F(SnapshotSchedulerTest, AFailedCutLeavesNothingAndRetentionRemovesIncompleteOnes) {
  SnapshotScheduler s(Opts());
  const std::string failed = s.DirOf(4);
  std::filesystem::create_directories(failed);
  std::ofstream(failed + "/server-0.sst") << "partial";
  s.Failed(4);
  EXPECT_FALSE(std::filesystem::exists(failed));
  const std::string done = WriteComplete(8);
  s.Failed(8);  // never a complete one
  EXPECT_TRUE(std::filesystem::exists(done));
  // A late writer left an older one behind; one under way and a newer one stay.
  const std::string late = s.DirOf(6), newer = s.DirOf(30), under_way = s.DirOf(20);
  for (const auto& d : {late, newer, under_way}) std::filesystem::create_directories(d);
  Effects e;
  s.OnReport(0, {20, std::nullopt, {Part(0)}, {File(0)}}, 2, Clock::now(), &e);  // half of 20
  const std::string ten = WriteComplete(25);
  s.Completed(25, ten, 1.0);
  EXPECT_FALSE(std::filesystem::exists(late));
  EXPECT_TRUE(std::filesystem::exists(under_way));
  EXPECT_TRUE(std::filesystem::exists(newer));
  EXPECT_TRUE(std::filesystem::exists(done));
}

TEST_F(SnapshotSchedulerTest, TheFinalSnapshotIsMarkedAndARollbackAbortsEverything) {
  SnapshotScheduler s(Opts());
  Effects e;
  s.StartFinal(to_, Clock::now(), &e);
  s.AbortAll(Status::Unavailable("the job was rolled back to x"), &e);
  ASSERT_EQ(e.ended.size(), 1u);
  EXPECT_TRUE(e.ended[0].final);
  EXPECT_EQ(e.ended[0].status.code(), Code::kUnavailable);
  EXPECT_TRUE(s.Cuts().chosen.empty());
  // Its requests are forgotten: their replies are not a snapshot's.
  EXPECT_FALSE(s.OnReply(e.asks[0].request_id, Status::OK(), 0, to_, &e));
}

TEST_F(SnapshotSchedulerTest, CompletedKeepsTheNewestCompleteSnapshots) {
  SnapshotScheduler::Options o = Opts();
  o.keep = 2;
  SnapshotScheduler s(o);
  const std::string d1 = WriteComplete(1), d2 = WriteComplete(2), d3 = WriteComplete(3);
  std::filesystem::create_directories(dir_ + "/" + snapshot::DirName(0));  // incomplete: not counted
  s.Completed(3, d3, 12.5);
  EXPECT_FALSE(std::filesystem::exists(d1));
  EXPECT_TRUE(std::filesystem::exists(d2));
  EXPECT_TRUE(std::filesystem::exists(d3));
  EXPECT_EQ(s.history().taken, 1u);
  EXPECT_EQ(s.history().latest_clock, 3);
  EXPECT_EQ(s.history().latest_dir, d3);
  EXPECT_EQ(s.history().latest_ms, 12.5);
}

// Snapshots of what changed: a kept snapshot's chain stays whole.
TEST_F(SnapshotSchedulerTest, CompletedKeepsTheSnapshotsTheKeptOnesRead) {
  SnapshotScheduler::Options o = Opts();
  o.keep = 1;
  SnapshotScheduler s(o);
  const std::string d1 = WriteComplete(1), d2 = WriteComplete(2), d3 = WriteComplete(3, {}, 2),
                    d4 = WriteComplete(4, {}, 3);
  s.Completed(4, d4, 1.0);
  EXPECT_FALSE(std::filesystem::exists(d1));  // full, read by no kept one
  EXPECT_TRUE(std::filesystem::exists(d2));   // 4 reads 3 reads 2
  EXPECT_TRUE(std::filesystem::exists(d3));
  EXPECT_TRUE(std::filesystem::exists(d4));
  const std::string d5 = WriteComplete(5);  // full: the chain behind it goes
  s.Completed(5, d5, 1.0);
  for (const auto& d : {d2, d3, d4}) EXPECT_FALSE(std::filesystem::exists(d)) << d;
  EXPECT_TRUE(std::filesystem::exists(d5));
}

TEST_F(SnapshotSchedulerTest, CutClocksArePeriodicAndChosen) {
  SnapshotScheduler::Options o = Opts();
  o.every_clocks = 5;
  SnapshotScheduler s(o);
  EXPECT_TRUE(s.Cuts().enabled);
  EXPECT_EQ(s.Cuts().every, 5u);
  SnapshotScheduler none(SnapshotScheduler::Options{});
  EXPECT_FALSE(none.Cuts().enabled);
}

TEST_F(SnapshotSchedulerTest, ARestoreTakesTheSnapshotsTablesAndTheJobFilesNewOnes) {
  const TableSpec a = testing::Dense("a", 10, 2);
  TableSpec a0 = a;
  a0.id = 0;
  WriteComplete(40, {a0});
  const std::string newest = WriteComplete(42, {a0});
  RestoreChoice c;
  ASSERT_TRUE(ChooseRestore(dir_, -1, 2, 64, {a, testing::Dense("b", 5, 1)}, &c).ok());
  EXPECT_EQ(c.dir, newest);
  EXPECT_EQ(c.manifest.clock, 42);
  ASSERT_EQ(c.tables.size(), 2u);
  EXPECT_EQ(c.tables[1].name, "b");
  EXPECT_EQ(c.tables[1].id, 1u);
  ASSERT_TRUE(ChooseRestore(dir_, 40, 2, 4, {}, &c).ok());
  EXPECT_EQ(c.manifest.clock, 40);
  Status s = ChooseRestore(dir_, -1, 2, 64, {testing::Dense("a", 10, 3)}, &c);
  EXPECT_EQ(s.code(), Code::kConflict);
  EXPECT_EQ(s.message(), "table 'a' of the job file differs from the one in " + newest);
  s = ChooseRestore(dir_, -1, 8, 64, {}, &c);
  EXPECT_EQ(s.message(), "the snapshot has 4 partitions, fewer than 8 servers");
  EXPECT_EQ(ChooseRestore(dir_, 41, 2, 64, {}, &c).code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace shardps
