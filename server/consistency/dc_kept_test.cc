#include "server/consistency/dc_kept.h"

#include <gtest/gtest.h>

#include <vector>

#include "server/tables/table.h"
#include "tests/table_spec.h"

namespace shardps {
namespace {

constexpr float kLambda = 0.5f;

TableSpec Spec() {
  return testing::Dense("w", 8, 2).Constant(1.0f).Sgd(0.25f).Rule(StalenessRule::kDelayCompensation, kLambda);
}

std::vector<float> Rows(const ServerTable& t, uint64_t begin, uint64_t end) {
  std::vector<float> v((end - begin) * t.spec().cols);
  t.ReadRange(begin, end, v.data());
  return v;
}

TEST(DcKept, CompensatesForTheRowsChangeSinceThePullTheGradientWasComputedOn) {
  ServerTable t(Spec(), 2, {0, 1});
  DcKept dc;
  dc.Keep(/*rank=*/0, /*table=*/0, t, 2, 6, /*version=*/7);
  const std::vector<float> then = Rows(t, 2, 6);
  const std::vector<float> step(8, 2.0f);
  t.ApplyRange(2, 6, step.data(), 1.0f);  // another worker's update meanwhile
  const std::vector<float> now = Rows(t, 2, 6);
  ASSERT_NE(now, then);

  std::vector<float> g = {1, -1, 0.5f, 2, 0, 1, 3, -2};
  const float* c = dc.Compensate(0, 0, t, 2, 6, 7, g.data());
  ASSERT_NE(c, nullptr);
  for (size_t i = 0; i < g.size(); ++i)
    EXPECT_FLOAT_EQ(c[i], g[i] + kLambda * g[i] * g[i] * (now[i] - then[i])) << i;
}

TEST(DcKept, OnlyTheSameWorkersPullOfTheSameRangeAndVersionIsUsed) {
  ServerTable t(Spec(), 2, {0, 1});
  DcKept dc;
  dc.Keep(0, 0, t, 0, 4, 1);
  const std::vector<float> g(8, 1.0f);
  EXPECT_NE(dc.Compensate(0, 0, t, 0, 4, 1, g.data()), nullptr);
  EXPECT_EQ(dc.Compensate(1, 0, t, 0, 4, 1, g.data()), nullptr);  // another worker
  EXPECT_EQ(dc.Compensate(0, 1, t, 0, 4, 1, g.data()), nullptr);  // another table
  EXPECT_EQ(dc.Compensate(0, 0, t, 0, 3, 1, g.data()), nullptr);  // another end
  EXPECT_EQ(dc.Compensate(0, 0, t, 1, 4, 1, g.data()), nullptr);  // another first row
  EXPECT_EQ(dc.Compensate(0, 0, t, 0, 4, 2, g.data()), nullptr);  // another version
}

TEST(DcKept, KeepsTheLastThreePullsOfARange) {
  ServerTable t(Spec(), 2, {0, 1});
  DcKept dc;
  const std::vector<float> g(8, 1.0f);
  for (uint64_t v = 1; v <= DcKept::kKept + 1; ++v) dc.Keep(0, 0, t, 0, 4, v);
  EXPECT_EQ(dc.Compensate(0, 0, t, 0, 4, 1, g.data()), nullptr);  // the oldest is forgotten
  for (uint64_t v = 2; v <= DcKept::kKept + 1; ++v) EXPECT_NE(dc.Compensate(0, 0, t, 0, 4, v, g.data()), nullptr) << v;
  // Nothing changed since: the gradient is as it came.
  const float* c = dc.Compensate(0, 0, t, 0, 4, 4, g.data());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_EQ(c[i], g[i]);
}

// A fill (re-replication): the kept pulls travel, so a copy compensates
// exactly as the original does.
TEST(DcKept, ACopyLoadedFromSaveCompensatesAsTheOriginal) {
  ServerTable t(Spec(), 2, {0, 1});
  DcKept dc;
  dc.Keep(0, 0, t, 2, 6, 7);
  dc.Keep(1, 0, t, 0, 4, 3);
  std::string saved;
  dc.Save(&saved);
  const std::vector<float> step(8, 2.0f);
  t.ApplyRange(2, 6, step.data(), 1.0f);
  DcKept copy;
  ASSERT_TRUE(copy.Load(saved).ok());
  const std::vector<float> g = {1, -1, 0.5f, 2, 0, 1, 3, -2};
  const std::vector<float> a(dc.Compensate(0, 0, t, 2, 6, 7, g.data()), dc.Compensate(0, 0, t, 2, 6, 7, g.data()) + 8);
  const float* b = copy.Compensate(0, 0, t, 2, 6, 7, g.data());
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(std::vector<float>(b, b + 8), a);
  EXPECT_NE(copy.Compensate(1, 0, t, 0, 4, 3, g.data()), nullptr);
  EXPECT_EQ(copy.Load(saved.substr(0, saved.size() / 2)).code(), Code::kBadMessage);
  EXPECT_NE(copy.Compensate(1, 0, t, 0, 4, 3, g.data()), nullptr);  // (a refused load changed nothing)
}

}  // namespace
}  // namespace shardps
