// The vocabulary (shardps/status.h, shardps/types.h): what every message
// and error of shardps is made of.
#include <gtest/gtest.h>

#include "shardps/status.h"
#include "shardps/types.h"

namespace shardps {
namespace {

TEST(Status, OkAndErrorsSayWhatTheyAre) {
  EXPECT_TRUE(Status::OK().ok());
  EXPECT_EQ(Status::OK().ToString(), "OK");
  Status s = Status::UnknownTable("table 'emb' is not defined");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kUnknownTable);
  EXPECT_EQ(s.ToString(), "UnknownTable: table 'emb' is not defined");
  EXPECT_EQ(CodeName(Code::kPermissionDenied), "PermissionDenied");
  EXPECT_EQ(CodeName(static_cast<Code>(999)), "Unknown");
}

Status Step(bool fail, int* reached) {
  ++*reached;
  return fail ? Status::Timeout("step " + std::to_string(*reached)) : Status::OK();
}

Status ThreeSteps(int fail_at, int* reached) {
  for (int i = 1; i <= 3; ++i) SHARDPS_RETURN_IF_ERROR(Step(i == fail_at, reached));
  return Status::OK();
}

TEST(Status, ReturnIfErrorStopsAtTheFirstError) {
  int reached = 0;
  EXPECT_TRUE(ThreeSteps(0, &reached).ok());
  EXPECT_EQ(reached, 3);
  reached = 0;
  Status s = ThreeSteps(2, &reached);
  EXPECT_EQ(s.code(), Code::kTimeout);
  EXPECT_EQ(s.message(), "step 2");
  EXPECT_EQ(reached, 2);
}

TEST(Types, NamesRoundTripAndUnknownOnesListTheValidOnes) {
  for (auto k : {OptimizerKind::kSGD, OptimizerKind::kMomentum, OptimizerKind::kAdagrad, OptimizerKind::kAdam}) {
    OptimizerKind back{};
    ASSERT_TRUE(Parse(ToString(k), &back).ok());
    EXPECT_EQ(back, k);
  }
  for (auto c : {Consistency::kSync, Consistency::kBounded, Consistency::kAsync}) {
    Consistency back{};
    ASSERT_TRUE(Parse(ToString(c), &back).ok());
    EXPECT_EQ(back, c);
  }
  for (auto d : {DType::kF32, DType::kBF16, DType::kF16}) {
    DType back{};
    ASSERT_TRUE(Parse(ToString(d), &back).ok());
    EXPECT_EQ(back, d);
  }
  EXPECT_EQ(DTypeBytes(DType::kBF16), 2u);
  TableKind kind{};
  Status s = Parse("ragged", &kind);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("'ragged'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("dense, sparse"), std::string::npos) << s.message();
}

TableSpec Dense() {
  TableSpec t;
  t.name = "w";
  t.rows = 10;
  t.cols = 4;
  return t;
}

TEST(Types, ValidateNamesTheFieldThatIsWrong) {
  EXPECT_TRUE(Dense().Validate().ok());
  TableSpec t = Dense();
  t.rows = 0;
  EXPECT_NE(t.Validate().message().find("rows > 0"), std::string::npos);
  t = Dense();
  t.momentum = 1.0f;
  EXPECT_NE(t.Validate().message().find("momentum"), std::string::npos);
  t = Dense();
  t.max_rows = 5;
  EXPECT_NE(t.Validate().message().find("max_rows is for sparse tables"), std::string::npos);
  t = Dense();
  t.init = InitKind::kUniform;
  t.init_a = 1;
  t.init_b = 1;
  EXPECT_NE(t.Validate().message().find("low < high"), std::string::npos);
  t = Dense();
  t.name = "";
  EXPECT_EQ(t.Validate().code(), Code::kInvalidArgument);
  // The embedding options are for sparse tables, one eviction rule at a time.
  t = Dense();
  t.dtype = DType::kBF16;
  EXPECT_NE(t.Validate().message().find("are for sparse tables"), std::string::npos);
  t.kind = TableKind::kSparse;
  t.rows = 0;
  EXPECT_TRUE(t.Validate().ok()) << t.Validate().ToString();
  t.evict_after_clocks = 10;
  t.evict_after_sec = 60;
  EXPECT_NE(t.Validate().message().find("give one of them"), std::string::npos);
  t.evict_after_sec = 0;
  t.admit_after = 256;
  EXPECT_NE(t.Validate().message().find("admit_after must be at most 255"), std::string::npos);
}

TEST(Types, SameShapeIgnoresTheIdAndTheRowLimit) {
  TableSpec a = Dense(), b = Dense();
  b.id = 7;
  EXPECT_TRUE(a.SameShape(b));
  b.lr = 0.5f;
  EXPECT_FALSE(a.SameShape(b));
  b = a;
  b.kind = a.kind = TableKind::kSparse;
  b.dtype = DType::kBF16;
  EXPECT_FALSE(a.SameShape(b));
  TableSpec s = Dense(), r = Dense();
  s.kind = r.kind = TableKind::kSparse;
  s.rows = r.rows = 0;
  r.max_rows = 100;
  EXPECT_TRUE(s.SameShape(r));
}

}  // namespace
}  // namespace shardps
