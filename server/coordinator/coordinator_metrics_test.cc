#include "server/coordinator/coordinator_metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "common/metrics/metrics.h"
#include "server/coordinator/logic/membership.h"

namespace shardps {
namespace {

// The value of `series` (name and labels, as rendered) in the registry's
// exposition text; NaN when it is not there.
double Value(const metrics::Registry& reg, const std::string& series) {
  const std::string text = "\n" + reg.Render();
  const size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return std::nan("");
  return std::stod(text.substr(at + series.size() + 2));
}

TEST(CoordinatorMetrics, PublishesLiveProcessesAndClocks) {
  metrics::Registry reg;
  Membership::Options o;
  o.num_servers = 2;
  o.num_workers = 3;
  Membership m(o);
  CoordinatorMetrics cm(&reg, m.worker_ranks());
  const auto now = Membership::Clock::now();
  Registration srv;
  srv.endpoint = "tcp://a:1";
  int rank = -1;
  ASSERT_TRUE(m.RegisterServer("s0", srv, now, &rank).ok());
  Membership::Join how;
  for (int r : {0, 2}) {
    Registration w;
    w.requested_rank = r;
    ASSERT_TRUE(m.RegisterWorker("w" + std::to_string(r), w, false, now, &rank, &how).ok());
  }
  ASSERT_TRUE(m.WorkerHeartbeat(0, 5).ok());
  ASSERT_TRUE(m.WorkerHeartbeat(2, 9).ok());
  cm.Publish(m);
  auto gauge = [&](const std::string& series) { return Value(reg, series); };
  EXPECT_EQ(gauge("shardps_live_workers"), 2);  // worker 1 is pending
  EXPECT_EQ(gauge("shardps_live_servers"), 1);
  EXPECT_EQ(gauge("shardps_min_worker_clock"), 5);
  EXPECT_EQ(gauge("shardps_max_worker_clock"), 9);
  EXPECT_EQ(gauge("shardps_worker_clock{worker=\"2\"}"), 9);
  EXPECT_EQ(gauge("shardps_worker_clock{worker=\"1\"}"), 0);
  // A dead worker is not live, but its last clock stays published.
  ASSERT_TRUE(m.ExpireWorker(2, now + std::chrono::hours(1), now));
  cm.Publish(m);
  EXPECT_EQ(gauge("shardps_live_workers"), 1);
  EXPECT_EQ(gauge("shardps_max_worker_clock"), 5);
  EXPECT_EQ(gauge("shardps_worker_clock{worker=\"2\"}"), 9);
}

TEST(CoordinatorMetrics, CountsSnapshots) {
  metrics::Registry reg;
  CoordinatorMetrics cm(&reg, 1);
  cm.SnapshotCompleted(1500);
  cm.SnapshotCompleted(20);
  cm.SnapshotFailed();
  EXPECT_EQ(Value(reg, "shardps_snapshots_total"), 2);
  EXPECT_EQ(Value(reg, "shardps_snapshot_failures_total"), 1);
  EXPECT_EQ(Value(reg, "shardps_snapshot_duration_seconds_count"), 2);
  EXPECT_DOUBLE_EQ(Value(reg, "shardps_snapshot_duration_seconds_sum"), 1.52);
  EXPECT_EQ(Value(reg, "shardps_snapshot_duration_seconds_bucket{le=\"0.05\"}"), 1);
}

TEST(CoordinatorMetrics, WithoutARegistryNothingIsPublished) {
  Membership m(Membership::Options{});
  CoordinatorMetrics cm(nullptr, m.worker_ranks());
  cm.Publish(m);
  cm.SnapshotCompleted(1);
  cm.SnapshotFailed();
}

TEST(CoordinatorMetrics, AWorkersCountsAreItsLatestTotals) {
  metrics::Registry r;
  CoordinatorMetrics m(&r, 2);
  EXPECT_EQ(r.Render().find("row_cache"), std::string::npos);  // no series before a report
  m.WorkerStats(1, 100, 40, 0);
  m.WorkerStats(1, 250, 90, 0);
  std::string text = r.Render();
  EXPECT_NE(text.find("shardps_worker_row_cache_lookups_total{worker=\"1\"} 250"), std::string::npos) << text;
  EXPECT_NE(text.find("shardps_worker_row_cache_hits_total{worker=\"1\"} 90"), std::string::npos) << text;
  EXPECT_EQ(text.find("row_cache_lookups_total{worker=\"0\"}"), std::string::npos) << text;
  EXPECT_EQ(text.find("samples_total"), std::string::npos) << "no examples counted, no series";
  // Examples: worker 0 counts 640, is restarted (registers again) and
  // counts 128: the counter goes on from 640 (it never goes down).
  m.WorkerStats(0, 0, 0, 512);
  m.WorkerStats(0, 0, 0, 640);
  m.WorkerStarted(0);
  m.WorkerStats(0, 0, 0, 128);
  text = r.Render();
  EXPECT_NE(text.find("shardps_worker_samples_total{worker=\"0\"} 768"), std::string::npos) << text;
  EXPECT_EQ(text.find("row_cache_lookups_total{worker=\"0\"}"), std::string::npos) << text;
  // Restarted again, its first report already above the last total: all of
  // it is new (a falling total could not tell this restart).
  m.WorkerStarted(0);
  m.WorkerStats(0, 0, 0, 700);
  text = r.Render();
  EXPECT_NE(text.find("shardps_worker_samples_total{worker=\"0\"} 1468"), std::string::npos) << text;
}

TEST(CoordinatorMetrics, ARestartTheRegistrationDidNotTellShowsAsAFallingTotal) {
  metrics::Registry r;
  CoordinatorMetrics m(&r, 1);
  m.WorkerStats(0, 0, 0, 300);
  m.WorkerStats(0, 0, 0, 200);  // a new process with the old one's host and pid: no WorkerStarted
  m.WorkerStats(0, 0, 0, 250);
  const std::string text = r.Render();
  EXPECT_NE(text.find("shardps_worker_samples_total{worker=\"0\"} 550"), std::string::npos) << text;
}

}  // namespace
}  // namespace shardps
