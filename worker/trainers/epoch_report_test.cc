// The evaluation (CPU backend) and what a worker reports of an epoch.
#include "worker/trainers/epoch_report.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace shardps::worker {
namespace {

std::string Read(FILE* f) {
  std::rewind(f);
  char buf[4096] = {};
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  return std::string(buf, n);
}

// Softmax regression whose logits are the inputs: it predicts the larger
// feature. Over 2500 examples (three evaluation batches), every fifth
// labelled against that: 80% correct.
TEST(EpochReport, TestAccuracyIsTheShareClassifiedCorrectly) {
  auto dev = MakeCpuDevice();
  Mlp mlp(dev.get(), {2, 2});
  const float identity[4] = {1, 0, 0, 1}, zero[2] = {0, 0};
  dev->Upload(mlp.weight(0).data(), identity, 4);
  dev->Upload(mlp.bias(0).data(), zero, 2);
  Dataset test;
  test.rows = 2500;
  test.cols = 2;
  test.classes = 2;
  for (int i = 0; i < test.rows; ++i) {
    const int c = i % 2;
    test.x.push_back(c == 0 ? 1.0f : 0.0f);
    test.x.push_back(c == 1 ? 1.0f : 0.0f);
    test.y.push_back(static_cast<float>(i % 5 == 0 ? 1 - c : c));
  }
  EXPECT_DOUBLE_EQ(TestAccuracy(*dev, mlp, test), 0.8);
}

TEST(EpochReport, TrainedWhatSaysPoolOrShard) {
  EXPECT_EQ(TrainedWhat(true, 5990, 6000), "5990 of 6000 examples");
  EXPECT_EQ(TrainedWhat(false, 2976, 2976), "2976 examples of its shard");
}

TEST(EpochReport, AnEpochLineAndItsCsvRow) {
  FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  const std::string csv = ::testing::TempDir() + "/epoch_report_test.csv";
  {
    EpochReport r(3, out);
    ASSERT_TRUE(r.Open(csv).ok());
    r.Start();
    r.EpochDone(2, "10 of 20 examples", 0.123456, 0.8765);
    r.Stopped(3, 7);
  }
  const std::string got = Read(out);
  std::fclose(out);
  EXPECT_EQ(got.rfind("worker 3 | epoch 2 done | 10 of 20 examples | train loss 0.1235 | test accuracy 87.65% | ", 0), 0u)
      << got;
  EXPECT_NE(got.find(" s\nworker 3 | stopped on request in epoch 3 after 7 batches of it\n"), std::string::npos) << got;
  std::ifstream in(csv);
  std::string header, row;
  std::getline(in, header);
  std::getline(in, row);
  EXPECT_EQ(header, "time_s,epoch,loss,test_accuracy");
  EXPECT_NE(row.find(",2,0.123456,0.8765"), std::string::npos) << row;
  std::remove(csv.c_str());
}

TEST(EpochReport, AnUnwritableCsvIsAClearError) {
  EpochReport r(0, stdout);
  EXPECT_EQ(r.Open("/nonexistent-dir/x.csv").code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace shardps::worker
