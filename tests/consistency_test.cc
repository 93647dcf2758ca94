// Integration tests: a real coordinator and 3 real servers (processes) on
// loopback, real clients over ZeroMQ.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "shardps/client.h"
#include <signal.h>
#include <sys/wait.h>

#include "common/base/process.h"
#include "server/tables/initializer.h"
#include "tests/cluster.h"
#include "tests/table_spec.h"

namespace shardps {
namespace {

using namespace std::chrono_literals;
using testing::ClusterOptions;
using testing::LocalCluster;

std::unique_ptr<Client> Connect(const LocalCluster& c, ClientRole role, int rank = -1) {
  return testing::ConnectClient(c, role, rank);
}

TableSpec DenseSpec(const std::string& name, uint64_t rows, uint32_t cols) {
  return testing::Dense(name, rows, cols).Uniform(-0.1f, 0.1f).Seed(3).Sgd(0.5f);
}

class ClusterTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure()) cluster_.DumpLogs();
  }
  LocalCluster cluster_;
};

TEST_F(ClusterTest, DenseTableOf3000RowsSpreadsOverThreeServers) {
  ClusterOptions o;
  o.servers = 3;
  o.workers = 0;
  o.consistency = "async";
  ASSERT_TRUE(cluster_.Start(o).ok());
  auto obs = Connect(cluster_, ClientRole::kObserver);
  ASSERT_TRUE(obs);
  Table w;
  ASSERT_TRUE(obs->CreateTable(DenseSpec("w", 3000, 4), &w).ok());
  std::vector<float> before(w.size()), after(w.size()), g(w.size());
  ASSERT_TRUE(obs->Pull(w, before).Wait().ok());
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i % 97) * 0.01f;
  ASSERT_TRUE(obs->Push(w, g).Wait().ok());
  ASSERT_TRUE(obs->Pull(w, after).Wait().ok());
  for (size_t i = 0; i < g.size(); ++i) ASSERT_FLOAT_EQ(after[i], before[i] - 0.5f * g[i]) << i;
  // Row ranges and scattered ids across all servers agree with the whole table.
  std::vector<uint64_t> ids = {2999, 0, 1500, 1000, 2001, 7};
  std::vector<float> rows(ids.size() * 4);
  ASSERT_TRUE(obs->Pull(w, ids, rows).Wait().ok());
  for (size_t i = 0; i < ids.size(); ++i)
    for (int j = 0; j < 4; ++j) ASSERT_EQ(rows[i * 4 + j], after[ids[i] * 4 + j]);
  std::vector<float> mid(600 * 4);
  ASSERT_TRUE(obs->Pull(w, RowRange{900, 1500}, mid).Wait().ok());
  for (size_t i = 0; i < mid.size(); ++i) ASSERT_EQ(mid[i], after[900 * 4 + i]);
  // Each server holds about a third: a server refuses rows it does not hold
  // (tested over raw sockets in bad_input_test); here the client-side split
  // must have produced one request per server for the whole table.
  std::vector<uint64_t> sparse_ids;
  for (uint64_t i = 0; i < 3000; i += 7) sparse_ids.push_back(i);
  std::vector<float> g2(sparse_ids.size() * 4, 1.0f), got(sparse_ids.size() * 4);
  ASSERT_TRUE(obs->Push(w, sparse_ids, g2).Wait().ok());
  ASSERT_TRUE(obs->Pull(w, sparse_ids, got).Wait().ok());
  for (size_t i = 0; i < sparse_ids.size(); ++i)
    ASSERT_FLOAT_EQ(got[i * 4], after[sparse_ids[i] * 4] - 0.5f);
}

// Linear regression, y = x . w*, trained with momentum by 2 synchronous
// workers with batch b each; the reference is one process with batch 2b.
TEST_F(ClusterTest, SynchronousTwoWorkersMatchSingleProcessWithCombinedBatch) {
  ClusterOptions o;
  o.servers = 3;
  o.workers = 2;
  o.consistency = "sync";
  ASSERT_TRUE(cluster_.Start(o).ok());
  const uint64_t D = 3000;
  const int B = 8, kSteps = 12;
  TableSpec spec = DenseSpec("w", D, 1);
  spec.optimizer = OptimizerKind::kMomentum;
  spec.momentum = 0.9f;
  spec.lr = 0.05f;
  // Data: 2*B*kSteps samples, sparse-ish features.
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> wstar(D);
  for (auto& v : wstar) v = nd(rng) * 0.1f;
  const int N = 2 * B * kSteps;
  std::vector<std::vector<std::pair<uint32_t, float>>> X(N);
  std::vector<float> Y(N);
  for (int i = 0; i < N; ++i) {
    float y = 0;
    for (int k = 0; k < 20; ++k) {
      uint32_t j = rng() % D;
      float v = nd(rng);
      X[i].push_back({j, v});
      y += v * wstar[j];
    }
    Y[i] = y;
  }
  // The gradient of 0.5 * mean (x.w - y)^2 over samples [first, first + n).
  auto grad = [&](const std::vector<float>& w, int first, int n, std::vector<float>& g) {
    std::fill(g.begin(), g.end(), 0.0f);
    for (int i = first; i < first + n; ++i) {
      float r = -Y[i];
      for (auto [j, v] : X[i]) r += v * w[j];
      for (auto [j, v] : X[i]) g[j] += r * v / static_cast<float>(n);
    }
  };
  auto worker = [&](int rank, std::vector<float>* final_w) {
    auto c = Connect(cluster_, ClientRole::kWorker, rank);
    ASSERT_TRUE(c);
    Table w;
    ASSERT_TRUE(c->CreateTable(spec, &w).ok());
    std::vector<float> params(D), g(D);
    for (int step = 0; step < kSteps; ++step) {
      Request pull = c->Pull(w, params);
      ASSERT_TRUE(pull.Wait().ok());
      EXPECT_GE(pull.min_clock(), step);  // sync: everyone finished step-1
      // Worker r's half of the combined batch of this step.
      grad(params, step * 2 * B + rank * B, B, g);
      ASSERT_TRUE(c->Push(w, g).Wait().ok());
      ASSERT_TRUE(c->Clock().ok());
    }
    ASSERT_TRUE(c->Pull(w, *final_w).Wait().ok());
    ASSERT_TRUE(c->Close().ok());
  };
  std::vector<float> w0(D), w1(D);
  std::thread t0(worker, 0, &w0), t1(worker, 1, &w1);
  t0.join();
  t1.join();
  ASSERT_FALSE(HasFailure());
  // Reference: one process, batch 2B, the same initial values (a pure
  // function of the spec and row) and the same optimizer rule.
  std::vector<float> ref(D), vel(D, 0.0f), g(D), init(D);
  for (uint64_t j = 0; j < D; ++j) InitRow(spec, j, &init[j]);
  ref = init;
  for (int step = 0; step < kSteps; ++step) {
    // Combined batch: the mean over 2B samples, as the sum of the two
    // halves' means divided by 2 (which is the mean over 2B).
    std::vector<float> ga(D), gb(D);
    grad(ref, step * 2 * B, B, ga);
    grad(ref, step * 2 * B + B, B, gb);
    for (size_t j = 0; j < D; ++j) {
      g[j] = (ga[j] + gb[j]) * 0.5f;
      vel[j] = spec.momentum * vel[j] + g[j];
      ref[j] -= spec.lr * vel[j];
    }
  }
  double max_diff = 0, moved = 0;
  for (size_t j = 0; j < D; ++j) {
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(w0[j] - ref[j])));
    moved = std::max(moved, static_cast<double>(std::fabs(w0[j] - init[j])));
    ASSERT_EQ(w0[j], w1[j]);
  }
  EXPECT_LE(max_diff, 1e-6) << "largest difference from the single-process reference";
  EXPECT_GT(moved, 1e-3) << "training did not move the parameters";
}

TEST_F(ClusterTest, BoundedStalenessHoldsTheBoundAndLetsTheFastWorkerRunAhead) {
  ClusterOptions o;
  o.servers = 3;
  o.workers = 2;
  o.consistency = "bounded";
  o.staleness = 2;
  ASSERT_TRUE(cluster_.Start(o).ok());
  const int kIters = 12;
  std::atomic<int> slow_clock{0};
  std::atomic<int64_t> max_lead{0};
  std::atomic<bool> violated{false};
  auto run = [&](int rank, bool slow) {
    auto c = Connect(cluster_, ClientRole::kWorker, rank);
    ASSERT_TRUE(c);
    Table w;
    ASSERT_TRUE(c->CreateTable(DenseSpec("w", 3000, 2), &w).ok());
    std::vector<float> p(w.size()), g(w.size(), 0.001f);
    for (int it = 0; it < kIters; ++it) {
      Request pull = c->Pull(w, p);
      ASSERT_TRUE(pull.Wait().ok());
      const int64_t c_now = c->clock();
      if (pull.min_clock() < c_now - 2) violated = true;
      if (!slow) {
        int64_t lead = c_now - slow_clock.load();
        int64_t prev = max_lead.load();
        while (lead > prev && !max_lead.compare_exchange_weak(prev, lead)) {
        }
      }
      if (slow) std::this_thread::sleep_for(40ms);  // the straggler
      ASSERT_TRUE(c->Push(w, g).Wait().ok());
      ASSERT_TRUE(c->Clock().ok());
      if (slow) slow_clock = static_cast<int>(c->clock());
    }
    ASSERT_TRUE(c->Close().ok());
  };
  std::thread slow(run, 0, true), fast(run, 1, false);
  slow.join();
  fast.join();
  EXPECT_FALSE(violated.load()) << "a pull reflected clocks older than c - s";
  // The fast worker got ahead of the slow one by s (the bound) at least once,
  // never by more than s + 1 (the slow worker's clock is read after its tick).
  EXPECT_GE(max_lead.load(), 2);
  EXPECT_LE(max_lead.load(), 3);
}

TEST_F(ClusterTest, AsynchronousNeverWaitsForAStalledWorker) {
  ClusterOptions o;
  o.servers = 3;
  o.workers = 2;
  o.consistency = "async";
  ASSERT_TRUE(cluster_.Start(o).ok());
  auto stalled = Connect(cluster_, ClientRole::kWorker, 0);  // joins, never ticks
  auto fast = Connect(cluster_, ClientRole::kWorker, 1);
  ASSERT_TRUE(stalled && fast);
  Table w;
  ASSERT_TRUE(fast->CreateTable(DenseSpec("w", 3000, 2), &w).ok());
  std::vector<float> p(w.size()), g(w.size(), 0.01f);
  for (int it = 0; it < 30; ++it) {
    Request pull = fast->Pull(w, p);
    ASSERT_TRUE(pull.Wait(20s).ok());
    EXPECT_EQ(pull.min_clock(), 0);  // the stalled worker is still at 0
    ASSERT_TRUE(fast->Push(w, g).Wait(20s).ok());
    ASSERT_TRUE(fast->Clock().ok());
  }
  EXPECT_EQ(fast->clock(), 30);
}

TEST_F(ClusterTest, SynchronousPullWaitsForTheSlowestAndAWorkerLeavingReleasesIt) {
  ClusterOptions o;
  o.servers = 2;
  o.workers = 2;
  o.consistency = "sync";
  ASSERT_TRUE(cluster_.Start(o).ok());
  auto a = Connect(cluster_, ClientRole::kWorker, 0);
  auto b = Connect(cluster_, ClientRole::kWorker, 1);
  ASSERT_TRUE(a && b);
  Table w;
  ASSERT_TRUE(a->CreateTable(DenseSpec("w", 100, 1), &w).ok());
  std::vector<float> p(w.size()), g(w.size(), 1.0f);
  ASSERT_TRUE(a->Push(w, g).Wait().ok());
  ASSERT_TRUE(a->Clock().ok());
  // a is at clock 1, b at 0: a's pull must wait.
  Request pull = a->Pull(w, p);
  EXPECT_EQ(pull.Wait(1500ms).code(), Code::kTimeout);
  EXPECT_FALSE(pull.Done());
  // b leaves without finishing clock 0: it stops being waited for.
  ASSERT_TRUE(b->Close().ok());
  ASSERT_TRUE(pull.Wait(30s).ok());
  EXPECT_EQ(pull.min_clock(), 1);
  // Only a's gradient of clock 0 counts, divided by the 1 contributor.
  TableSpec spec = DenseSpec("w", 100, 1);
  for (size_t i = 0; i < p.size(); ++i) {
    float init;
    InitRow(spec, i, &init);
    EXPECT_FLOAT_EQ(p[i], init - 0.5f);
  }
}

TEST_F(ClusterTest, AWorkerKilledMidTrainingIsDeclaredDeadAndNobodyWaitsForIt) {
  ClusterOptions o;
  o.servers = 2;
  o.workers = 2;
  o.consistency = "sync";
  o.heartbeat_timeout_ms = 1500;
  ASSERT_TRUE(cluster_.Start(o).ok());
  // Worker 1 is a real trainer process; worker 0 is this test.
  pid_t other = SpawnProcess({testing::BinaryPath("SHARDPS_LINEAR_TRAINER"), "--coordinator", cluster_.coordinator(),
                              "--rank", "1", "--steps", "1000000"},
                             cluster_.dir() + "/trainer.log");
  ASSERT_GT(other, 0);
  auto c = Connect(cluster_, ClientRole::kWorker, 0);
  ASSERT_TRUE(c);
  Table w;  // the trainer's table (client/examples/linear_trainer.cc)
  ASSERT_TRUE(c->CreateTable(testing::Dense("linear.w", 512, 1).Sgd(0.1f), &w).ok());
  std::vector<float> p(w.size()), g(w.size(), 0.0f);
  auto step = [&] {
    Request pull = c->Pull(w, p);
    Status s = pull.Wait(30s);
    if (s.ok()) s = c->Push(w, g).Wait(30s);
    if (s.ok()) s = c->Clock();
    return s;
  };
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(step().ok());  // in lock step with the trainer
  kill(other, SIGKILL);
  int st;
  waitpid(other, &st, 0);
  // The dead worker never ticks again: after the heartbeat timeout the
  // coordinator declares it dead and the servers stop waiting.
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(step().ok()) << "step " << i << " after the kill";
  EXPECT_NE(cluster_.Log("coordinator").find("worker 1 silent"), std::string::npos);
}

TEST_F(ClusterTest, PrefetchReadsForTheNextClock) {
  ClusterOptions o;
  o.servers = 2;
  o.workers = 1;
  o.consistency = "sync";
  ASSERT_TRUE(cluster_.Start(o).ok());
  auto c = Connect(cluster_, ClientRole::kWorker, 0);
  ASSERT_TRUE(c);
  TableSpec spec = DenseSpec("w", 100, 1);
  Table w;
  ASSERT_TRUE(c->CreateTable(spec, &w).ok());
  std::vector<float> now(w.size()), next(w.size()), g(w.size(), 1.0f);
  ASSERT_TRUE(c->Pull(w, now).Wait().ok());
  // Sent before this clock's push: under sync it is answered only once the
  // clock is complete, and then includes the push.
  Request pre = c->Prefetch(w, next);
  ASSERT_TRUE(c->Push(w, g).Wait().ok());
  EXPECT_EQ(pre.Wait(1s).code(), Code::kTimeout);
  ASSERT_TRUE(c->Clock().ok());
  ASSERT_TRUE(pre.Wait(30s).ok());
  EXPECT_EQ(pre.min_clock(), 1);
  for (size_t i = 0; i < next.size(); ++i) EXPECT_FLOAT_EQ(next[i], now[i] - 0.5f);
}

TEST_F(ClusterTest, PrefetchOfKeysReadsForTheNextClock) {
  ClusterOptions o;
  o.servers = 2;
  o.workers = 1;
  o.consistency = "sync";
  ASSERT_TRUE(cluster_.Start(o).ok());
  auto c = Connect(cluster_, ClientRole::kWorker, 0);
  ASSERT_TRUE(c);
  Table e;
  ASSERT_TRUE(c->CreateTable(testing::Sparse("emb", 2).Constant(1.0f).Sgd(0.5f), &e).ok());
  const std::vector<uint64_t> keys = {7, 1ull << 40, 7, 99};  // key 7 twice
  std::vector<float> now(keys.size() * 2), next(keys.size() * 2), g(keys.size() * 2, 1.0f);
  ASSERT_TRUE(c->Pull(e, keys, now).Wait().ok());
  // Issued before this clock's push of the same rows: answered once the
  // clock is complete, with the push in it (key 7's two gradients summed).
  Request pre = c->Prefetch(e, keys, next);
  ASSERT_TRUE(c->Push(e, keys, g).Wait().ok());
  EXPECT_EQ(pre.Wait(1s).code(), Code::kTimeout);
  ASSERT_TRUE(c->Clock().ok());
  ASSERT_TRUE(pre.Wait(30s).ok());
  EXPECT_EQ(pre.min_clock(), 1);
  for (size_t i = 0; i < keys.size(); ++i)
    for (int j = 0; j < 2; ++j)
      EXPECT_FLOAT_EQ(next[i * 2 + j], (keys[i] == 7 ? 0.0f : 0.5f)) << "key " << keys[i];
}

TEST_F(ClusterTest, PullCurrentReadsTheNewestValuesWhileTheNextClockIsHeldBack) {
  ClusterOptions o;
  o.servers = 2;
  o.workers = 2;
  o.consistency = "bounded";
  o.staleness = 0;
  ASSERT_TRUE(cluster_.Start(o).ok());
  auto fast = Connect(cluster_, ClientRole::kWorker, 0);
  auto slow = Connect(cluster_, ClientRole::kWorker, 1);
  ASSERT_TRUE(fast && slow);
  Table w, ws;
  ASSERT_TRUE(fast->CreateTable(DenseSpec("w", 100, 1), &w).ok());
  ASSERT_TRUE(slow->CreateTable(DenseSpec("w", 100, 1), &ws).ok());
  std::vector<float> before(w.size()), held(w.size()), now(w.size()), g(w.size(), 1.0f);
  ASSERT_TRUE(fast->Pull(w, before).Wait().ok());
  ASSERT_TRUE(fast->Push(w, g).Wait().ok());
  ASSERT_TRUE(fast->Clock().ok());
  // Clock 1 needs the slow worker at clock 1 (s = 0): held back.
  Request next = fast->Pull(w, held);
  EXPECT_EQ(next.Wait(1s).code(), Code::kTimeout);
  // The clock already read (0): answered at once, with the push applied.
  Request current = fast->PullCurrent(w, now);
  ASSERT_TRUE(current.Wait(30s).ok());
  EXPECT_FALSE(next.Done());
  for (size_t i = 0; i < now.size(); ++i) EXPECT_FLOAT_EQ(now[i], before[i] - 0.5f);
  ASSERT_TRUE(slow->Clock().ok());
  ASSERT_TRUE(next.Wait(30s).ok());
  EXPECT_EQ(next.min_clock(), 1);
}

TEST_F(ClusterTest, BarrierWaitsForEveryLiveWorkerAndALeavingWorkerReleasesIt) {
  ClusterOptions o;
  o.servers = 1;
  o.workers = 3;
  o.consistency = "async";
  ASSERT_TRUE(cluster_.Start(o).ok());
  auto a = Connect(cluster_, ClientRole::kWorker, 0);
  auto b = Connect(cluster_, ClientRole::kWorker, 1);
  auto c = Connect(cluster_, ClientRole::kWorker, 2);
  ASSERT_TRUE(a && b && c);
  std::atomic<int> passed{0};
  std::thread ta([&] { EXPECT_TRUE(a->Barrier(30s).ok()); passed++; });
  std::thread tb([&] { EXPECT_TRUE(b->Barrier(30s).ok()); passed++; });
  // Two of three arrived: nobody passes.
  EXPECT_FALSE(testing::WaitFor([&] { return passed.load() > 0; }, 1s));
  ASSERT_TRUE(c->Close().ok());  // the third leaves instead of arriving
  ta.join();
  tb.join();
  EXPECT_EQ(passed.load(), 2);
  // A barrier that cannot complete says so within its timeout.
  Status s = a->Barrier(500ms);
  EXPECT_EQ(s.code(), Code::kTimeout) << s.ToString();
  EXPECT_NE(s.message().find("barrier"), std::string::npos) << s.ToString();
  EXPECT_EQ(Connect(cluster_, ClientRole::kObserver)->Barrier(1s).code(), Code::kInvalidArgument);
}

TEST_F(ClusterTest, TablesFromTheJobFile) {
  ClusterOptions o;
  o.servers = 2;
  o.workers = 0;
  o.consistency = "async";
  o.job_toml = R"(
[[table]]
name = "emb"
kind = "sparse"
cols = 8
init = "constant"
value = 0.5
optimizer = "adagrad"
lr = 0.1
)";
  ASSERT_TRUE(cluster_.Start(o).ok());
  auto c = Connect(cluster_, ClientRole::kObserver);
  Table e;
  ASSERT_TRUE(c->GetTable("emb", &e).ok());
  EXPECT_EQ(e.spec.kind, TableKind::kSparse);
  EXPECT_EQ(e.spec.optimizer, OptimizerKind::kAdagrad);
  std::vector<uint64_t> ids = {3, 1ull << 63};
  std::vector<float> v(16);
  ASSERT_TRUE(c->Pull(e, ids, v).Wait().ok());
  for (float x : v) EXPECT_EQ(x, 0.5f);
}

TEST_F(ClusterTest, PullViewReadsTheRowsInTheBuffersTheyArrivedIn) {
  ClusterOptions o;
  o.servers = 3;
  o.workers = 0;
  o.consistency = "async";
  ASSERT_TRUE(cluster_.Start(o).ok());
  auto obs = Connect(cluster_, ClientRole::kObserver);
  ASSERT_TRUE(obs);
  Table w;
  ASSERT_TRUE(obs->CreateTable(DenseSpec("w", 3000, 64), &w).ok());  // 750 KiB over 3 servers
  std::vector<float> g(w.size());
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i % 101) * 0.01f;
  ASSERT_TRUE(obs->Push(w, g).Wait().ok());
  std::vector<float> want(w.size());
  ASSERT_TRUE(obs->Pull(w, want).Wait().ok());
  PulledRows view;
  ASSERT_TRUE(obs->PullView(w, &view).Wait().ok());
  EXPECT_EQ(view.floats(), w.size());
  auto pieces = view.pieces();
  EXPECT_GE(pieces.size(), 3u);  // at least one per server, in row order
  size_t at = 0;
  for (const auto& p : pieces)
    for (float v : p) ASSERT_EQ(v, want[at++]) << at;
  EXPECT_EQ(at, want.size());
  // A row range across two servers; CopyTo checks the size.
  ASSERT_TRUE(obs->PullView(w, RowRange{900, 1100}, &view).Wait().ok());
  std::vector<float> part(200 * 64);
  ASSERT_TRUE(view.CopyTo(part).ok());
  for (size_t i = 0; i < part.size(); ++i) ASSERT_EQ(part[i], want[900 * 64 + i]) << i;
  std::vector<float> wrong(7);
  EXPECT_EQ(view.CopyTo(wrong).code(), Code::kSizeMismatch);
  // Bad ranges are refused like Pull's.
  EXPECT_EQ(obs->PullView(w, RowRange{10, 3001}, &view).Wait().code(), Code::kOutOfRange);
}

TEST_F(ClusterTest, AWorkPoolHandsEveryUnitToExactlyOneClaimer) {
  ClusterOptions o;
  o.servers = 1;
  o.workers = 2;
  o.consistency = "bounded";
  o.staleness = 2;
  ASSERT_TRUE(cluster_.Start(o).ok());
  auto a = Connect(cluster_, ClientRole::kWorker, 0);
  auto b = Connect(cluster_, ClientRole::kWorker, 1);
  ASSERT_TRUE(a && b);
  // Two workers drain pool 7 (1,000 units, at most 7 a claim) concurrently;
  // the slower one (sleeping between claims) ends up with fewer units.
  constexpr uint64_t kTotal = 1000;
  std::vector<int> owner(kTotal, -1);
  std::mutex mu;
  std::atomic<int> overlaps{0};
  std::vector<uint64_t> claimed(2, 0);
  auto drain = [&](Client* c, int who, std::chrono::microseconds pause) {
    for (;;) {
      WorkRange r;
      Status s = c->ClaimWork(7, kTotal, 7, &r);
      ASSERT_TRUE(s.ok()) << s.ToString();
      if (r.empty()) return;
      ASSERT_LE(r.size(), 7u);
      ASSERT_LE(r.end, kTotal);
      {
        std::lock_guard<std::mutex> lock(mu);
        for (uint64_t u = r.begin; u < r.end; ++u) {
          if (owner[u] != -1) ++overlaps;
          owner[u] = who;
        }
        claimed[who] += r.size();
      }
      std::this_thread::sleep_for(pause);
    }
  };
  std::thread ta(drain, a.get(), 0, 0us), tb(drain, b.get(), 1, 2000us);
  ta.join();
  tb.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(std::count(owner.begin(), owner.end(), -1), 0) << "every unit is handed out";
  EXPECT_EQ(claimed[0] + claimed[1], kTotal);
  // A used-up pool stays used up; another pool id is a fresh pool.
  WorkRange r;
  ASSERT_TRUE(a->ClaimWork(7, kTotal, 7, &r).ok());
  EXPECT_TRUE(r.empty());
  ASSERT_TRUE(b->ClaimWork(8, 3, 100, &r).ok());
  EXPECT_EQ(r.begin, 0u);
  EXPECT_GE(r.end, 1u);
  const uint64_t first = r.end;
  // A claim that disagrees about the pool's size is refused, and the pool is
  // unchanged: the rest of pool 8 is still there.
  Status s = a->ClaimWork(8, 4, 1, &r);
  EXPECT_EQ(s.code(), Code::kConflict) << s.ToString();
  EXPECT_NE(s.message().find("pool 8 has 3 units"), std::string::npos) << s.message();
  uint64_t rest = 0;
  for (;;) {
    ASSERT_TRUE(a->ClaimWork(8, 3, 100, &r).ok());
    if (r.empty()) break;
    rest += r.size();
  }
  EXPECT_EQ(first + rest, 3u);
  // Zero units or a zero claim size: refused before anything is sent.
  EXPECT_EQ(a->ClaimWork(9, 0, 1, &r).code(), Code::kInvalidArgument);
  EXPECT_EQ(a->ClaimWork(9, 5, 0, &r).code(), Code::kInvalidArgument);
}

TEST_F(ClusterTest, ADeadWorkersLastClaimGoesToTheOthersAndALeavingWorkersDoesNot) {
  ClusterOptions o;
  o.servers = 1;
  o.workers = 3;
  o.consistency = "async";
  o.heartbeat_timeout_ms = 1500;
  ASSERT_TRUE(cluster_.Start(o).ok());
  // Worker 2 claims units of pool 3 and leaves cleanly; then worker 1 (a
  // child process) claims and dies without leaving.
  WorkRange left;
  {
    auto leaver = Connect(cluster_, ClientRole::kWorker, 2);
    ASSERT_TRUE(leaver);
    ASSERT_TRUE(leaver->ClaimWork(3, 100, 10, &left).ok());
    ASSERT_FALSE(left.empty());
    ASSERT_TRUE(leaver->Close().ok());
  }  // its ZeroMQ context and threads are gone before the fork
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    ClientOptions co;
    co.coordinator = cluster_.coordinator();
    co.role = ClientRole::kWorker;
    co.rank = 1;
    std::unique_ptr<Client> c;
    WorkRange r;
    uint64_t out[2] = {0, 0};
    if (Client::Connect(co, &c).ok() && c->ClaimWork(3, 100, 10, &r).ok()) out[0] = r.begin, out[1] = r.end;
    (void)!write(fds[1], out, sizeof(out));
    _exit(0);  // no Leave: to the coordinator this worker just goes silent
  }
  close(fds[1]);
  uint64_t dead[2] = {0, 0};
  ASSERT_EQ(read(fds[0], dead, sizeof(dead)), static_cast<ssize_t>(sizeof(dead)));
  close(fds[0]);
  int st;
  waitpid(child, &st, 0);
  ASSERT_LT(dead[0], dead[1]) << "the child could not claim";
  // Once worker 1 is declared dead, worker 0 is handed its claim again
  // first, then the rest; worker 2's finished claim is not handed out again.
  ASSERT_TRUE(testing::WaitFor([&] { return cluster_.Log("coordinator").find("worker 1 silent") != std::string::npos; },
                               30s))
      << "worker 1 was never declared dead";
  auto c = Connect(cluster_, ClientRole::kWorker, 0);
  ASSERT_TRUE(c);
  WorkRange r;
  ASSERT_TRUE(c->ClaimWork(3, 100, 100, &r).ok());
  EXPECT_EQ(r.begin, dead[0]);
  EXPECT_EQ(r.end, dead[1]);
  std::vector<int> seen(100, 0);
  for (uint64_t u = dead[0]; u < dead[1]; ++u) ++seen[u];
  for (uint64_t u = left.begin; u < left.end; ++u) ++seen[u];
  for (;;) {
    ASSERT_TRUE(c->ClaimWork(3, 100, 100, &r).ok());
    if (r.empty()) break;
    for (uint64_t u = r.begin; u < r.end; ++u) ++seen[u];
  }
  for (int u = 0; u < 100; ++u) EXPECT_EQ(seen[u], 1) << "unit " << u;
  EXPECT_NE(cluster_.Log("coordinator").find("of dead worker 1 go to the others"), std::string::npos);
}

TEST_F(ClusterTest, ARequestToAStoppedServerTimesOutNamingIt) {
  ClusterOptions o;
  o.servers = 2;
  o.workers = 0;
  o.consistency = "async";
  ASSERT_TRUE(cluster_.Start(o).ok());
  ClientOptions co;
  co.coordinator = cluster_.coordinator();
  co.role = ClientRole::kObserver;
  co.request_timeout = 1500ms;
  std::unique_ptr<Client> c;
  ASSERT_TRUE(Client::Connect(co, &c).ok());
  Table w;
  ASSERT_TRUE(c->CreateTable(DenseSpec("w", 100, 1), &w).ok());
  cluster_.KillServer(1, SIGKILL);  // server 1 is gone
  std::vector<float> p(w.size());
  Status s = c->Pull(w, p).Wait(30s);
  EXPECT_EQ(s.code(), Code::kTimeout) << s.ToString();
  EXPECT_NE(s.message().find("server 1"), std::string::npos) << s.ToString();
  // Rows on the live server are still served.
  std::vector<float> first(10);
  EXPECT_TRUE(c->Pull(w, RowRange{0, 10}, first).Wait(30s).ok());
}

// A test process that dies without its destructors (a sanitizer's abort, a
// SIGKILL) leaves no coordinator or server behind: they die with it.
TEST(ProcessLifetime, AKilledParentLeavesNoServerBehind) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    testing::LocalCluster c;
    ClusterOptions o;
    o.servers = 2;
    o.workers = 0;
    if (!c.Start(o).ok()) _exit(1);
    (void)!write(fds[1], c.pids().data(), c.pids().size() * sizeof(pid_t));
    close(fds[1]);
    raise(SIGKILL);  // no destructor runs
  }
  close(fds[1]);
  std::vector<pid_t> pids(3);
  const ssize_t n = read(fds[0], pids.data(), pids.size() * sizeof(pid_t));
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_EQ(n, static_cast<ssize_t>(pids.size() * sizeof(pid_t))) << "the child could not start its cluster";
  // Gone, or a zombie waiting for init to reap it.
  auto gone = [](pid_t p) {
    if (kill(p, 0) != 0) return true;
    std::ifstream f("/proc/" + std::to_string(p) + "/stat");
    std::string pid, comm, state;
    f >> pid >> comm >> state;
    return state == "Z";
  };
  for (pid_t p : pids) {
    EXPECT_TRUE(testing::WaitFor([&] { return gone(p); }, 30s)) << "process " << p << " outlived its parent";
    if (!gone(p)) kill(p, SIGKILL);
  }
}

}  // namespace
}  // namespace shardps
