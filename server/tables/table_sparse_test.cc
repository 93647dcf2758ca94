// Embedding tables (server/tables/table.h, table_sparse.cc): admission, eviction,
// 16-bit values, and what a snapshot keeps of them.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "common/cluster/partition.h"
#include "common/codec/half.h"
#include "server/tables/initializer.h"
#include "server/tables/table.h"
#include "tests/table_spec.h"

namespace shardps {
namespace {

std::vector<uint32_t> All(uint32_t p) {
  std::vector<uint32_t> v(p);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

TEST(SparseTable, AnIdGetsARowAtItsKthPushAndItsGradientsBeforeAreDropped) {
  ServerTable t(testing::Sparse("e", 2).Sgd(1.0f).AdmitAfter(3), 8, All(8));
  const uint64_t id = 42;
  const float g[2] = {1.0f, 2.0f};
  std::vector<float> init(2), out(2);
  InitRow(t.spec(), id, init.data());
  for (int k = 1; k <= 2; ++k) {
    uint64_t bytes;
    EXPECT_EQ(t.CountCreated(&id, 1, &bytes), 0u) << k;  // this push would not admit it yet
    t.ApplyKeys(&id, 1, g, 1.0f);
    EXPECT_EQ(t.rows_held(), 0u) << "push " << k;
  }
  EXPECT_EQ(t.sparse_counts().not_admitted, 2u);
  uint64_t bytes;
  EXPECT_EQ(t.CountCreated(&id, 1, &bytes), 1u);  // the third would
  t.ApplyKeys(&id, 1, g, 1.0f);
  EXPECT_EQ(t.rows_held(), 1u);
  EXPECT_EQ(t.sparse_counts().created, 1u);
  t.ReadKeys(&id, 1, out.data());
  EXPECT_FLOAT_EQ(out[0], init[0] - 1.0f);  // only the admitting push applied
  EXPECT_FLOAT_EQ(out[1], init[1] - 2.0f);
}

// Assign writes rows (not gradients): a sparse row is made even before
// admission would, existing ones take the values, and the optimizer state
// restarts (Adagrad's next step is its first step again); dense rows too.
TEST(SparseTable, AssignWritesRowsAndRestartsTheirOptimizerState) {
  ServerTable t(testing::Sparse("e", 2).Adagrad(0.5f).AdmitAfter(3), 8, All(8));
  const uint64_t ids[2] = {7, 1ull << 40};
  const float v[4] = {1.0f, -2.0f, 0.25f, 4.0f};
  t.AssignKeys(ids, 2, v);
  EXPECT_EQ(t.rows_held(), 2u);  // admission aside
  std::vector<float> out(4);
  t.ReadKeys(ids, 2, out.data());
  EXPECT_EQ(out, std::vector<float>(v, v + 4));
  const float g[2] = {1.0f, 1.0f};
  t.ApplyKeys(ids, 1, g, 1.0f);  // Adagrad from a fresh accumulator: w - lr * g / sqrt(g^2) = w - 0.5
  t.AssignKeys(ids, 1, v);       // the accumulator restarts too
  t.ApplyKeys(ids, 1, g, 1.0f);
  t.ReadKeys(ids, 1, out.data());
  EXPECT_NEAR(out[0], 0.5f, 1e-6);
  EXPECT_NEAR(out[1], -2.5f, 1e-6);
  ServerTable d(testing::Dense("w", 10, 2).Sgd(1.0f), 4, All(4));
  const float rows[6] = {1, 2, 3, 4, 5, 6};
  d.AssignRange(3, 6, rows);
  std::vector<float> got(6);
  d.ReadRange(3, 6, got.data());
  EXPECT_EQ(got, std::vector<float>(rows, rows + 6));
  const uint64_t row = 9;
  d.AssignKeys(&row, 1, rows);
  d.ReadRange(9, 10, got.data());
  EXPECT_EQ(got[0], 1.0f);
  EXPECT_EQ(got[1], 2.0f);
}

TEST(SparseTable, RowsIdleForNClocksAreEvictedAndComeBackFromTheInitializer) {
  ServerTable t(testing::Sparse("e", 1).Sgd(1.0f).Uniform(-1, 1).EvictAfterClocks(5), 4, All(4));
  const uint64_t old_id = 1, busy_id = 2;
  const float one = 1.0f;
  t.SetClock(0);
  t.ApplyKeys(&old_id, 1, &one, 1.0f);
  t.ApplyKeys(&busy_id, 1, &one, 1.0f);
  for (int64_t c = 1; c <= 10; ++c) {
    t.SetClock(c);
    t.ApplyKeys(&busy_id, 1, &one, 1.0f);
    t.EvictSome(1000);
    EXPECT_EQ(t.rows_held(), c < 5 ? 2u : 1u) << "clock " << c;
  }
  EXPECT_EQ(t.sparse_counts().evicted, 1u);
  // Gone: a pull reads the initial value, a push makes the row again from it.
  float v, init;
  InitRow(t.spec(), old_id, &init);
  t.ReadKeys(&old_id, 1, &v);
  EXPECT_EQ(v, init);
  t.ApplyKeys(&old_id, 1, &one, 1.0f);
  t.ReadKeys(&old_id, 1, &v);
  EXPECT_FLOAT_EQ(v, init - 1.0f);
  EXPECT_EQ(t.rows_held(), 2u);
}

TEST(SparseTable, EvictionLooksAtABoundedNumberOfRowsPerCall) {
  ServerTable t(testing::Sparse("e", 1).EvictAfterClocks(1), 1, All(1));
  std::vector<uint64_t> ids(1000);
  std::iota(ids.begin(), ids.end(), 0);
  std::vector<float> g(1000, 0.0f);
  t.ApplyKeys(ids.data(), ids.size(), g.data(), 1.0f);
  t.SetClock(3);
  EXPECT_EQ(t.EvictSome(100), 100u);
  EXPECT_EQ(t.rows_held(), 900u);
  while (t.EvictSome(100) > 0) {
  }
  EXPECT_EQ(t.rows_held(), 0u);
  // The slots are reused: making the rows again costs no bytes.
  const uint64_t before = t.bytes();
  t.ApplyKeys(ids.data(), ids.size(), g.data(), 1.0f);
  EXPECT_EQ(t.bytes(), before);
}

TEST(SparseTable, RepeatedBoundedSweepsReachEveryPartition) {
  // 64 partitions of about 125 idle rows each; calls of 100 slots go on
  // where the last one stopped, so 8000 / 100 calls and one per partition
  // for the hand-overs remove them all (a sweep that began at partition 0
  // each time would never leave the first two).
  ServerTable t(testing::Sparse("e", 1).EvictAfterClocks(1), 64, All(64));
  std::vector<uint64_t> ids(8000);
  std::iota(ids.begin(), ids.end(), 0);
  std::vector<float> g(ids.size(), 0.0f);
  t.ApplyKeys(ids.data(), ids.size(), g.data(), 1.0f);
  t.SetClock(3);
  for (int call = 0; call < 80 + 64; ++call) t.EvictSome(100);
  EXPECT_EQ(t.rows_held(), 0u);
  EXPECT_EQ(t.sparse_counts().evicted, 8000u);
  // Rows made later, in partitions swept before, go too.
  t.ApplyKeys(ids.data(), 500, g.data(), 1.0f);
  t.SetClock(5);
  for (int call = 0; call < 80 + 64; ++call) t.EvictSome(100);
  EXPECT_EQ(t.rows_held(), 0u);
}

TEST(SparseTable, Bf16RowsKeepUpdatesSmallerThanHalfAnUlp) {
  // 2000 SGD steps of 1e-4 each on rows near 0.5 (bf16's ulp there is 2^-8,
  // so each step is 1/39 of an ulp): round to nearest would keep none of
  // them; stochastic rounding keeps their sum, 0.2, on average.
  ServerTable b(testing::Sparse("e", 16).Sgd(1.0f).Constant(0.5f).Type(DType::kBF16), 2, All(2));
  ServerTable f(testing::Sparse("e", 16).Sgd(1.0f).Constant(0.5f), 2, All(2));
  const uint64_t ids[] = {3, 5, 9, 11};
  const std::vector<float> g(64, 1e-4f);
  for (int step = 0; step < 2000; ++step) {
    b.ApplyKeys(ids, 4, g.data(), 1.0f);
    f.ApplyKeys(ids, 4, g.data(), 1.0f);
  }
  std::vector<float> vb(64), vf(64);
  b.ReadKeys(ids, 4, vb.data());
  f.ReadKeys(ids, 4, vf.data());
  double mean = 0;
  for (size_t i = 0; i < 64; ++i) {
    EXPECT_NEAR(vf[i], 0.3f, 1e-3f);
    EXPECT_NEAR(vb[i], 0.3f, 0.1f) << i;  // a random walk of 2000 roundings: sd about 0.02
    mean += vb[i] / 64;
  }
  EXPECT_NEAR(mean, 0.3, 0.015);  // sd about 0.0025; round to nearest: 0.5
}

TEST(SparseTable, Bf16ValuesAreStoredRoundedAndSentAsStored) {
  ServerTable b(testing::Sparse("e", 8).Adagrad(0.1f).Uniform(-1, 1).Type(DType::kBF16), 2, All(2));
  ServerTable f(testing::Sparse("e", 8).Adagrad(0.1f).Uniform(-1, 1), 2, All(2));
  const uint64_t ids[] = {3, 5, 9};
  std::vector<float> g(24);
  for (size_t i = 0; i < g.size(); ++i) g[i] = 0.01f * static_cast<float>(i) - 0.1f;
  for (int step = 0; step < 3; ++step) {
    b.ApplyKeys(ids, 3, g.data(), 1.0f);
    f.ApplyKeys(ids, 3, g.data(), 1.0f);
  }
  std::vector<float> vb(24), vf(24);
  b.ReadKeys(ids, 3, vb.data());
  f.ReadKeys(ids, 3, vf.data());
  for (size_t i = 0; i < 24; ++i) {
    EXPECT_EQ(vb[i], Bf16BitsToFloat(FloatToBf16Bits(vb[i]))) << "stored as bf16";
    EXPECT_NEAR(vb[i], vf[i], 3 * std::fabs(vf[i]) / 256 + 1e-3f) << i;
  }
  std::vector<uint16_t> wire(24);
  b.ReadKeysAs(ids, 3, wire.data());
  for (size_t i = 0; i < 24; ++i) EXPECT_EQ(Bf16BitsToFloat(wire[i]), vb[i]);
  // An absent id reads its initial values as a row made now would hold them.
  const uint64_t absent = 1000;
  std::vector<float> init(8), got(8);
  InitRow(b.spec(), absent, init.data());
  b.ReadKeysAs(&absent, 1, wire.data());
  for (int j = 0; j < 8; ++j) EXPECT_EQ(wire[j], FloatToBf16Bits(init[j]));
  b.ReadKeys(&absent, 1, got.data());
  for (int j = 0; j < 8; ++j) EXPECT_EQ(got[j], Bf16BitsToFloat(FloatToBf16Bits(init[j])));
  // Half the bytes per value.
  EXPECT_EQ(b.value_bytes(), 2u);
  EXPECT_LT(b.sparse_record_bytes(), f.sparse_record_bytes());
}

// A snapshot of a table with admission and eviction, restored onto a server
// holding other partitions (another number of servers): rows, stamps and
// the sketch go on as before.
TEST(SparseTable, ASnapshotKeepsStampsAndTheSketchAcrossAnotherLayout) {
  const TableSpec spec = testing::Sparse("e", 2).Sgd(1.0f).AdmitAfter(2).EvictAfterClocks(4).Type(DType::kF16);
  ServerTable a(spec, 4, All(4));
  std::vector<uint64_t> ids(40);
  std::iota(ids.begin(), ids.end(), 100);
  std::vector<float> g(80, 0.5f);
  a.SetClock(7);
  a.ApplyKeys(ids.data(), 20, g.data(), 1.0f);  // ids 100..119: pushed once, not admitted
  a.ApplyKeys(ids.data() + 20, 20, g.data(), 1.0f);
  a.ApplyKeys(ids.data() + 20, 20, g.data(), 1.0f);  // ids 120..139: admitted
  ASSERT_EQ(a.rows_held(), 20u);
  std::vector<PartitionData> parts;
  a.Export(0, &parts);
  ASSERT_EQ(parts.size(), 4u);
  EXPECT_EQ(parts[0].stride, 2u + 1u);  // values + the stamp (SGD has no state)
  // Restored as two servers: partitions {0, 2} and {1, 3}.
  ServerTable even(spec, 4, {0, 2}), odd(spec, 4, {1, 3});
  for (const auto& p : parts) {
    ServerTable& t = p.partition % 2 ? odd : even;
    for (size_t i = 0; i < p.rows.size(); ++i) t.Import(p.rows[i], &p.values[i * p.stride]);
    ASSERT_TRUE(t.ImportAdmission(p.partition, p.admission));
  }
  EXPECT_EQ(even.rows_held() + odd.rows_held(), 20u);
  // An id pushed once before the cut is admitted by its second push after it.
  for (uint64_t id = 100; id < 120; ++id) {
    ServerTable& t = PartitionOfId(id, 4) % 2 ? odd : even;
    const uint64_t before = t.rows_held();
    t.SetClock(8);
    t.ApplyKeys(&id, 1, g.data(), 1.0f);
    EXPECT_EQ(t.rows_held(), before + 1) << id;
  }
  // The restored rows keep their stamp (clock 7): idle 4 clocks at 11.
  for (ServerTable* t : {&even, &odd}) {
    t->SetClock(11);
    while (t->EvictSome(1000) > 0) {
    }
  }
  EXPECT_EQ(even.rows_held() + odd.rows_held(), 20u);  // the 20 old ones gone, the 20 from clock 8 stay
  EXPECT_FALSE(even.ImportAdmission(1, parts[1].admission));  // not a partition it holds
  EXPECT_FALSE(even.ImportAdmission(0, "garbage"));
}

}  // namespace
}  // namespace shardps
