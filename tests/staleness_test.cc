// Per-batch optimizer steps and staleness-aware updates (docs/consistency.md,
// "Stale gradients"), against a real coordinator and real servers on
// loopback: a push of k gradients is k optimizer steps, exactly; a stale
// gradient is weighed by its staleness as the table's rule says, and each
// server reports the staleness it saw in /metrics.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "common/codec/wire.h"
#include "shardps/client.h"
#include "tests/cluster.h"
#include "tests/raw_peer.h"
#include "tests/table_spec.h"

namespace shardps {
namespace {

using testing::ClusterOptions;
using testing::LocalCluster;

TableSpec Spec(const std::string& name, OptimizerKind opt) {
  // A constant start: the same for tables of other names.
  return testing::Dense(name, 300, 3).Constant(0.05f).Optimizer(opt, opt == OptimizerKind::kSGD ? 0.1f : 0.01f);
}

std::vector<float> Gradient(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> g(n);
  for (auto& x : g) x = d(rng);
  return g;
}

using testing::ServerMetrics;

double Sample(const std::string& metrics, const std::string& series) { return testing::MetricValue(metrics, series); }

class StalenessTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure()) cluster_.DumpLogs();
  }
  LocalCluster cluster_;
};

// k gradients pushed as one PushSteps are k single pushes applied in order,
// bit for bit, for every optimizer; both based on the same pull, so each
// step has the same staleness (0, 1, 2, ...: the earlier steps) either way.
TEST_F(StalenessTest, APushOfKStepsEqualsKPushesInOrderForEveryOptimizer) {
  ClusterOptions o;
  o.servers = 2;
  o.workers = 1;
  o.consistency = "async";
  o.partitions = 8;
  ASSERT_TRUE(cluster_.Start(o).ok());
  auto w = testing::ConnectClient(cluster_, ClientRole::kWorker);
  ASSERT_TRUE(w);
  for (OptimizerKind opt : {OptimizerKind::kSGD, OptimizerKind::kMomentum, OptimizerKind::kAdagrad,
                            OptimizerKind::kAdam}) {
    SCOPED_TRACE(std::string(ToString(opt)));
    Table a, b, sum;
    ASSERT_TRUE(w->CreateTable(Spec("a." + std::string(ToString(opt)), opt), &a).ok());
    ASSERT_TRUE(w->CreateTable(Spec("b." + std::string(ToString(opt)), opt), &b).ok());
    ASSERT_TRUE(w->CreateTable(Spec("sum." + std::string(ToString(opt)), opt), &sum).ok());
    const size_t n = a.size();
    std::vector<std::vector<float>> g = {Gradient(n, 1), Gradient(n, 2), Gradient(n, 3)};
    std::vector<float> pa(n), pb(n), ps(n);
    for (int round = 0; round < 2; ++round) {
      // a: one push of 3 steps, each based on the pull just read.
      Request pull = w->Pull(a, pa);
      ASSERT_TRUE(pull.Wait().ok());
      std::vector<PushStep> steps;
      for (const auto& gi : g) steps.push_back({gi, pull.stamp()});
      Request push = w->PushSteps(a, steps);
      ASSERT_TRUE(push.Wait().ok());
      EXPECT_EQ(push.staleness(), 2u);  // the third step came after two updates
      // b: the same as three pushes (each based on the latest pull waited on).
      ASSERT_TRUE(w->Pull(b, pb).Wait().ok());
      for (size_t j = 0; j < g.size(); ++j) {
        Request r = w->Push(b, g[j]);
        ASSERT_TRUE(r.Wait().ok());
        EXPECT_EQ(r.staleness(), j);
      }
    }
    // sum: the old way, the three gradients summed into one step.
    std::vector<float> total(n, 0.0f);
    for (const auto& gi : g)
      for (size_t i = 0; i < n; ++i) total[i] += gi[i];
    ASSERT_TRUE(w->Pull(sum, ps).Wait().ok());
    ASSERT_TRUE(w->Push(sum, total).Wait().ok());
    ASSERT_TRUE(w->Push(sum, total).Wait().ok());
    ASSERT_TRUE(w->Pull(a, pa).Wait().ok());
    ASSERT_TRUE(w->Pull(b, pb).Wait().ok());
    ASSERT_TRUE(w->Pull(sum, ps).Wait().ok());
    EXPECT_EQ(std::memcmp(pa.data(), pb.data(), n * sizeof(float)), 0);
    // Not the same as one step of the sum (SGD at lr/staleness included).
    EXPECT_NE(std::memcmp(pa.data(), ps.data(), n * sizeof(float)), 0);
  }
  // Steps must agree in size.
  Table a;
  ASSERT_TRUE(w->GetTable("a.sgd", &a).ok());
  std::vector<float> big(a.size()), small(a.size() - 3);
  std::vector<PushStep> bad = {{big, {}}, {small, {}}};
  Status s = w->PushSteps(a, bad).Wait();
  EXPECT_EQ(s.code(), Code::kSizeMismatch) << s.ToString();
  EXPECT_EQ(w->PushSteps(a, std::span<const PushStep>()).Wait().code(), Code::kInvalidArgument);
}

// Worker 1 reads the table, worker 0 then updates it three times, worker 1
// pushes a gradient computed on what it read: 3 updates stale. Under
// scale-lr it is applied at lr / 3; under none at lr. The server counts it in
// shardps_push_staleness, and the push's reply says 3.
TEST_F(StalenessTest, AStaleGradientIsWeighedByItsStalenessAndReported) {
  ClusterOptions o;
  o.servers = 1;
  o.workers = 2;
  o.consistency = "async";
  ASSERT_TRUE(cluster_.Start(o).ok());
  auto w0 = testing::ConnectClient(cluster_, ClientRole::kWorker, 0);
  auto w1 = testing::ConnectClient(cluster_, ClientRole::kWorker, 1);
  ASSERT_TRUE(w0 && w1);
  for (StalenessRule rule : {StalenessRule::kScaleLr, StalenessRule::kNone, StalenessRule::kDefault}) {
    SCOPED_TRACE(std::string(ToString(rule)));
    TableSpec spec = testing::Dense("x." + std::string(ToString(rule)), 1, 1).Sgd(1.0f).Rule(rule);
    Table t;
    ASSERT_TRUE(w0->CreateTable(spec, &t).ok());
    ASSERT_TRUE(w1->GetTable(spec.name, &t).ok());
    std::vector<float> one = {1.0f}, out(1);
    ASSERT_TRUE(w1->Pull(t, out).Wait().ok());
    ASSERT_EQ(out[0], 0.0f);
    for (int i = 0; i < 3; ++i) {
      Request r = w0->Push(t, one);  // w0 never pulled: its gradients' base is unknown, taken as fresh
      ASSERT_TRUE(r.Wait().ok());
      EXPECT_EQ(r.staleness(), 0u);
    }
    Request stale = w1->Push(t, one);
    ASSERT_TRUE(stale.Wait().ok());
    EXPECT_EQ(stale.staleness(), 3u);
    ASSERT_TRUE(w0->Pull(t, out).Wait().ok());
    const float expect = rule == StalenessRule::kNone ? -4.0f : -3.0f - 1.0f / 3.0f;
    EXPECT_FLOAT_EQ(out[0], expect);
  }
  // Three stale pushes of 3 (and nine of unknown base, not counted).
  const std::string m = ServerMetrics(cluster_);
  EXPECT_EQ(Sample(m, "shardps_push_staleness_count"), 3) << m;
  EXPECT_EQ(Sample(m, "shardps_push_staleness_sum"), 9) << m;
  EXPECT_EQ(Sample(m, "shardps_push_staleness_bucket{le=\"2\"}"), 0) << m;
  EXPECT_EQ(Sample(m, "shardps_push_staleness_bucket{le=\"3\"}"), 3) << m;
  EXPECT_EQ(Sample(m, "shardps_push_steps_total"), 12) << m;
}

// What a worker's weight prediction measures (worker/trainers/trainer.h): the
// updates between two of its pulls, by any worker, on every server.
TEST_F(StalenessTest, TwoStampsSayHowManyUpdatesLayBetweenThePulls) {
  ClusterOptions o;
  o.servers = 2;
  o.workers = 2;
  o.consistency = "async";
  ASSERT_TRUE(cluster_.Start(o).ok());
  auto w0 = testing::ConnectClient(cluster_, ClientRole::kWorker, 0);
  auto w1 = testing::ConnectClient(cluster_, ClientRole::kWorker, 1);
  ASSERT_TRUE(w0 && w1);
  Table t, u;
  ASSERT_TRUE(w0->CreateTable(Spec("a", OptimizerKind::kSGD), &t).ok());
  ASSERT_TRUE(w0->CreateTable(Spec("b", OptimizerKind::kSGD), &u).ok());
  ASSERT_TRUE(w1->GetTable("a", &t).ok());
  std::vector<float> out(300 * 3), other(300 * 3);
  const std::vector<float> g = Gradient(300 * 3, 1);
  Request first = w1->Pull(t, out);
  ASSERT_TRUE(first.Wait().ok());
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(w0->Push(t, g).Wait().ok());
  ASSERT_TRUE(w1->Push(t, g).Wait().ok());
  Request second = w1->Pull(t, out);
  ASSERT_TRUE(second.Wait().ok());
  EXPECT_EQ(second.stamp().UpdatesSince(first.stamp()), 3);
  EXPECT_EQ(second.stamp().UpdatesSince(second.stamp()), 0);
  EXPECT_EQ(first.stamp().UpdatesSince(second.stamp()), -1);  // the other way round
  Request of_u = w0->Pull(u, other);
  ASSERT_TRUE(of_u.Wait().ok());
  EXPECT_EQ(second.stamp().UpdatesSince(of_u.stamp()), -1);  // another table
  EXPECT_EQ(second.stamp().UpdatesSince(PullStamp()), -1);
  EXPECT_EQ(PullStamp().UpdatesSince(first.stamp()), -1);
}

// Delay compensation, by hand: worker 1 reads w = 0; worker 0 takes w to -3;
// worker 1's gradient 1 becomes 1 + lambda * 1 * 1 * (-3 - 0) = -0.5 with
// lambda 0.5, and SGD at lr 1 makes w = -3 + 0.5. A push based on a pull the
// server no longer keeps (each worker's last 3 per row range) is applied as
// it came, and counted.
TEST_F(StalenessTest, DelayCompensationUsesTheValuesTheGradientWasComputedOn) {
  ClusterOptions o;
  o.servers = 1;
  o.workers = 2;
  o.consistency = "async";
  ASSERT_TRUE(cluster_.Start(o).ok());
  auto w0 = testing::ConnectClient(cluster_, ClientRole::kWorker, 0);
  auto w1 = testing::ConnectClient(cluster_, ClientRole::kWorker, 1);
  ASSERT_TRUE(w0 && w1);
  Table t;
  ASSERT_TRUE(w0->CreateTable(testing::Dense("dc", 1, 2).Sgd(1.0f).Rule(StalenessRule::kDelayCompensation, 0.5f), &t)
                  .ok());
  ASSERT_TRUE(w1->GetTable("dc", &t).ok());
  std::vector<float> one = {1.0f, 2.0f}, out(2);
  Request first = w1->Pull(t, out);
  ASSERT_TRUE(first.Wait().ok());
  const PullStamp then = first.stamp();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(w0->Push(t, one).Wait().ok());  // w = (-3, -6)
  Request r = w1->Push(t, one);
  ASSERT_TRUE(r.Wait().ok());
  EXPECT_EQ(r.staleness(), 3u);
  ASSERT_TRUE(w0->Pull(t, out).Wait().ok());
  // col 0: g' = 1 + 0.5 * 1 * (-3 - 0) = -0.5; col 1: g' = 2 + 0.5 * 4 * (-6 - 0) = -10.
  EXPECT_FLOAT_EQ(out[0], -3.0f + 0.5f);
  EXPECT_FLOAT_EQ(out[1], -6.0f + 10.0f);
  // Four more pulls, each after an update: the first one's values are gone.
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(w0->Push(t, one).Wait().ok());
    ASSERT_TRUE(w1->Pull(t, out).Wait().ok());
  }
  ASSERT_TRUE(w0->Pull(t, out).Wait().ok());
  const std::vector<float> before = out;
  const PushStep old[] = {{one, then}};
  r = w1->PushSteps(t, old);
  ASSERT_TRUE(r.Wait().ok());
  EXPECT_GT(r.staleness(), 4u);
  ASSERT_TRUE(w0->Pull(t, out).Wait().ok());
  EXPECT_FLOAT_EQ(out[0], before[0] - 1.0f);  // as it came
  EXPECT_FLOAT_EQ(out[1], before[1] - 2.0f);
  const std::string m = ServerMetrics(cluster_);
  EXPECT_EQ(Sample(m, "shardps_push_dc_uncompensated_total"), 1) << m;
}

// A server's versions carry its incarnation: a push based on a pull from
// another incarnation (before a restart) is applied as fresh and counted,
// never compared with the new counts. Raw messages: the client only sends
// stamps it was given.
TEST_F(StalenessTest, AStampFromAnotherServerIncarnationIsTakenAsUnknown) {
  ClusterOptions o;
  o.servers = 1;
  o.workers = 1;
  o.consistency = "async";
  ASSERT_TRUE(cluster_.Start(o).ok());
  auto w = testing::ConnectClient(cluster_, ClientRole::kWorker, 0);
  ASSERT_TRUE(w);
  Table t;
  ASSERT_TRUE(w->CreateTable(testing::Dense("x", 1, 1).Sgd(1.0f), &t).ok());
  std::vector<float> one = {1.0f}, out(1);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(w->Push(t, one).Wait().ok());  // version 4, w = -4

  testing::RawPeer raw(cluster_.ServerEndpoint(0));
  // The reply's version of the rows read and the push's staleness.
  auto exchange = [&](wire::Fields f, std::vector<zmq::message_t> values, uint64_t* version, uint64_t* staleness) {
    std::vector<zmq::message_t> frames;
    frames.push_back(raw.Header(f));
    for (auto& v : values) frames.push_back(std::move(v));
    Status s = raw.Exchange(std::move(frames));
    if (raw.reply()) {
      *version = raw.reply()->table_version();
      *staleness = raw.reply()->staleness();
    }
    return s;
  };
  wire::Fields f;
  f.type = wire::MsgType::Pull;
  f.request_id = 1;
  f.role = wire::Role::Worker;
  f.rank = 0;
  f.table = t.id;
  f.row_begin = 0;
  f.row_end = 1;
  uint64_t version = 0, staleness = 0;
  ASSERT_TRUE(exchange(f, {}, &version, &staleness).ok());
  EXPECT_EQ(version & 0xffffffffffffull, 4u);
  const uint64_t tag = version >> 48;
  EXPECT_NE(tag, 0u);
  // Based on version 1 of this incarnation: 3 updates stale, lr / 3.
  f.type = wire::MsgType::Push;
  f.request_id = 2;
  const uint64_t same[] = {(tag << 48) | 1};
  f.base_versions = same;
  std::vector<zmq::message_t> v;
  v.emplace_back(one.data(), 4);
  ASSERT_TRUE(exchange(f, std::move(v), &version, &staleness).ok());
  EXPECT_EQ(staleness, 3u);
  // Based on version 1 of another incarnation: fresh, full lr, counted.
  f.request_id = 3;
  const uint64_t other[] = {(((tag % 0xffff) + 1) << 48) | 1};
  f.base_versions = other;
  v.clear();
  v.emplace_back(one.data(), 4);
  ASSERT_TRUE(exchange(f, std::move(v), &version, &staleness).ok());
  EXPECT_EQ(staleness, 0u);
  ASSERT_TRUE(w->Pull(t, out).Wait().ok());
  EXPECT_FLOAT_EQ(out[0], -4.0f - 1.0f / 3.0f - 1.0f);
  const std::string m = ServerMetrics(cluster_);
  EXPECT_EQ(Sample(m, "shardps_push_staleness_unknown_total"), 1) << m;
}

// Under sync a clock is one step of the averaged gradients: several steps in
// one push are refused, saying why.
TEST_F(StalenessTest, PushStepsUnderSyncIsRefused) {
  ClusterOptions o;
  o.servers = 1;
  o.workers = 1;
  ASSERT_TRUE(cluster_.Start(o).ok());
  auto w = testing::ConnectClient(cluster_, ClientRole::kWorker);
  ASSERT_TRUE(w);
  Table t;
  ASSERT_TRUE(w->CreateTable(Spec("s", OptimizerKind::kSGD), &t).ok());
  std::vector<float> g(t.size(), 1.0f);
  std::vector<PushStep> steps = {{g, {}}, {g, {}}};
  Status s = w->PushSteps(t, steps).Wait();
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("under sync"), std::string::npos) << s.ToString();
  std::vector<PushStep> one = {{g, {}}};
  EXPECT_TRUE(w->PushSteps(t, one).Wait().ok());  // one step is a plain push
}

}  // namespace
}  // namespace shardps
