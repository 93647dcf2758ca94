// Well-formed requests that would take the cluster down are refused with an
// error naming the limit, and every server goes on serving: tables past the
// servers' memory budgets, sparse tables flooded with new ids, an observer's
// reads (which create nothing), pulls for clocks far ahead, held pushes past
// their byte limit.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include <zmq.hpp>

#include "common/codec/wire.h"
#include "tests/cluster.h"
#include "tests/raw_peer.h"
#include "tests/table_spec.h"

namespace shardps {
namespace {

using testing::ConnectClient;
using testing::LocalCluster;

class LimitsTest : public ::testing::Test {
 protected:
  void Start(testing::ClusterOptions o) {
    Status s = cluster_.Start(o);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  void TearDown() override {
    if (HasFailure()) cluster_.DumpLogs();
  }
  // Every server still answers: a small dense table round-trips.
  void ExpectServing(Client& c, const std::string& name) {
    Table tab;
    Status s = c.CreateTable(testing::Dense(name, 64, 4), &tab);
    ASSERT_TRUE(s.ok()) << s.ToString();
    std::vector<float> v(tab.size());
    s = c.Pull(tab, v).Wait();
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  LocalCluster cluster_;
};

TEST_F(LimitsTest, TablesPastTheServersBudgetsAreRefusedAndNothingChanges) {
  testing::ClusterOptions o;
  o.servers = 2;
  o.workers = 0;
  o.consistency = "async";
  o.server_args = {"--memory-budget-mb", "64"};
  Start(o);
  auto c = ConnectClient(cluster_, ClientRole::kObserver);
  ASSERT_TRUE(c);
  // The table that killed both servers: 2^36 x 2^20 (each field valid alone).
  TableSpec huge = testing::Dense("huge", 1ull << 36, 1u << 20);
  Table t;
  Status s = c->CreateTable(huge, &t);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("more than 2^48 values"), std::string::npos) << s.ToString();
  // Within the value limit, far past the budget.
  huge.rows = 1ull << 28;
  huge.cols = 64;
  s = c->CreateTable(huge, &t);
  EXPECT_EQ(s.code(), Code::kTooLarge) << s.ToString();
  EXPECT_NE(s.message().find("table 'huge' needs"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("67108864-byte memory budget"), std::string::npos) << s.ToString();
  // Just over: 2 servers x 64 MiB; a table of 130 MiB (SGD: no state) fits
  // neither half.
  TableSpec over = testing::Dense("over", (130ull << 20) / (256 * 4), 256);
  s = c->CreateTable(over, &t);
  EXPECT_EQ(s.code(), Code::kTooLarge) << s.ToString();
  // Just under fits; then the next one no longer does (the budget counts what is held).
  TableSpec fits = over;
  fits.name = "fits";
  fits.rows = (100ull << 20) / (256 * 4);
  s = c->CreateTable(fits, &t);
  ASSERT_TRUE(s.ok()) << s.ToString();
  TableSpec second = fits;
  second.name = "second";
  s = c->CreateTable(second, &t);
  EXPECT_EQ(s.code(), Code::kTooLarge) << s.ToString();
  // A refused name was never defined.
  EXPECT_EQ(c->GetTable("huge", &t).code(), Code::kUnknownTable);
  ExpectServing(*c, "after");
}

TEST_F(LimitsTest, SparseTablesStopGrowingAtTheirLimitAndPullsCreateNothing) {
  testing::ClusterOptions o;
  o.servers = 2;
  o.workers = 1;
  o.consistency = "async";
  Start(o);
  auto w = ConnectClient(cluster_, ClientRole::kWorker, 0);
  auto obs = ConnectClient(cluster_, ClientRole::kObserver);
  ASSERT_TRUE(w && obs);
  TableSpec spec = testing::Sparse("emb", 8).MaxRows(1000).Constant(0.5f);
  Table t;
  ASSERT_TRUE(w->CreateTable(spec, &t).ok());
  // A pull of 5000 unknown ids reads initial values and makes no row.
  std::vector<uint64_t> ids(5000);
  std::iota(ids.begin(), ids.end(), 1000000);
  std::vector<float> vals(ids.size() * spec.cols);
  Table ot;
  ASSERT_TRUE(obs->GetTable("emb", &ot).ok());
  Status s = obs->Pull(ot, ids, vals).Wait();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(vals[0], 0.5f);
  EXPECT_EQ(vals.back(), 0.5f);
  // A worker may create up to the limit (about half on each server)...
  std::vector<uint64_t> few(400);
  std::iota(few.begin(), few.end(), 1);
  std::vector<float> g(few.size() * spec.cols, 1.0f);
  s = w->Push(t, few, g).Wait();
  ASSERT_TRUE(s.ok()) << s.ToString();
  // ...not a flood past it: refused, naming the limit.
  std::vector<float> big(ids.size() * spec.cols, 1.0f);
  s = w->Push(t, ids, big).Wait();
  EXPECT_EQ(s.code(), Code::kTooLarge) << s.ToString();
  EXPECT_NE(s.message().find("max_rows 1000"), std::string::npos) << s.ToString();
  s = w->Pull(t, ids, vals).Wait();  // a worker's read creates nothing either: answered
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(vals.back(), 0.5f);
  // Known rows still work, and the servers go on.
  std::vector<float> back(few.size() * spec.cols);
  s = w->Pull(t, few, back).Wait();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_FLOAT_EQ(back[0], 0.5f - spec.lr * 1.0f);
  ExpectServing(*w, "after");
}

TEST_F(LimitsTest, FarFuturePullsAndHeldPushFloodsAreRefused) {
  testing::ClusterOptions o;
  o.servers = 1;
  o.workers = 2;
  o.consistency = "sync";
  o.server_args = {"--held-mb", "1"};
  Start(o);
  auto w0 = ConnectClient(cluster_, ClientRole::kWorker, 0);
  auto w1 = ConnectClient(cluster_, ClientRole::kWorker, 1);
  ASSERT_TRUE(w0 && w1);
  Table t;
  ASSERT_TRUE(w0->CreateTable(testing::Dense("w", 1024, 64), &t).ok());  // 256 KiB a push
  ASSERT_TRUE(w1->GetTable("w", &t).ok());
  std::vector<float> g(t.size(), 1.0f), out(t.size());
  // Worker 0 ends clock 0, worker 1 does not: worker 0's pushes for clock 1
  // are held ahead of the clock being applied, 256 KiB each, until the 1 MiB
  // limit. (Pushes for the clock being applied are always taken.)
  ASSERT_TRUE(w0->Clock().ok());
  int refused = 0;
  Status last;
  for (int i = 0; i < 8; ++i) {
    last = w0->Push(t, g).Wait();
    if (!last.ok()) ++refused;
  }
  EXPECT_GT(refused, 0);
  EXPECT_EQ(last.code(), Code::kTooLarge) << last.ToString();
  EXPECT_NE(last.message().find("held-bytes limit"), std::string::npos) << last.ToString();
  // A pull tagged with a clock far ahead would be held for ever: refused at
  // once, naming both clocks. (A raw request: the client never sends one.)
  testing::RawPeer raw(cluster_.ServerEndpoint(0));
  wire::Fields f;
  f.type = wire::MsgType::Pull;
  f.request_id = 7;
  f.role = wire::Role::Worker;
  f.rank = 1;
  f.table = t.id;
  f.clock = 1000000000000;
  f.row_begin = 0;
  f.row_end = 1;
  std::vector<zmq::message_t> frames;
  frames.push_back(raw.Header(f));
  Status s = raw.Exchange(std::move(frames));
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("pull for clock 1000000000000 but worker 1 is at clock 0"), std::string::npos)
      << s.ToString();
  // A message of many frames: dropped as read, refused.
  f.clock = 0;
  frames.clear();
  frames.push_back(raw.Header(f));
  for (int i = 0; i < 100; ++i) frames.emplace_back(1024);
  s = raw.Exchange(std::move(frames));
  EXPECT_EQ(s.code(), Code::kBadMessage) << s.ToString();
  EXPECT_NE(s.message().find("at most 66 frames"), std::string::npos) << s.ToString();
  // Pushes of several steps that do not add up (raw: the client never sends them).
  auto push_of = [&](uint32_t steps, size_t value_frames, std::vector<uint64_t> bases) {
    wire::Fields p = f;
    p.type = wire::MsgType::Push;
    p.steps = steps;
    p.base_versions = bases;
    std::vector<zmq::message_t> fr;
    fr.push_back(raw.Header(p));
    for (size_t i = 0; i < value_frames; ++i) fr.emplace_back(t.cols() * 4);
    return raw.Exchange(std::move(fr));
  };
  s = push_of(3, 3, {1, 2});
  EXPECT_EQ(s.code(), Code::kBadMessage) << s.ToString();
  EXPECT_NE(s.message().find("a push of 3 steps with 2 base versions"), std::string::npos) << s.ToString();
  s = push_of(3, 2, {});
  EXPECT_EQ(s.code(), Code::kBadMessage) << s.ToString();
  EXPECT_NE(s.message().find("of 3 steps takes 4 frames, got 3"), std::string::npos) << s.ToString();
  s = push_of(65, 1, {});
  EXPECT_EQ(s.code(), Code::kTooLarge) << s.ToString();
  EXPECT_NE(s.message().find("a push of 65 steps (at most 64"), std::string::npos) << s.ToString();
  s = push_of(2, 2, {});  // well formed, but this job is synchronous
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("a push of 2 steps under sync"), std::string::npos) << s.ToString();

  // Within the bound a pull ahead is held until the others catch up.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(w0->ClockAsync().Wait().ok());
  // clock 4; a prefetch (clock 5) is held while worker 1 is at 0, within the bound
  Request held = w0->Prefetch(t, out);
  EXPECT_FALSE(held.Done());
  // Worker 1 catches up and worker 0 ends its clock (under sync a prefetch
  // reads the end of the clock): the held pull is answered.
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(w1->Clock().ok());
  ASSERT_TRUE(w0->Clock().ok());
  s = held.Wait(std::chrono::milliseconds(30000));
  EXPECT_TRUE(s.ok()) << s.ToString();
}

}  // namespace
}  // namespace shardps
