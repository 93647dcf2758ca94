// SparseRows (server/tables/sparse_rows.h): an index that agrees with a reference
// map through inserts and removals, records that keep their contents,
// 16-bit values, and the memory a row costs.
#include "server/tables/sparse_rows.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <unordered_map>
#include <vector>

namespace shardps {
namespace {

TEST(SparseRows, AgreesWithAMapThroughInsertsAndRemovals) {
  SparseRows rows(3, 2, DType::kF32);
  std::unordered_map<uint64_t, uint32_t> ref;  // id -> slot
  std::mt19937_64 rng(1);
  std::vector<uint64_t> ids;
  for (int step = 0; step < 200000; ++step) {
    const bool insert = ref.size() < 100 || rng() % 3 != 0;
    if (insert) {
      // Small ids and clustered ones too, so probe chains collide and wrap.
      const uint64_t id = rng() % 4 == 0 ? rng() % 5000 : rng();
      if (ref.count(id)) {
        ASSERT_EQ(rows.Find(id), ref[id]);
        continue;
      }
      ASSERT_EQ(rows.Find(id), SparseRows::kNone);
      const uint32_t s = rows.Insert(id);
      const float v[3] = {static_cast<float>(id % 1000), 1, 2};
      rows.StoreValues(s, v);
      rows.state(s)[0] = static_cast<float>(id % 777);
      rows.set_stamp(s, static_cast<uint32_t>(step));
      ref[id] = s;
      ids.push_back(id);
    } else {
      const size_t k = rng() % ids.size();
      const uint64_t id = ids[k];
      ids[k] = ids.back();
      ids.pop_back();
      rows.Erase(ref[id]);
      ref.erase(id);
      ASSERT_EQ(rows.Find(id), SparseRows::kNone);
    }
  }
  ASSERT_EQ(rows.size(), ref.size());
  for (const auto& [id, slot] : ref) {
    ASSERT_EQ(rows.Find(id), slot);
    ASSERT_TRUE(rows.live(slot));
    ASSERT_EQ(rows.id(slot), id);
    float v[3];
    rows.LoadValues(slot, v);
    ASSERT_EQ(v[0], static_cast<float>(id % 1000));
    ASSERT_EQ(rows.state(slot)[0], static_cast<float>(id % 777));
  }
  // Removed rows' slots were reused: far fewer slots than inserts.
  EXPECT_LT(rows.slots(), 140000u);
}

TEST(SparseRows, SixteenBitValuesRoundToTheirType) {
  for (DType d : {DType::kBF16, DType::kF16}) {
    SparseRows rows(4, 4, d);
    const uint32_t s = rows.Insert(42);
    const float in[4] = {1.0f, -0.333333f, 1000.5f, 3e-5f};
    rows.StoreValues(s, in);
    float out[4];
    rows.LoadValues(s, out);
    const float rel = d == DType::kBF16 ? 1.0f / 256 : 1.0f / 2048;
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], in[i], std::fabs(in[i]) * rel + 1e-7f) << ToString(d);
    EXPECT_EQ(rows.record_bytes(), (12 + 16 + 8 + 7) / 8 * 8u);  // id, stamp, 4 f32 state, 4 x 2-byte values
  }
}

TEST(SparseRows, BytesToAddPredictsTheGrowth) {
  SparseRows rows(16, 16, DType::kBF16);
  std::mt19937_64 rng(3);
  for (uint64_t more : {1, 7, 100, 5000, 30000, 1, 0}) {
    const uint64_t before = rows.bytes(), predicted = rows.BytesToAdd(more);
    for (uint64_t i = 0; i < more; ++i) rows.Insert(rng());
    EXPECT_EQ(rows.bytes() - before, predicted) << more;
  }
  // A free slot costs nothing to fill.
  rows.Erase(rows.Find(rows.id(0)));
  EXPECT_EQ(rows.BytesToAdd(1), 0u);
}

// Memory per row against the raw bytes of id + values + state: within 16
// bytes (docs/embeddings.md), for the DLRM's rows (dim 16, Adagrad: 16
// floats of state) in float32 and bfloat16, at 2 M rows.
TEST(SparseRows, ARowCostsWithin16BytesOfItsRawSize) {
  for (DType d : {DType::kF32, DType::kBF16}) {
    SparseRows rows(16, 16, d);
    std::mt19937_64 rng(5);
    const uint64_t n = 2'000'000;
    for (uint64_t i = 0; i < n; ++i) rows.Insert(rng());
    const double raw = 8 + 16.0 * DTypeBytes(d) + 16 * 4;
    const double per_row = static_cast<double>(rows.bytes()) / n;
    std::printf("%s: %.1f bytes per row, raw %.0f (+%.1f)\n", std::string(ToString(d)).c_str(), per_row, raw,
                per_row - raw);
    EXPECT_LE(per_row, raw + 16) << ToString(d);
  }
}

// Snapshots of what changed: every id inserted, updated or erased since
// the last TakeChanged is reported (a slot reused by a new id reports
// both), and an overflow asks for every row.
TEST(SparseRows, ReportsTheIdsChangedSinceTheLastTake) {
  SparseRows rows(2, 0, DType::kF32);
  std::vector<uint64_t> got;
  for (uint64_t id = 1; id <= 5; ++id) rows.Insert(id);
  ASSERT_TRUE(rows.TakeChanged(&got));
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<uint64_t>{1, 2, 3, 4, 5}));
  ASSERT_TRUE(rows.TakeChanged(&got));
  EXPECT_TRUE(got.empty());
  rows.set_stamp(rows.Find(2), 7);  // an update
  rows.set_stamp(rows.Find(2), 8);  // (once)
  rows.Erase(rows.Find(4));
  rows.Insert(9);  // reuses 4's slot
  ASSERT_TRUE(rows.TakeChanged(&got));
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<uint64_t>{2, 4, 9}));
  // Churn past 2 x rows + 65 536 ids: too many to keep.
  for (uint64_t id = 100; id < 100 + 70000; ++id) rows.Erase(rows.Insert(id));
  EXPECT_FALSE(rows.TakeChanged(&got));
  EXPECT_TRUE(got.empty());
  rows.set_stamp(rows.Find(1), 3);
  ASSERT_TRUE(rows.TakeChanged(&got));  // tracking again from the take
  EXPECT_EQ(got, std::vector<uint64_t>{1});
}

}  // namespace
}  // namespace shardps
