#include "server/snapshot/snapshot_rows.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/tables/table_set.h"
#include "tests/table_spec.h"

namespace shardps::snapshot {
namespace {

// Two servers, 4 partitions (this one, rank 0, holds 0 and 1).
ClusterView View(std::vector<TableSpec> tables) {
  ClusterView v;
  v.num_servers = 2;
  v.map = ShardMap::Contiguous(4, 2, 1);
  for (uint32_t i = 0; i < tables.size(); ++i) tables[i].id = i;
  v.tables = std::move(tables);
  return v;
}

class SnapshotRowsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shardps-tables-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // A snapshot of `spec` (id 0) as one server holding every partition, with
  // each row's values shifted by +10; `tamper` changes the copied rows
  // before they are written.
  void Write(const TableSpec& spec, const std::function<void(std::vector<PartitionData>&)>& tamper = {}) {
    ServerTable all(spec, 4, {0, 1, 2, 3});
    std::vector<float> g(spec.rows * spec.cols, -10.0f);
    all.ApplyRange(0, spec.rows, g.data(), 1.0f);
    std::vector<PartitionData> parts;
    all.Export(0, &parts);
    if (tamper) tamper(parts);
    Manifest m;
    m.tables.push_back(spec);
    m.partitions = 4;
    m.num_servers = 1;
    m.owner = {0, 0, 0, 0};
    FileEntry f{0, ServerFileName(0), 0, 0};
    ASSERT_TRUE(WriteServerFile(dir_ + "/" + f.name, 0, parts, &m.parts, &f.bytes, &f.checksum).ok());
    m.files.push_back(f);
    ASSERT_TRUE(WriteManifest(dir_, m).ok());
  }
  std::string dir_;
};

TEST_F(SnapshotRowsTest, ATableIsFilledFromTheSnapshotWhenDefined) {
  TableSpec spec = testing::Dense("w", 40, 2).Constant(1.0f).Sgd(1.0f);
  spec.id = 0;
  Write(spec);
  TableSet ts(1 << 20);
  ClusterView v = View({spec});
  ts.RestoreFrom(std::make_unique<SnapshotRows>(dir_));
  ASSERT_TRUE(ts.Define(v, 1).ok());
  const ServerTable& t = *ts.get(0);
  EXPECT_EQ(t.rows_held(), 20u);
  std::vector<float> values(20 * 2);
  t.ReadRange(20, 40, values.data());
  for (float x : values) EXPECT_EQ(x, 11.0f);
}

TEST_F(SnapshotRowsTest, ATableOfAnotherShapeFailsTheRestore) {
  TableSpec spec = testing::Dense("w", 40, 2);
  spec.id = 0;
  Write(spec);
  TableSet ts(1 << 20);
  ClusterView v = View({testing::Dense("w", 40, 3)});
  ts.RestoreFrom(std::make_unique<SnapshotRows>(dir_));
  Status s = ts.Define(v, 0);
  EXPECT_EQ(s.code(), Code::kConflict);
  EXPECT_EQ(s.message(), "table 'w' differs from the one in " + dir_);
}

TEST_F(SnapshotRowsTest, ARowStoredUnderAPartitionItIsNotInIsRefusedNamingIt) {
  TableSpec spec = testing::Dense("w", 40, 2);
  spec.id = 0;
  // Rows 0-9 filed under partition 1, rows 10-19 under partition 0.
  Write(spec, [](std::vector<PartitionData>& parts) { std::swap(parts[0].partition, parts[1].partition); });
  TableSet ts(1 << 20);
  ts.RestoreFrom(std::make_unique<SnapshotRows>(dir_));
  Status s = ts.Define(View({spec}), 0);
  EXPECT_EQ(s.code(), Code::kBadMessage);
  EXPECT_NE(s.message().find("of table 'w' is stored under partition 0, which does not hold it"), std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace shardps::snapshot
