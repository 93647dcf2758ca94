// Tiered tables (server/tables/table.h, table_cold.cc): a row moved down and
// up is the row it was, bit for bit (values in every dtype, optimizer
// state, stamp); requests mixing hot and cold rows; admission and eviction;
// what snapshots see; the budget counting the hot tier only.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>

#include "common/cluster/cluster.h"
#include "common/cluster/partition.h"
#include "server/tables/cold_store.h"
#include "server/tables/table.h"
#include "server/tables/table_set.h"
#include "tests/table_spec.h"

namespace shardps {
namespace {

std::vector<uint32_t> All(uint32_t p) {
  std::vector<uint32_t> v(p);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

class TieredTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shardps-tiered-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    ASSERT_TRUE(ColdStore::Open(root_ + "/cold", &cold_).ok());
  }
  void TearDown() override {
    cold_.reset();
    std::filesystem::remove_all(root_);
  }
  TableSpec Spec(DType d = DType::kF32) const {
    return testing::Sparse("e", 5).Adagrad(0.1f).Type(d).EvictAfterClocks(1000).ColdTier();
  }
  // Rows exported (values, state, stamp) of every id.
  static std::vector<float> Rows(const ServerTable& t, const std::vector<uint64_t>& ids) {
    const uint32_t stride = RowStride(t.spec());
    std::vector<float> out(ids.size() * stride, -1.0f);
    for (size_t i = 0; i < ids.size(); ++i) EXPECT_TRUE(t.ExportSparseRow(ids[i], &out[i * stride])) << ids[i];
    return out;
  }
  static bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  }
  std::string root_;
  std::unique_ptr<ColdStore> cold_;
};

// The same pushes on a tiered table whose rows go down between them and on
// an untiered one: every row, read or exported, the same bits.
TEST_P(TieredTest, RowsMovedDownAndUpAreTheRowsTheyWereBitForBit) {
  TableSpec spec = Spec(GetParam());
  ServerTable tiered(spec, 4, All(4));
  spec.cold_tier = false;
  ServerTable plain(spec, 4, All(4));
  tiered.AttachColdTier(cold_.get());
  tiered.SetHotLimit(4 * 64 * (tiered.sparse_record_bytes() + 6));  // 64 rows a partition
  std::mt19937_64 rng(7);
  std::vector<uint64_t> all;
  for (int step = 0; step < 40; ++step) {
    std::vector<uint64_t> ids(50);
    for (auto& id : ids) id = step < 10 ? rng() : (rng() % 2 ? rng() : all[rng() % all.size()]);
    std::vector<float> g(ids.size() * 5);
    for (auto& x : g) x = static_cast<float>(static_cast<int64_t>(rng() % 2001) - 1000) / 500.0f;
    tiered.SetClock(step);
    plain.SetClock(step);
    ASSERT_TRUE(tiered.Promote(ids.data(), ids.size()).ok());
    tiered.ApplyKeys(ids.data(), ids.size(), g.data(), 1.0f);
    plain.ApplyKeys(ids.data(), ids.size(), g.data(), 1.0f);
    bool more = true;
    while (more) tiered.MoveDownSome(1000, &more);
    for (uint64_t id : ids) all.push_back(id);
  }
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  ASSERT_GT(tiered.tier_counts().cold_rows, all.size() / 2);
  ASSERT_GT(tiered.tier_counts().reads, 0u);  // rows came back up to be updated
  EXPECT_EQ(tiered.sparse_rows(), plain.sparse_rows());
  EXPECT_EQ(tiered.rows_held(), plain.rows_held());
  EXPECT_LT(tiered.bytes(), plain.bytes());  // the hot tier only
  EXPECT_TRUE(SameBits(Rows(tiered, all), Rows(plain, all)));
  // A pull of hot and cold rows reads (as stored, and as float32) what the
  // untiered table holds, whether promoted first or not.
  std::vector<float> a(all.size() * 5), b(all.size() * 5);
  tiered.ReadKeys(all.data(), all.size(), a.data());
  plain.ReadKeys(all.data(), all.size(), b.data());
  EXPECT_TRUE(SameBits(a, b));
  std::vector<uint16_t> a16(all.size() * 5), b16(all.size() * 5);
  if (GetParam() != DType::kF32) {
    tiered.ReadKeysAs(all.data(), all.size(), a16.data());
    plain.ReadKeysAs(all.data(), all.size(), b16.data());
    EXPECT_EQ(a16, b16);
  }
  const uint64_t cold_before = tiered.tier_counts().cold_rows, reads_before = tiered.tier_counts().reads;
  ASSERT_TRUE(tiered.Promote(all.data(), all.size()).ok());
  EXPECT_EQ(tiered.tier_counts().cold_rows, 0u);
  EXPECT_EQ(tiered.tier_counts().reads, reads_before + cold_before);  // each cold row read once, in batches
  EXPECT_EQ(tiered.tier_counts().moved_down, tiered.tier_counts().reads);  // what went down came up
  tiered.ReadKeys(all.data(), all.size(), a.data());
  EXPECT_TRUE(SameBits(a, b));
  EXPECT_TRUE(SameBits(Rows(tiered, all), Rows(plain, all)));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, TieredTest, ::testing::Values(DType::kF32, DType::kBF16, DType::kF16));

// Exports (fills, moves, full snapshots) and the ids of a partition hold
// both tiers; emptying a partition empties its cold rows too.
TEST_P(TieredTest, ExportsAndIdsSeeBothTiersAndAClearedPartitionLosesItsColdRows) {
  ServerTable t(Spec(GetParam()), 2, All(2));
  t.AttachColdTier(cold_.get());
  std::vector<uint64_t> ids(300);
  std::iota(ids.begin(), ids.end(), 1000);
  std::vector<float> g(ids.size() * 5, 0.5f);
  t.ApplyKeys(ids.data(), ids.size(), g.data(), 1.0f);
  std::vector<PartitionData> before;
  t.Export(0, &before);
  t.SetHotLimit(2 * 64 * (t.sparse_record_bytes() + 6));
  bool more = true;
  while (more) t.MoveDownSome(50, &more);
  ASSERT_GT(t.tier_counts().cold_rows, 100u);
  std::vector<PartitionData> after;
  t.Export(0, &after);
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].rows, before[i].rows) << i;
    EXPECT_TRUE(SameBits(after[i].values, before[i].values)) << i;
  }
  std::vector<uint64_t> p0;
  t.SparseIds(0, &p0);
  EXPECT_EQ(p0, before[0].rows);
  const uint64_t in1 = before[1].rows.size();
  t.ClearSparsePartition(0);
  EXPECT_EQ(t.sparse_rows(), in1);
  auto cold_in = [&](uint32_t p) {
    uint64_t n = 0;
    bool done = false;
    cold_->Scan(t.spec().id, p, 0, &done, [&](uint64_t, std::string_view) { return ++n > 0; });
    return n;
  };
  EXPECT_EQ(cold_in(0), 0u);
  EXPECT_GT(cold_in(1), 0u);
  EXPECT_EQ(t.tier_counts().cold_rows, cold_in(1));
}

// Snapshots of what changed: a move between tiers is no change; an update
// of a row that was cold is, and so is a cold row removed as idle.
TEST_F(TieredTest, MovesAreNoChangeButUpdatesAndEvictionsOfColdRowsAre) {
  ServerTable t(Spec(), 1, All(1));
  t.AttachColdTier(cold_.get());
  std::vector<uint64_t> ids(200);
  std::iota(ids.begin(), ids.end(), 1);
  std::vector<float> g(ids.size() * 5, 1.0f);
  t.SetClock(0);
  t.ApplyKeys(ids.data(), ids.size(), g.data(), 1.0f);
  std::vector<uint64_t> changed;
  ASSERT_TRUE(t.TakeChanged(0, &changed));
  EXPECT_EQ(changed.size(), 200u);
  t.SetHotLimit(64 * (t.sparse_record_bytes() + 6));
  bool more = true;
  while (more) t.MoveDownSome(1000, &more);
  ASSERT_GT(t.tier_counts().cold_rows, 100u);
  ASSERT_TRUE(t.TakeChanged(0, &changed));
  EXPECT_TRUE(changed.empty()) << changed.size() << " ids listed after rows only moved down";
  // Rows 1..200 are cold or hot; update 10 of them (cold ones come up).
  std::vector<uint64_t> some = {1, 2, 3, 4, 5, 150, 151, 152, 199, 200};
  ASSERT_TRUE(t.Promote(some.data(), some.size()).ok());
  t.SetClock(5);
  t.ApplyKeys(some.data(), some.size(), g.data(), 1.0f);
  ASSERT_TRUE(t.Promote(ids.data(), ids.size()).ok());  // every row up (no change), then most down again
  more = true;
  uint64_t moved = 0;
  while (more) moved += t.MoveDownSome(1000, &more);
  ASSERT_GT(moved, 100u);  // (rows just updated among them: still listed)
  ASSERT_TRUE(t.TakeChanged(0, &changed));
  EXPECT_EQ(changed, some);
  // Every row not updated at clock 5 is idle at clock 1000 (evict after
  // 1000 clocks): removed from both tiers, each listed as changed.
  t.SetClock(1000);
  const uint64_t cold = t.tier_counts().cold_rows;
  ASSERT_GT(cold, 0u);
  uint64_t removed = 0;
  for (int i = 0; i < 10; ++i) removed += t.EvictSome(1 << 20);
  EXPECT_EQ(removed, 190u);
  EXPECT_EQ(t.sparse_rows(), 10u);
  EXPECT_EQ(t.sparse_counts().evicted, 190u);
  ASSERT_TRUE(t.TakeChanged(0, &changed));
  EXPECT_EQ(changed.size(), 190u);
  std::vector<float> row(RowStride(t.spec()));
  EXPECT_FALSE(t.ExportSparseRow(100, row.data()));
  EXPECT_TRUE(t.ExportSparseRow(150, row.data()));
}

// Rows written over, removed, or summed into under sync while they are
// on disk: the same as in memory.
TEST_F(TieredTest, ImportEraseAndASyncSumTouchColdRowsAsHotOnes) {
  TableSpec spec = Spec();
  ServerTable t(spec, 1, All(1));
  spec.cold_tier = false;
  ServerTable plain(spec, 1, All(1));
  t.AttachColdTier(cold_.get());
  std::vector<uint64_t> ids(300);
  std::iota(ids.begin(), ids.end(), 1);
  std::vector<float> g(ids.size() * 5, 0.25f);
  for (ServerTable* x : {&t, &plain}) x->ApplyKeys(ids.data(), ids.size(), g.data(), 1.0f);
  t.SetHotLimit(64 * (t.sparse_record_bytes() + 6));
  auto down = [&] {
    bool more = true;
    while (more) t.MoveDownSome(1000, &more);
  };
  down();
  const uint64_t cold = t.tier_counts().cold_rows;
  ASSERT_GT(cold, 200u);
  // Every id on disk now: the CLOCK took the rows not used last.
  std::vector<uint64_t> on_disk;
  bool done = false;
  cold_->Scan(t.spec().id, 0, 0, &done, [&](uint64_t id, std::string_view) {
    on_disk.push_back(id);
    return true;
  });
  ASSERT_EQ(on_disk.size(), cold);
  // Import over a cold row: one row, the imported one.
  std::vector<float> row(RowStride(t.spec()), 3.5f);
  for (ServerTable* x : {&t, &plain}) x->Import(on_disk[0], row.data());
  EXPECT_EQ(t.sparse_rows(), 300u);
  EXPECT_EQ(t.tier_counts().cold_rows, cold - 1);
  // Erase of a cold row: gone from both tiers, listed as changed.
  std::vector<uint64_t> changed;
  ASSERT_TRUE(t.TakeChanged(0, &changed));
  for (ServerTable* x : {&t, &plain}) x->EraseSparse(on_disk[1]);
  EXPECT_EQ(t.sparse_rows(), 299u);
  EXPECT_EQ(t.tier_counts().cold_rows, cold - 2);
  std::vector<float> out(row.size());
  EXPECT_FALSE(t.ExportSparseRow(on_disk[1], out.data()));
  ASSERT_TRUE(t.TakeChanged(0, &changed));
  EXPECT_EQ(changed, std::vector<uint64_t>{on_disk[1]});
  // Sync: summed while on disk, moved down between the sum and its
  // application (as between two requests), applied: the same rows.
  std::vector<uint64_t> some(on_disk.begin() + 2, on_disk.begin() + 40);
  std::vector<float> gs(some.size() * 5, -0.5f);
  for (ServerTable* x : {&t, &plain}) x->AccumulateKeys(some.data(), some.size(), gs.data());
  ASSERT_TRUE(t.Promote(some.data(), some.size()).ok());
  t.SetHotLimit(0);  // (the floor: 64 rows)
  down();
  for (ServerTable* x : {&t, &plain}) x->ApplyAccumulated(0.5f);
  down();
  std::vector<uint64_t> left;
  plain.SparseIds(0, &left);
  ASSERT_EQ(left.size(), 299u);
  std::vector<float> a(left.size() * row.size()), b(a.size());
  for (size_t i = 0; i < left.size(); ++i) {
    ASSERT_TRUE(t.ExportSparseRow(left[i], &a[i * row.size()]));
    ASSERT_TRUE(plain.ExportSparseRow(left[i], &b[i * row.size()]));
  }
  EXPECT_TRUE(SameBits(a, b));
  EXPECT_EQ(cold_->failure(), "");
}

// Admission counts pushes wherever the other rows are; a restore larger
// than the hot tier moves rows down as they come.
TEST_F(TieredTest, AdmissionAndARestoreLargerThanTheHotTier) {
  TableSpec spec = Spec();
  spec.admit_after = 2;
  ServerTable t(spec, 2, All(2));
  t.AttachColdTier(cold_.get());
  t.SetHotLimit(2 * 64 * (t.sparse_record_bytes() + 6));
  std::vector<float> row(RowStride(spec));
  for (uint64_t id = 1; id <= 1000; ++id) {
    for (size_t j = 0; j < row.size(); ++j) row[j] = static_cast<float>(id) + 0.25f * static_cast<float>(j);
    t.Import(id, row.data());
  }
  EXPECT_EQ(t.sparse_rows(), 1000u);
  EXPECT_GT(t.tier_counts().cold_rows, 700u);
  std::vector<float> out(row.size());
  ASSERT_TRUE(t.ExportSparseRow(1, out.data()));
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[3], 1.75f);
  const uint64_t fresh = 5000;
  const float g[5] = {1, 1, 1, 1, 1};
  uint64_t bytes;
  EXPECT_EQ(t.CountCreated(&fresh, 1, &bytes), 0u);  // its first push: not admitted
  t.ApplyKeys(&fresh, 1, g, 1.0f);
  EXPECT_EQ(t.sparse_rows(), 1000u);
  const uint64_t old = 1;  // a cold row: held, so never "created"
  EXPECT_EQ(t.CountCreated(&old, 1, &bytes), 0u);
  EXPECT_EQ(t.CountCreated(&fresh, 1, &bytes), 1u);
  t.ApplyKeys(&fresh, 1, g, 1.0f);
  EXPECT_EQ(t.sparse_rows(), 1001u);
}

// The budget counts a tiered table's hot tier only: rows past it are taken
// (and go down); a max_rows whose share the disk cannot hold is refused at
// definition, naming the directory.
TEST_F(TieredTest, TheBudgetCountsTheHotTierOnlyAndTheDiskLimitsTheRest) {
  ClusterView v;
  v.num_servers = 1;
  v.map = ShardMap::Contiguous(8, 1, 1);
  TableSpec e = testing::Sparse("e", 64).Sgd(0.1f).ColdTier();
  e.id = 0;
  TableSpec huge = testing::Sparse("huge", 64).Sgd(0.1f).ColdTier().MaxRows(1ull << 50);
  huge.id = 1;
  v.tables = {e, huge};
  TableSet set(TableSet::kColdReserve + (8 << 20));  // a hot tier of a few MiB
  set.SetColdDir(root_ + "/set");
  ASSERT_TRUE(set.Define(v, 0).ok());
  ASSERT_NE(set.get(0), nullptr);
  EXPECT_TRUE(set.refused(1)) << "a max_rows past the disk is refused";
  ServerTable& t = *set.get(0);
  std::vector<uint64_t> ids(20000);
  std::iota(ids.begin(), ids.end(), 1);
  std::vector<float> g(ids.size() * 64, 0.1f);
  ASSERT_TRUE(set.CheckSparseGrowth(t, ids.data(), ids.size()).ok());  // 5 MiB+ of rows: past the hot tier
  for (size_t i = 0; i < ids.size(); i += 1000) {
    t.ApplyKeys(ids.data() + i, 1000, g.data(), 1.0f);
    for (int k = 0; k < 100 && set.Balance(4096); ++k) {
    }
  }
  EXPECT_EQ(t.sparse_rows(), 20000u);
  EXPECT_GT(t.tier_counts().cold_rows, 0u);
  EXPECT_LE(t.bytes(), t.hot_limit() + 8 * (1u << 20)) << "(a chunk per partition past the share at most)";
  EXPECT_LE(set.Bytes(), set.budget());
}

}  // namespace
}  // namespace shardps
