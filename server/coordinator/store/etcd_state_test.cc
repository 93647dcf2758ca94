// EtcdStateStore (etcd_state.h) against a real etcd (Debian's etcd-server,
// started here on loopback; the tests skip, saying why, where it cannot
// start): the state round trip, one leader at a time, a deposed leader's
// writes fenced off, and the lead handed on when a leader gives it up.
#include "server/coordinator/store/etcd_state.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <signal.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "common/base/process.h"
#include "tests/etcd_process.h"

namespace shardps {
namespace {

class EtcdStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shardps-etcd-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    if (std::string why = etcd_.Start(dir_); !why.empty()) GTEST_SKIP() << why;
    endpoint_ = etcd_.endpoint();
  }
  void TearDown() override {
    etcd_.Stop();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::string Url() const { return "etcd://" + endpoint_ + "/jobs/t1"; }
  static DurableState State(uint64_t update) {
    DurableState d;
    d.num_servers = 2;
    d.num_workers = 1;
    d.partitions = 8;
    d.next_update_id = update;
    d.servers = {{"tcp://a:1", 100, "ha"}, {"", 0, ""}};
    d.workers = {{WorkerState::kAlive, "hw", 7}};
    return d;
  }
  static constexpr StateShape kShape{2, 1, 1, 0};

  std::string dir_, endpoint_;
  testing::EtcdProcess etcd_;
};

TEST_F(EtcdStateTest, TheLeaderSavesAndANewLeaderLoadsWhatItSaved) {
  {
    std::unique_ptr<StateStore> a;
    ASSERT_TRUE(EtcdStateStore::Open(Url(), &a).ok());
    DurableState d;
    bool found = true;
    ASSERT_TRUE(a->Load(kShape, &d, &found).ok());
    EXPECT_FALSE(found);
    ASSERT_TRUE(a->Save(State(41)));
    ASSERT_TRUE(a->Save(State(42)));
    EXPECT_TRUE(a->Keep().ok());
  }  // gives the lead up: the next one takes it at once
  std::unique_ptr<StateStore> b;
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(EtcdStateStore::Open(Url(), &b).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  DurableState d;
  bool found = false;
  {
    Status ls = b->Load(kShape, &d, &found);
    ASSERT_TRUE(ls.ok()) << ls.ToString();
  }
  ASSERT_TRUE(found);
  EXPECT_EQ(d.next_update_id, 42u);
  b->Forget();
  {
    Status ls = b->Load(kShape, &d, &found);
    ASSERT_TRUE(ls.ok()) << ls.ToString();
  }
  EXPECT_FALSE(found);
  b.reset();
  // The job ended: a standby that leads next has nothing to take over and
  // gives the lead back; a coordinator started without --standby begins a
  // new job (and the mark goes: the next standby leads it).
  bool ended = false;
  std::unique_ptr<StateStore> c;
  Status cs = EtcdStateStore::Open(Url(), &c, {std::chrono::seconds(0), nullptr, &ended});
  EXPECT_FALSE(cs.ok());
  EXPECT_TRUE(ended);
  EXPECT_NE(cs.message().find("ended"), std::string::npos) << cs.ToString();
  ASSERT_TRUE(EtcdStateStore::Open(Url(), &c, {std::chrono::seconds(5)}).ok());
  c.reset();
  ended = false;
  cs = EtcdStateStore::Open(Url(), &c, {std::chrono::seconds(0), nullptr, &ended});
  EXPECT_TRUE(cs.ok()) << cs.ToString();
  EXPECT_FALSE(ended);
}

// Two jobs on one etcd, each under its own prefix: both lead at once, and
// neither loads, overwrites or ends the other's state.
TEST_F(EtcdStateTest, TwoJobsUnderDifferentPrefixesDoNotSeeEachOther) {
  std::unique_ptr<StateStore> a, b;
  ASSERT_TRUE(EtcdStateStore::Open(Url(), &a, {std::chrono::seconds(2)}).ok());
  ASSERT_TRUE(EtcdStateStore::Open("etcd://" + endpoint_ + "/jobs/t2", &b, {std::chrono::seconds(2)}).ok());
  ASSERT_TRUE(a->Save(State(7)));
  DurableState d;
  bool found = true;
  ASSERT_TRUE(b->Load(kShape, &d, &found).ok());
  EXPECT_FALSE(found);
  ASSERT_TRUE(b->Save(State(8)));
  b->Forget();  // the second job ends
  ASSERT_TRUE(a->Load(kShape, &d, &found).ok());
  ASSERT_TRUE(found);
  EXPECT_EQ(d.next_update_id, 7u);
  EXPECT_TRUE(a->Keep().ok());
}

TEST_F(EtcdStateTest, OneLeaderAtATimeAndADeposedLeadersWritesAreFenced) {
  std::unique_ptr<StateStore> a;
  ASSERT_TRUE(EtcdStateStore::Open(Url(), &a).ok());
  const std::string a_id = static_cast<EtcdStateStore*>(a.get())->id();
  std::unique_ptr<StateStore> b;
  Status s = EtcdStateStore::Open(Url(), &b, {std::chrono::seconds(1)});
  EXPECT_EQ(s.code(), Code::kConflict) << s.ToString();
  EXPECT_NE(s.message().find(a_id), std::string::npos) << s.message();
  // a's lead lapses (as when it stopped past its lease): the key goes.
  EtcdClient etcd({endpoint_}, std::chrono::milliseconds(500));
  EtcdClient::Txn lapse;
  lapse.key = "jobs/t1/leader";
  lapse.value = a_id;
  lapse.deletes = {lapse.key};
  bool ok = false;
  ASSERT_TRUE(etcd.Commit(lapse, &ok).ok());
  ASSERT_TRUE(ok);
  ASSERT_TRUE(EtcdStateStore::Open(Url(), &b, {std::chrono::seconds(5)}).ok());
  ASSERT_TRUE(b->Save(State(7)));
  EXPECT_FALSE(a->Save(State(99)));  // fenced
  EXPECT_FALSE(a->Keep().ok());      // and it knows it no longer leads
  DurableState d;
  bool found = false;
  {
    Status ls = b->Load(kShape, &d, &found);
    ASSERT_TRUE(ls.ok()) << ls.ToString();
  }
  EXPECT_EQ(d.next_update_id, 7u);
}

TEST_F(EtcdStateTest, BadUrlsAndAnUnreachableEtcdAreNamed) {
  std::unique_ptr<StateStore> s;
  Status st = EtcdStateStore::Open("etcd://" + endpoint_, &s);
  EXPECT_NE(st.message().find("names no prefix"), std::string::npos) << st.message();
  st = EtcdStateStore::Open("etcd://nohostport/x", &s);
  EXPECT_NE(st.message().find("is not HOST:PORT"), std::string::npos) << st.message();
  st = EtcdStateStore::Open("etcd://127.0.0.1:1/x", &s);
  EXPECT_EQ(st.code(), Code::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find("127.0.0.1:1"), std::string::npos) << st.message();
}

// etcd lost (stopped): the leader's write fails and it steps down rather
// than promise what may not be saved; a standby waits for etcd and leads
// once it answers again, with the state saved before the loss (or the
// write that timed out, if etcd took it after all).
TEST_F(EtcdStateTest, WithEtcdDownTheLeaderStepsDownAndAStandbyLeadsOnceItIsBack) {
  std::unique_ptr<StateStore> a;
  ASSERT_TRUE(EtcdStateStore::Open(Url(), &a).ok());
  ASSERT_TRUE(a->Save(State(5)));
  ASSERT_EQ(kill(etcd_.pid(), SIGSTOP), 0);
  std::atomic<bool> stop{false}, led{false};
  std::unique_ptr<StateStore> b;
  Status bs;
  std::thread standby([&] {
    bs = EtcdStateStore::Open(Url(), &b, {std::chrono::seconds(0), &stop});
    led = true;
  });
  EXPECT_FALSE(a->Save(State(6)));
  EXPECT_FALSE(a->Keep().ok());  // stepped down
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // (etcd stays down past a's lease)
  EXPECT_FALSE(led.load());
  ASSERT_EQ(kill(etcd_.pid(), SIGCONT), 0);
  for (int i = 0; i < 300 && !led; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));  // 15 s at most
  stop = true;
  standby.join();
  ASSERT_TRUE(bs.ok()) << bs.ToString();
  DurableState d;
  bool found = false;
  Status ls = b->Load(kShape, &d, &found);
  ASSERT_TRUE(ls.ok()) << ls.ToString();
  ASSERT_TRUE(found);
  // The write that timed out may have landed once etcd went on (it was in
  // etcd's socket): its replies were never sent, as when a coordinator dies
  // between its save and its replies (clients send again, ids kept).
  EXPECT_TRUE(d.next_update_id == 5u || d.next_update_id == 6u) << d.next_update_id;
  a.reset();  // (its lead is gone: it does not take b's)
  EXPECT_TRUE(b->Keep().ok());
  EXPECT_TRUE(b->Save(State(8)));
}

// What a state write costs in etcd beside RocksDB (printed, not asserted:
// docs/fault-tolerance.md quotes it); each store reads back its last write.
TEST_F(EtcdStateTest, AStateWriteInEtcdBesideOneInRocksDb) {
  std::unique_ptr<StateStore> etcd, local;
  ASSERT_TRUE(EtcdStateStore::Open(Url(), &etcd).ok());
  ASSERT_TRUE(StateStore::Open(dir_ + "/local", &local).ok());
  for (auto* store : {etcd.get(), local.get()}) {
    const int n = 200;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 1; i <= n; ++i) ASSERT_TRUE(store->Save(State(static_cast<uint64_t>(i))));
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / n;
    DurableState d;
    bool found = false;
    ASSERT_TRUE(store->Load(kShape, &d, &found).ok());
    ASSERT_TRUE(found);
    EXPECT_EQ(d.next_update_id, static_cast<uint64_t>(n));
    std::printf("%s: %.0f us per state write (%zu bytes)\n", store == etcd.get() ? "etcd" : "RocksDB", us,
                EncodeState(State(1)).size());
  }
}

}  // namespace
}  // namespace shardps
