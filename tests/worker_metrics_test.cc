// What shardps-worker serves on /metrics (worker/worker_metrics.h): the
// series follow a real Client against a real coordinator and server, and
// the URL the worker registers is the one `shardps-ctl status` reports.
#include "worker/worker_metrics.h"

#include <gtest/gtest.h>

#include <string>

#include "shardps/client.h"
#include "tests/cluster.h"

namespace shardps {
namespace {

using namespace std::chrono_literals;
using testing::ClusterOptions;
using testing::LocalCluster;
using testing::MetricValue;

class WorkerMetricsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure()) cluster_.DumpLogs();
  }
  LocalCluster cluster_;
};

TEST_F(WorkerMetricsTest, SeriesFollowTheClientAndTheUrlIsRegistered) {
  ClusterOptions o;
  o.servers = 1;
  o.workers = 1;
  ASSERT_TRUE(cluster_.Start(o).ok());
  worker::WorkerMetrics m;
  ASSERT_TRUE(m.Start(cluster_.coordinator(), "127.0.0.1", 0).ok());
  ASSERT_EQ(m.url().rfind("http://127.0.0.1:", 0), 0u) << m.url();
  ASSERT_EQ(m.url().substr(m.url().size() - 8), "/metrics") << m.url();

  ClientOptions co;
  co.coordinator = cluster_.coordinator();
  co.rank = 0;
  co.metrics_url = m.url();
  co.connect_timeout = 60s;
  co.request_timeout = 60s;
  std::unique_ptr<Client> ps;
  ASSERT_TRUE(Client::Connect(co, &ps).ok());
  // Not watched yet: the series are there, at zero.
  std::string text = testing::MetricsOf(cluster_, "worker");
  EXPECT_EQ(MetricValue(text, "shardps_trainer_samples_total"), 0) << text;
  EXPECT_EQ(MetricValue(text, "shardps_trainer_clock"), 0) << text;
  EXPECT_GE(MetricValue(text, "shardps_trainer_up_seconds"), 0) << text;

  m.Watch(ps.get());
  ps->AddSamples(64);
  ps->AddSamples(36);
  ASSERT_TRUE(ps->Clock().ok());
  ASSERT_TRUE(ps->Clock().ok());
  text = testing::MetricsOf(cluster_, "worker");  // found through the URL the coordinator was told
  EXPECT_EQ(MetricValue(text, "shardps_trainer_samples_total"), 100) << text;
  EXPECT_EQ(MetricValue(text, "shardps_trainer_clock"), 2) << text;
  EXPECT_EQ(MetricValue(text, "shardps_trainer_row_cache_lookups_total"), 0) << text;
  m.Stop();  // before the client goes
  EXPECT_TRUE(ps->Close().ok());
}

TEST(WorkerMetrics, AnAddressItCannotBindIsNamed) {
  worker::WorkerMetrics m;
  Status s = m.Start("tcp://127.0.0.1:1", "192.0.2.7", 0);  // TEST-NET-1: not this machine's
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("192.0.2.7"), std::string::npos) << s.ToString();
  EXPECT_TRUE(m.url().empty());
}

TEST(WorkerMetrics, AWildcardBindNamesTheRoutedAddress) {
  worker::WorkerMetrics m;
  ASSERT_TRUE(m.Start("tcp://127.0.0.1:1", "0.0.0.0", 0).ok());
  EXPECT_EQ(m.url().rfind("http://127.0.0.1:", 0), 0u) << m.url();  // the route to 127.0.0.1 is loopback
}

}  // namespace
}  // namespace shardps
