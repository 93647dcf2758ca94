#include "server/tables/table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "common/cluster/partition.h"
#include "server/tables/initializer.h"

namespace shardps {
namespace {

TableSpec Dense(uint64_t rows, uint32_t cols) {
  TableSpec s;
  s.name = "d";
  s.rows = rows;
  s.cols = cols;
  s.init = InitKind::kUniform;
  s.init_a = -1;
  s.init_b = 1;
  s.lr = 0.5f;
  return s;
}

std::vector<uint32_t> All(uint32_t p) {
  std::vector<uint32_t> v(p);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

TEST(ServerTable, DenseReadsInitialValuesAcrossPartitions) {
  TableSpec s = Dense(100, 3);
  ServerTable t(s, 8, All(8));
  EXPECT_EQ(t.rows_held(), 100u);
  std::vector<float> got(100 * 3), want(3);
  ASSERT_TRUE(t.CheckRange(0, 100).ok());
  t.ReadRange(0, 100, got.data());
  for (uint64_t r = 0; r < 100; ++r) {
    InitRow(s, r, want.data());
    for (int j = 0; j < 3; ++j) ASSERT_EQ(got[r * 3 + j], want[j]);
  }
}

TEST(ServerTable, DenseApplyRangeAndKeysAgree) {
  TableSpec s = Dense(50, 2);
  ServerTable a(s, 4, All(4)), b(s, 4, All(4));
  std::vector<float> g(20 * 2, 1.0f);
  a.ApplyRange(10, 30, g.data(), 1.0f);
  std::vector<uint64_t> keys(20);
  std::iota(keys.begin(), keys.end(), 10);
  ASSERT_TRUE(b.CheckKeys(keys.data(), keys.size()).ok());
  b.ApplyKeys(keys.data(), keys.size(), g.data(), 1.0f);
  std::vector<float> va(100), vb(100);
  a.ReadRange(0, 50, va.data());
  b.ReadRange(0, 50, vb.data());
  EXPECT_EQ(va, vb);
  std::vector<float> init(2);
  InitRow(s, 10, init.data());
  EXPECT_FLOAT_EQ(va[20], init[0] - 0.5f);
  InitRow(s, 9, init.data());
  EXPECT_FLOAT_EQ(va[18], init[0]);  // untouched
}

TEST(ServerTable, BadRangesAndKeysAreRefused) {
  TableSpec s = Dense(100, 1);
  // Hold only partitions 0 and 1 of 4: rows [0, 50).
  ServerTable t(s, 4, {0, 1});
  EXPECT_EQ(t.CheckRange(0, 50).code(), Code::kOk);
  EXPECT_EQ(t.CheckRange(0, 101).code(), Code::kOutOfRange);
  EXPECT_EQ(t.CheckRange(5, 5).code(), Code::kOutOfRange);
  EXPECT_EQ(t.CheckRange(40, 60).code(), Code::kWrongServer);
  uint64_t bad[] = {3, 100};
  EXPECT_EQ(t.CheckKeys(bad, 2).code(), Code::kOutOfRange);
  uint64_t far[] = {3, 75};
  EXPECT_EQ(t.CheckKeys(far, 2).code(), Code::kWrongServer);
}

TEST(ServerTable, SparseRowsAppearOnFirstPushAndReadsCreateNothing) {
  TableSpec s = Dense(0, 4);
  s.kind = TableKind::kSparse;
  ServerTable t(s, 16, All(16));
  EXPECT_EQ(t.rows_held(), 0u);
  uint64_t keys[] = {7, 1ull << 60, 7};
  ASSERT_TRUE(t.CheckKeys(keys, 3).ok());
  std::vector<float> out(12), want(4);
  t.ReadKeys(keys, 3, out.data());
  EXPECT_EQ(t.rows_held(), 0u);  // a pull reads the initial values, makes no row
  InitRow(s, 1ull << 60, want.data());
  for (int j = 0; j < 4; ++j) EXPECT_EQ(out[4 + j], want[j]);
  uint64_t bytes = 0;
  EXPECT_EQ(t.CountCreated(keys, 3, &bytes), 2u);  // 7 once
  EXPECT_GT(bytes, 0u);
  std::vector<float> zero(12, 0.0f);
  t.ApplyKeys(keys, 3, zero.data(), 1.0f);
  EXPECT_EQ(t.rows_held(), 2u);
  EXPECT_EQ(t.CountCreated(keys, 3, &bytes), 0u);
  std::vector<float> again(12);
  t.ReadKeys(keys, 3, again.data());
  EXPECT_EQ(again, out);  // the rows made hold the values a pull read before
  EXPECT_EQ(t.CheckRange(0, 1).code(), Code::kInvalidArgument);
  // Many rows: chunks never move existing rows.
  std::vector<uint64_t> many(5000);
  std::iota(many.begin(), many.end(), 1000);
  std::vector<float> g(5000 * 4, 2.0f);
  t.ApplyKeys(many.data(), many.size(), g.data(), 1.0f);
  t.ReadKeys(many.data(), 1, out.data());
  InitRow(s, 1000, want.data());
  EXPECT_FLOAT_EQ(out[0], want[0] - 1.0f);
  EXPECT_EQ(t.rows_held(), 5002u);
}

TEST(ServerTable, SparseOwnershipFollowsPartitions) {
  TableSpec s = Dense(0, 1);
  s.kind = TableKind::kSparse;
  ServerTable t(s, 8, {3});
  for (uint64_t id = 0; id < 100; ++id) {
    Status st = t.CheckKeys(&id, 1);
    EXPECT_EQ(st.ok(), PartitionOfId(id, 8) == 3) << id;
  }
}

TEST(ServerTable, AccumulateSumsInCallOrderThenAppliesOnce) {
  TableSpec s = Dense(10, 2);
  s.init = InitKind::kZeros;
  s.lr = 1.0f;
  ServerTable t(s, 3, All(3));
  std::vector<float> g1(20, 1.0f), g2(8, 3.0f);
  t.AccumulateRange(0, 10, g1.data());
  t.AccumulateRange(2, 6, g2.data());
  std::vector<float> v(20);
  t.ReadRange(0, 10, v.data());
  for (float x : v) EXPECT_EQ(x, 0.0f);  // nothing applied yet
  t.ApplyAccumulated(0.5f);
  t.ReadRange(0, 10, v.data());
  EXPECT_FLOAT_EQ(v[0], -0.5f);
  EXPECT_FLOAT_EQ(v[4], -2.0f);  // (1 + 3) * 0.5
  EXPECT_FLOAT_EQ(v[19], -0.5f);
  // The accumulator is reset.
  t.ApplyAccumulated(1.0f);
  t.ReadRange(0, 10, v.data());
  EXPECT_FLOAT_EQ(v[0], -0.5f);
}

// Versions (staleness): each update counts once for every partition it
// touches; the version of some rows is the largest count among their
// partitions.
TEST(ServerTable, VersionsCountUpdatesPerPartition) {
  TableSpec s = Dense(100, 2);  // 4 partitions of 25 rows
  ServerTable t(s, 4, All(4));
  std::vector<float> g(100 * 2, 0.1f);
  EXPECT_EQ(t.RangeVersion(0, 100), 0u);
  t.ApplyRange(0, 100, g.data(), 1.0f);  // every partition: 1
  t.ApplyRange(0, 30, g.data(), 1.0f);   // partitions 0, 1: 2
  t.ApplyRange(10, 20, g.data(), 1.0f);  // partition 0: 3
  EXPECT_EQ(t.RangeVersion(0, 25), 3u);
  EXPECT_EQ(t.RangeVersion(25, 50), 2u);
  EXPECT_EQ(t.RangeVersion(50, 100), 1u);
  EXPECT_EQ(t.RangeVersion(20, 60), 3u);
  // A call by keys counts each partition it touches once, however many keys.
  uint64_t keys[] = {60, 61, 62, 99};
  t.ApplyKeys(keys, 4, g.data(), 1.0f);
  EXPECT_EQ(t.RangeVersion(50, 75), 2u);
  EXPECT_EQ(t.RangeVersion(75, 100), 2u);
  uint64_t k50[] = {51};
  EXPECT_EQ(t.KeysVersion(k50, 1), 2u);
  uint64_t k0[] = {0, 99};
  EXPECT_EQ(t.KeysVersion(k0, 2), 3u);
  // A synchronous clock is one update of the partitions it touched.
  t.AccumulateRange(30, 40, g.data());
  t.AccumulateRange(30, 40, g.data());
  t.ApplyAccumulated(0.5f);
  EXPECT_EQ(t.RangeVersion(25, 50), 3u);
  EXPECT_EQ(t.RangeVersion(75, 100), 2u);
}

TEST(ServerTable, SparseAccumulate) {
  TableSpec s = Dense(0, 1);
  s.kind = TableKind::kSparse;
  s.lr = 1.0f;
  s.init = InitKind::kZeros;
  ServerTable t(s, 4, All(4));
  uint64_t k1[] = {5, 9}, k2[] = {9};
  float g1[] = {1, 2}, g2[] = {4};
  t.AccumulateKeys(k1, 2, g1);
  t.AccumulateKeys(k2, 1, g2);
  t.ApplyAccumulated(0.5f);
  float out[2];
  t.ReadKeys(k1, 2, out);
  EXPECT_FLOAT_EQ(out[0], -0.5f);
  EXPECT_FLOAT_EQ(out[1], -3.0f);
}

}  // namespace
}  // namespace shardps

namespace shardps {
namespace {

TEST(ServerTable, ExportImportRoundTripKeepsParametersAndState) {
  TableSpec s;
  s.name = "t";
  s.rows = 40;
  s.cols = 3;
  s.init = InitKind::kUniform;
  s.init_a = -1;
  s.init_b = 1;
  s.optimizer = OptimizerKind::kAdam;
  ServerTable a(s, 4, {0, 1, 2, 3});
  std::vector<float> g(40 * 3, 0.5f);
  a.ApplyRange(0, 40, g.data(), 1.0f);
  std::vector<PartitionData> parts;
  a.Export(7, &parts);
  ASSERT_EQ(parts.size(), 4u);
  EXPECT_EQ(parts[0].table, 7u);
  EXPECT_EQ(parts[0].stride, 3u + 7u);  // cols + adam state (2 cols + step)
  TableSpec z = s;
  z.init = InitKind::kZeros;
  ServerTable b(z, 4, {0, 1, 2, 3});
  for (const auto& p : parts)
    for (size_t i = 0; i < p.rows.size(); ++i) b.Import(p.rows[i], &p.values[i * p.stride]);
  std::vector<PartitionData> again;
  b.Export(7, &again);
  for (size_t k = 0; k < parts.size(); ++k) {
    EXPECT_EQ(parts[k].rows, again[k].rows);
    EXPECT_EQ(parts[k].values, again[k].values);
  }
  // Sparse: rows come out sorted by id.
  TableSpec sp = s;
  sp.kind = TableKind::kSparse;
  ServerTable c(sp, 2, {0, 1});
  uint64_t ids[] = {900, 5, 77};
  std::vector<float> zero(3 * sp.cols, 0.0f);
  c.ApplyKeys(ids, 3, zero.data(), 1.0f);  // a push makes the rows
  std::vector<PartitionData> sparse_parts;
  c.Export(1, &sparse_parts);
  size_t total = 0;
  for (const auto& p : sparse_parts) {
    total += p.rows.size();
    EXPECT_TRUE(std::is_sorted(p.rows.begin(), p.rows.end()));
  }
  EXPECT_EQ(total, 3u);
}

}  // namespace
}  // namespace shardps

namespace shardps {
namespace {

TEST(ServerTable, FramesSentInPlaceKeepTheirValuesWhenAPushComesFirst) {
  TableSpec s;
  s.name = "big";
  s.rows = 16384;
  s.cols = 256;  // 16 MiB in 16 partitions of 1 MiB: four extents of 4 MiB
  s.init = InitKind::kConstant;
  s.init_a = 1.0f;
  s.lr = 1.0f;
  std::vector<uint32_t> all(16);
  for (uint32_t i = 0; i < 16; ++i) all[i] = i;
  ServerTable t(s, 16, all);
  std::vector<zmq::message_t> frames;
  t.ReadRangeFrames(0, 16384, &frames);
  ASSERT_EQ(frames.size(), 4u);  // one per extent, no copies
  for (const auto& f : frames) EXPECT_EQ(f.size(), 4u << 20);
  std::vector<float> g(16384 * 256, 0.25f);
  t.ApplyRange(0, 16384, g.data(), 1.0f);  // while the frames are "being sent"
  for (const auto& f : frames) {
    const float* v = static_cast<const float*>(f.data());
    for (size_t i = 0; i < f.size() / 4; i += 997) ASSERT_EQ(v[i], 1.0f);
  }
  std::vector<float> now(256);  // one row
  t.ReadRange(100, 101, now.data());
  EXPECT_EQ(now[0], 0.75f);
  frames.clear();  // sent: the old arrays go
  // A range inside one extent, across partitions: one frame of exactly it.
  t.ReadRangeFrames(1000, 3000, &frames);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].size(), 2000u * 256 * 4);
  EXPECT_EQ(static_cast<const float*>(frames[0].data())[0], 0.75f);
  frames.clear();
  // Partitions that are not neighbours never share an extent: of 4 (1 MiB
  // each), 0, 1 and 3 are held: rows of 0-1 are one frame, 3 another.
  TableSpec gap = s;
  gap.rows = 4096;
  ServerTable h(gap, 4, {3, 0, 1});
  h.ReadRangeFrames(0, 2048, &frames);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].size(), 2u << 20);
  frames.clear();
  h.ReadRangeFrames(3072, 4096, &frames);
  ASSERT_EQ(frames.size(), 1u);
  frames.clear();
  // Small runs are gathered into one copied frame.
  TableSpec small = s;
  small.rows = 64;
  ServerTable u(small, 64, std::vector<uint32_t>([] { std::vector<uint32_t> v(64); for (uint32_t i = 0; i < 64; ++i) v[i] = i; return v; }()));
  u.ReadRangeFrames(0, 64, &frames);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].size(), 64u * 256 * 4);
  std::vector<float> row(256);
  u.ReadRange(63, 64, row.data());
  EXPECT_EQ(row[255], 1.0f);
}

// Re-replication: a table takes more partitions while it is held, and a
// partition exported from one copy and imported into another (sparse: into
// an emptied partition) makes them the same, its update count included.
TEST(ServerTable, PartitionsAddedLaterAndFilledFromAnotherCopyAreThatCopy) {
  TableSpec d = Dense(40, 3);
  d.optimizer = OptimizerKind::kAdam;
  ServerTable src(d, 4, All(4)), dst(d, 4, {0});
  EXPECT_FALSE(dst.Holds(2));
  const uint64_t before = dst.bytes();
  dst.AddPartitions({2, 3});
  EXPECT_TRUE(dst.Holds(2) && dst.Holds(3) && !dst.Holds(1));
  EXPECT_GT(dst.bytes(), before);
  std::vector<float> g(10 * 3, 0.25f);
  src.ApplyRange(20, 30, g.data(), 1.0f);
  src.ApplyRange(20, 30, g.data(), 1.0f);
  std::vector<PartitionData> parts;
  src.ExportPartition(0, 2, &parts);
  for (size_t i = 0; i < parts[0].rows.size(); ++i) dst.Import(parts[0].rows[i], &parts[0].values[i * parts[0].stride]);
  dst.SetPartitionVersion(2, src.PartitionVersion(2));
  EXPECT_EQ(dst.RangeVersion(20, 30), 2u);
  std::vector<float> a(30), b(30);
  src.ReadRange(20, 30, a.data());
  dst.ReadRange(20, 30, b.data());
  EXPECT_EQ(a, b);
  // The optimizer state came along: the next step is the same on both.
  src.ApplyRange(20, 30, g.data(), 1.0f);
  dst.ApplyRange(20, 30, g.data(), 1.0f);
  src.ReadRange(20, 30, a.data());
  dst.ReadRange(20, 30, b.data());
  EXPECT_EQ(a, b);

  TableSpec sp;
  sp.name = "s";
  sp.kind = TableKind::kSparse;
  sp.cols = 2;
  sp.dtype = DType::kBF16;
  ServerTable s1(sp, 4, All(4)), s2(sp, 4, All(4));
  const std::vector<uint64_t> ids = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<float> sg(ids.size() * 2, 0.001f);
  s1.ApplyKeys(ids.data(), ids.size(), sg.data(), 1.0f);
  s2.ApplyKeys(ids.data() + 4, 4, sg.data(), 1.0f);  // s2 holds other rows: emptied first
  for (uint32_t p = 0; p < 4; ++p) {
    parts.clear();
    s1.ExportPartition(0, p, &parts);
    s2.ClearSparsePartition(p);
    for (size_t i = 0; i < parts[0].rows.size(); ++i) s2.Import(parts[0].rows[i], &parts[0].values[i * parts[0].stride]);
    s2.SetRoundingState(p, s1.RoundingState(p));
  }
  EXPECT_EQ(s2.sparse_rows(), s1.sparse_rows());
  EXPECT_EQ(s2.bytes(), s1.bytes());
  // bf16 rows round stochastically from their partition's state: the same next step.
  s1.ApplyKeys(ids.data(), ids.size(), sg.data(), 1.0f);
  s2.ApplyKeys(ids.data(), ids.size(), sg.data(), 1.0f);
  std::vector<float> r1(ids.size() * 2), r2(ids.size() * 2);
  s1.ReadKeys(ids.data(), ids.size(), r1.data());
  s2.ReadKeys(ids.data(), ids.size(), r2.data());
  EXPECT_EQ(r1, r2);
}

}  // namespace
}  // namespace shardps
