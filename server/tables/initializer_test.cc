#include "server/tables/initializer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace shardps {
namespace {

TableSpec Spec(InitKind k, float a, float b) {
  TableSpec s;
  s.name = "t";
  s.rows = 1000;
  s.cols = 64;
  s.init = k;
  s.init_a = a;
  s.init_b = b;
  s.seed = 7;
  return s;
}

TEST(Initializer, ZerosAndConstant) {
  std::vector<float> row(64, 1.0f);
  InitRow(Spec(InitKind::kZeros, 0, 0), 3, row.data());
  for (float v : row) EXPECT_EQ(v, 0.0f);
  InitRow(Spec(InitKind::kConstant, 0.25f, 0), 3, row.data());
  for (float v : row) EXPECT_EQ(v, 0.25f);
}

TEST(Initializer, SameRowSameValuesDifferentRowsDiffer) {
  TableSpec s = Spec(InitKind::kUniform, -1, 1);
  std::vector<float> a(64), b(64), c(64);
  InitRow(s, 42, a.data());
  InitRow(s, 42, b.data());
  InitRow(s, 43, c.data());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  TableSpec other = s;
  other.seed = 8;
  InitRow(other, 42, c.data());
  EXPECT_NE(a, c);
  other = s;
  other.name = "u";
  InitRow(other, 42, c.data());
  EXPECT_NE(a, c);
}

TEST(Initializer, UniformMomentsAndBounds) {
  TableSpec s = Spec(InitKind::kUniform, 2, 4);
  std::vector<float> row(64);
  double sum = 0;
  int n = 0;
  for (uint64_t r = 0; r < 1000; ++r) {
    InitRow(s, r, row.data());
    for (float v : row) {
      ASSERT_GE(v, 2.0f);
      ASSERT_LT(v, 4.0f);
      sum += v;
      ++n;
    }
  }
  EXPECT_NEAR(sum / n, 3.0, 0.01);
}

TEST(Initializer, NormalMoments) {
  TableSpec s = Spec(InitKind::kNormal, 1.0f, 0.5f);
  std::vector<float> row(64);
  double sum = 0, sq = 0;
  int n = 0;
  for (uint64_t r = 0; r < 2000; ++r) {
    InitRow(s, r, row.data());
    for (float v : row) {
      ASSERT_TRUE(std::isfinite(v));
      sum += v;
      sq += v * v;
      ++n;
    }
  }
  double mean = sum / n, var = sq / n - mean * mean;
  EXPECT_NEAR(mean, 1.0, 0.01);
  EXPECT_NEAR(std::sqrt(var), 0.5, 0.01);
}

}  // namespace
}  // namespace shardps
