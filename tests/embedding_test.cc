// Embedding tables end to end (docs/embeddings.md), against real servers on
// loopback: a key list with repeated ids is sent once per id and gives the
// rows and the update of its de-duplicated, pre-summed form; bf16 values on
// the wire; admission, eviction (by the servers' event loop, counted in
// their metrics) and pulls that make no rows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/codec/half.h"
#include "shardps/client.h"
#include "tests/cluster.h"
#include "tests/table_spec.h"

namespace shardps {
namespace {

using namespace std::chrono_literals;
using testing::ClusterOptions;
using testing::LocalCluster;

class EmbeddingTest : public ::testing::Test {
 protected:
  void Start(const std::string& consistency, int servers) {
    ClusterOptions o;
    o.servers = servers;
    o.workers = 1;
    o.consistency = consistency;
    ASSERT_TRUE(cluster_.Start(o).ok());
    w_ = testing::ConnectClient(cluster_, ClientRole::kWorker, 0);
    ASSERT_TRUE(w_);
  }
  void TearDown() override {
    if (HasFailure()) cluster_.DumpLogs();
  }
  Table Make(const TableSpec& spec) {
    Table t;
    Status s = w_->CreateTable(spec, &t);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return t;
  }
  std::vector<float> PullRows(const Table& t, const std::vector<uint64_t>& ids) {
    std::vector<float> out(ids.size() * t.cols());
    Status s = w_->Pull(t, ids, out).Wait();
    EXPECT_TRUE(s.ok()) << s.ToString();
    return out;
  }
  LocalCluster cluster_;
  std::unique_ptr<Client> w_;
};

// Adagrad: two updates of a row differ from one update of their sum, so the
// servers must see the summed form.
TEST_F(EmbeddingTest, RepeatedIdsGiveTheRowsAndTheUpdateOfTheirPreSummedForm) {
  Start("async", 2);
  const Table a = Make(testing::Sparse("a", 3).Constant(0.25f).Adagrad(0.1f));
  const Table b = Make(testing::Sparse("b", 3).Constant(0.25f).Adagrad(0.1f));
  const std::vector<uint64_t> repeated = {10, 77, 10, 5, 77, 10};
  std::vector<float> g(repeated.size() * 3);
  for (size_t i = 0; i < g.size(); ++i) g[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
  // The same by hand: each id once, its gradients summed in order.
  const std::vector<uint64_t> unique = {10, 77, 5};
  std::vector<float> summed(9, 0.0f);
  for (size_t i = 0; i < repeated.size(); ++i) {
    const size_t u = repeated[i] == 10 ? 0 : repeated[i] == 77 ? 1 : 2;
    for (int j = 0; j < 3; ++j) summed[u * 3 + j] += g[i * 3 + j];
  }
  ASSERT_TRUE(w_->Push(a, repeated, g).Wait().ok());
  ASSERT_TRUE(w_->Push(b, unique, summed).Wait().ok());
  const std::vector<float> ra = PullRows(a, repeated), rb = PullRows(b, unique);
  for (size_t i = 0; i < repeated.size(); ++i) {
    const size_t u = repeated[i] == 10 ? 0 : repeated[i] == 77 ? 1 : 2;
    for (int j = 0; j < 3; ++j) EXPECT_FLOAT_EQ(ra[i * 3 + j], rb[u * 3 + j]) << "place " << i;
  }
  EXPECT_NE(ra[0], 0.25f);  // it was updated
}

// bf16: a push is rounded to bf16 on the wire and the stored value after the
// update too (stochastically: to one of the two bf16 values either side of
// the float32 result); a pull returns the stored bits. SGD at lr 1 from 0.5
// (exact).
TEST_F(EmbeddingTest, Bf16RowsUpdateAsTheirRoundedFloat32) {
  Start("async", 2);
  const Table t = Make(testing::Sparse("e", 4).Constant(0.5f).Sgd(1.0f).Type(DType::kBF16));
  EXPECT_EQ(t.spec.dtype, DType::kBF16);
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < 40; ++i) ids.push_back(i * 1001);
  std::vector<float> g(ids.size() * 4);
  for (size_t i = 0; i < g.size(); ++i) g[i] = 0.0123f * static_cast<float>(i % 13) - 0.07f;
  ASSERT_TRUE(w_->Push(t, ids, g).Wait().ok());
  const std::vector<float> got = PullRows(t, ids);
  for (size_t i = 0; i < g.size(); ++i) {
    const float exact = 0.5f - Bf16BitsToFloat(FloatToBf16Bits(g[i]));  // positive
    uint32_t u;
    std::memcpy(&u, &exact, 4);
    const float below = Bf16BitsToFloat(static_cast<uint16_t>(u >> 16));
    const float above = (u & 0xffffu) ? Bf16BitsToFloat(static_cast<uint16_t>((u >> 16) + 1)) : below;
    EXPECT_TRUE(got[i] == below || got[i] == above) << i << ": " << got[i] << " not " << below << " or " << above;
  }
}

// Client::Assign under sync: the rows are written at once (no clock ends
// in between), admission aside, on every server; a bf16 table takes them
// rounded to nearest; a dense range too; an id twice is refused.
TEST_F(EmbeddingTest, AssignWritesRowsAtOnceUnderSync) {
  Start("sync", 2);
  const Table e = Make(testing::Sparse("pre", 2).Constant(0.0f).Adagrad(0.1f).AdmitAfter(5));
  std::vector<uint64_t> ids;
  std::vector<float> rows;
  for (uint64_t i = 0; i < 30; ++i) {
    ids.push_back(i * 7919);
    rows.push_back(static_cast<float>(i));
    rows.push_back(-0.5f * static_cast<float>(i));
  }
  ASSERT_TRUE(w_->Assign(e, ids, rows).Wait().ok());
  EXPECT_EQ(PullRows(e, ids), rows);
  const Table h = Make(testing::Sparse("pre16", 1).Constant(0.0f).Sgd(1.0f).Type(DType::kBF16));
  const std::vector<uint64_t> one = {3};
  const std::vector<float> v = {1.00390625f + 0.001f};
  ASSERT_TRUE(w_->Assign(h, one, v).Wait().ok());
  EXPECT_EQ(PullRows(h, one)[0], Bf16BitsToFloat(FloatToBf16Bits(v[0])));
  const Table d = Make(testing::Dense("dw", 10, 3).Constant(1.0f).Sgd(0.1f));
  std::vector<float> dv(9);
  for (size_t i = 0; i < dv.size(); ++i) dv[i] = static_cast<float>(i) + 0.5f;
  ASSERT_TRUE(w_->Assign(d, RowRange{4, 7}, dv).Wait().ok());
  std::vector<float> got(30);
  ASSERT_TRUE(w_->Pull(d, got).Wait().ok());
  EXPECT_EQ(std::vector<float>(got.begin() + 12, got.begin() + 21), dv);
  EXPECT_EQ(got[0], 1.0f);
  const std::vector<uint64_t> twice = {5, 5};
  Status s = w_->Assign(e, twice, std::vector<float>(4, 0.0f)).Wait();
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  s = w_->Assign(e, ids, std::vector<float>(3, 0.0f)).Wait();
  EXPECT_EQ(s.code(), Code::kSizeMismatch) << s.ToString();
}

TEST_F(EmbeddingTest, AnIdGetsItsRowAtItsKthPushAndPullsMakeNone) {
  Start("async", 1);
  const Table t = Make(testing::Sparse("adm", 2).Constant(1.0f).Sgd(1.0f).AdmitAfter(3));
  const std::vector<uint64_t> id = {42};
  const std::vector<float> g = {0.5f, 0.25f};
  for (int k = 1; k <= 2; ++k) {
    ASSERT_TRUE(w_->Push(t, id, g).Wait().ok());
    EXPECT_EQ(PullRows(t, id), (std::vector<float>{1.0f, 1.0f})) << "push " << k << " dropped";
  }
  ASSERT_TRUE(w_->Push(t, id, g).Wait().ok());
  EXPECT_EQ(PullRows(t, id), (std::vector<float>{0.5f, 0.75f}));
  // The servers publish their series with each heartbeat: wait for one.
  std::string m;
  testing::WaitFor(
      [&] {
        m = testing::ServerMetrics(cluster_);
        return testing::MetricValue(m, "shardps_sparse_rows_created_total{table=\"adm\"}") == 1;
      },
      30s);
  EXPECT_EQ(testing::MetricValue(m, "shardps_sparse_not_admitted_total{table=\"adm\"}"), 2) << m;
  EXPECT_EQ(testing::MetricValue(m, "shardps_sparse_rows_created_total{table=\"adm\"}"), 1) << m;
  EXPECT_EQ(testing::MetricValue(m, "shardps_table_rows{table=\"adm\"}"), 1) << m;
}

// Under sync the servers stamp rows with the clock being applied; a row not
// updated for 2 clocks goes (between requests), is counted, and a later
// push makes it again from its initial values.
TEST_F(EmbeddingTest, IdleRowsAreEvictedByTheServerAndComeBackFromTheInitializer) {
  Start("sync", 1);
  const Table t = Make(testing::Sparse("ev", 1).Constant(2.0f).Sgd(1.0f).EvictAfterClocks(2));
  const std::vector<uint64_t> old_id = {7}, busy = {8};
  const std::vector<float> one = {1.0f};
  ASSERT_TRUE(w_->Push(t, old_id, one).Wait().ok());
  for (int c = 0; c < 4; ++c) {
    ASSERT_TRUE(w_->Push(t, busy, one).Wait().ok());
    ASSERT_TRUE(w_->Clock().ok());
  }
  EXPECT_EQ(PullRows(t, busy), (std::vector<float>{2.0f - 4}));
  std::string m;
  const bool evicted = testing::WaitFor(
      [&] {
        m = testing::ServerMetrics(cluster_);
        return testing::MetricValue(m, "shardps_sparse_rows_evicted_total{table=\"ev\"}") == 1;
      },
      30s);
  EXPECT_TRUE(evicted) << "the idle row was not evicted within 30 s:\n" << m;
  EXPECT_EQ(testing::MetricValue(m, "shardps_table_rows{table=\"ev\"}"), 1) << m;
  EXPECT_EQ(PullRows(t, old_id), (std::vector<float>{2.0f}));  // gone: its initial value
  ASSERT_TRUE(w_->Push(t, old_id, one).Wait().ok());
  ASSERT_TRUE(w_->Clock().ok());
  EXPECT_EQ(PullRows(t, old_id), (std::vector<float>{1.0f}));
}

// Bounded staleness s = 2 with the row cache on: a row pulled at clock c is
// served from the cache up to clock c + 2 (without the updates meanwhile),
// and asked of the servers again after that: never older than the bound.
TEST_F(EmbeddingTest, TheRowCacheNeverServesARowOlderThanTheBound) {
  ClusterOptions o;
  o.servers = 2;
  o.workers = 1;
  o.consistency = "bounded";
  o.staleness = 2;
  ASSERT_TRUE(cluster_.Start(o).ok());
  ClientOptions co;
  co.coordinator = cluster_.coordinator();
  co.rank = 0;
  co.row_cache_bytes = 1 << 20;
  co.connect_timeout = std::chrono::seconds(60);
  co.heartbeat_interval = std::chrono::milliseconds(200);
  std::unique_ptr<Client> w;
  ASSERT_TRUE(Client::Connect(co, &w).ok());
  auto obs = testing::ConnectClient(cluster_, ClientRole::kObserver);
  ASSERT_TRUE(obs);
  Table t, to;
  ASSERT_TRUE(w->CreateTable(testing::Sparse("c", 1).Constant(10.0f).Sgd(1.0f), &t).ok());
  ASSERT_TRUE(obs->GetTable("c", &to).ok());
  const std::vector<uint64_t> ids = {1, 2, 3, 1};
  std::vector<float> v(4);
  ASSERT_TRUE(w->Pull(t, ids, v).Wait().ok());  // clock 0: from the servers, kept
  EXPECT_EQ(v, (std::vector<float>{10, 10, 10, 10}));
  const std::vector<float> one = {1, 1, 1};
  const std::vector<uint64_t> unique = {1, 2, 3};
  for (int64_t clock = 1; clock <= 3; ++clock) {
    ASSERT_TRUE(obs->Push(to, unique, one).Wait().ok());  // the servers' rows move on by 1
    ASSERT_TRUE(w->Clock().ok());
    ASSERT_TRUE(w->Pull(t, ids, v).Wait().ok());
    const float want = clock <= 2 ? 10.0f : 10.0f - 3;  // cached while clock - 0 <= 2, then fresh
    EXPECT_EQ(v, (std::vector<float>(4, want))) << "clock " << clock;
  }
  const RowCacheStats s = w->row_cache_stats();
  EXPECT_EQ(s.lookups, 12u);  // 3 distinct ids, 4 pulls
  EXPECT_EQ(s.hits, 6u);      // clocks 1 and 2
  EXPECT_EQ(s.rows, 3u);
  (void)w->Close();
}

}  // namespace
}  // namespace shardps
