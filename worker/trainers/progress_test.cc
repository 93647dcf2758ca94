// The progress line and the evaluator's CSV log.
#include "worker/trainers/progress.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace shardps::worker {
namespace {

TEST(Progress, ALineSaysEpochStepLossRateAndStaleness) {
  FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  Progress p(0.0, f);  // a line every step
  p.Step(3, 2, 10, 40, 64, 0.5, 1);
  p.Step(3, 2, 11, 40, 64, 0.25, 4);
  EXPECT_EQ(p.samples(), 128);
  std::rewind(f);
  char buf[4096] = {};
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  std::string out(buf, n);
  EXPECT_NE(out.find("worker 3 | epoch 2 step    10/40 | loss 0.5000 |"), std::string::npos) << out;
  EXPECT_NE(out.find("worker 3 | epoch 2 step    11/40 | loss 0.2500 |"), std::string::npos) << out;
  EXPECT_NE(out.find("| staleness 4\n"), std::string::npos) << out;
}

TEST(Progress, NoLineBeforeTheInterval) {
  FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  Progress p(1000.0, f);
  p.Step(0, 1, 1, 10, 64, 0.5, 0);
  EXPECT_EQ(p.samples(), 64);
  EXPECT_EQ(std::ftell(f), 0L);
  std::fclose(f);
}

TEST(CsvLog, AHeaderThenARowPerEpoch) {
  const std::string path = ::testing::TempDir() + "/progress_test.csv";
  {
    CsvLog csv;
    ASSERT_TRUE(csv.Open(path).ok());
    csv.Row(1.5, 1, 0.75, 0.5);
    csv.Row(3, 2, 0.25, 0.875);
  }
  std::ifstream in(path);
  std::stringstream got;
  got << in.rdbuf();
  EXPECT_EQ(got.str(), "time_s,epoch,loss,test_accuracy\n1.5,1,0.75,0.5\n3,2,0.25,0.875\n");
  std::remove(path.c_str());
}

TEST(CsvLog, NoPathWritesNothingAndABadOneIsAClearError) {
  CsvLog none;
  EXPECT_TRUE(none.Open("").ok());
  none.Row(1, 1, 1, 1);  // nowhere
  CsvLog bad;
  Status s = bad.Open("/nonexistent-dir/x.csv");
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "cannot write --csv '/nonexistent-dir/x.csv'");
}

}  // namespace
}  // namespace shardps::worker
