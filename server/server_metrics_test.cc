#include "server/server_metrics.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/cluster/partition.h"
#include "server/tables/table.h"
#include "tests/table_spec.h"

namespace shardps {
namespace {

bool Has(const std::string& text, const std::string& line) { return text.find(line + "\n") != std::string::npos; }

TEST(ServerMetrics, EverySeriesIsRegisteredAndUpdatedThroughItsReference) {
  metrics::Registry r;
  ServerMetrics m(r);
  m.pushes.SingleWriterAdd(3);
  m.parked.Set(2);
  m.staleness.SingleWriterObserve(5);
  const std::string text = r.Render();
  EXPECT_TRUE(Has(text, "shardps_push_requests_total 3")) << text;
  EXPECT_TRUE(Has(text, "shardps_parked_pulls 2")) << text;
  EXPECT_TRUE(Has(text, "shardps_push_staleness_count 1")) << text;
  for (const char* name : {"shardps_pull_requests_total", "shardps_ticks_total", "shardps_request_errors_total",
                           "shardps_push_dc_uncompensated_total", "shardps_push_staleness_unknown_total",
                           "shardps_consistency_wait_seconds_count", "shardps_applied_clock", "shardps_min_clock",
                           "shardps_buffered_pushes"})
    EXPECT_NE(text.find(name), std::string::npos) << name;
}

TEST(ServerMetrics, TheColdTiersBytesAppearOnceThereIsOne) {
  metrics::Registry r;
  ServerMetrics m(r);
  EXPECT_EQ(r.Render().find("shardps_cold_bytes"), std::string::npos);  // no tier: no series
  m.SetColdBytes(4096, 10240);
  m.SetColdBytes(8192, 20480);  // totals, not increments
  const std::string text = r.Render();
  EXPECT_TRUE(Has(text, "shardps_cold_bytes_read_total 8192")) << text;
  EXPECT_TRUE(Has(text, "shardps_cold_bytes_written_total 20480")) << text;
}

TEST(ServerMetrics, EachTableHeldGetsItsRowsAndBytes) {
  metrics::Registry r;
  ServerMetrics m(r);
  std::vector<std::unique_ptr<ServerTable>> tables;
  tables.push_back(std::make_unique<ServerTable>(testing::Dense("w", 10, 3).Sgd(0.1f), 2,
                                                 std::vector<uint32_t>{0, 1}));
  m.SetTables(tables);
  std::string text = r.Render();
  EXPECT_TRUE(Has(text, "shardps_table_rows{table=\"w\"} 10")) << text;
  EXPECT_TRUE(Has(text, "shardps_table_bytes{table=\"w\"} 120")) << text;  // 10 x 3 floats
  // A table not held (yet) ends the list; a later one is added once held.
  tables.push_back(nullptr);
  tables.push_back(std::make_unique<ServerTable>(testing::Sparse("e", 2), 2, std::vector<uint32_t>{0}));
  m.SetTables(tables);
  EXPECT_EQ(m.table_series.size(), 1u);
  tables[1] = std::make_unique<ServerTable>(testing::Dense("x", 4, 1), 2, std::vector<uint32_t>{1});
  m.SetTables(tables);
  ASSERT_EQ(m.table_series.size(), 3u);
  text = r.Render();
  EXPECT_TRUE(Has(text, "shardps_table_rows{table=\"x\"} 2")) << text;
  EXPECT_TRUE(Has(text, "shardps_table_rows{table=\"e\"} 0")) << text;
  // A sparse table's rows made by pushes, in its own counter.
  std::vector<uint64_t> ids;  // of partition 0, the one held
  for (uint64_t id = 0; ids.size() < 3; ++id)
    if (PartitionOfId(id, 2) == 0) ids.push_back(id);
  const float g[6] = {};
  tables[2]->ApplyKeys(ids.data(), 3, g, 1.0f);
  m.SetTables(tables);
  text = r.Render();
  EXPECT_TRUE(Has(text, "shardps_sparse_rows_created_total{table=\"e\"} 3")) << text;
  EXPECT_TRUE(Has(text, "shardps_sparse_rows_evicted_total{table=\"e\"} 0")) << text;
  EXPECT_EQ(text.find("shardps_sparse_rows_created_total{table=\"w\"}"), std::string::npos) << text;
}

}  // namespace
}  // namespace shardps
