// End-to-end training through real processes: the launcher starts a
// coordinator and servers, real shardps-worker processes train on real
// Fashion-MNIST data.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <regex>
#include <vector>

#include "tests/cluster.h"

namespace shardps {
namespace {

using testing::BinaryPath;
using testing::RunCommand;

std::string BinDir() {
  std::string s = BinaryPath("SHARDPS_SERVER");
  return s.substr(0, s.rfind('/'));
}

std::vector<float> ReadFloats(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

class TrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shardps-train-XXXXXX";
    ASSERT_TRUE(mkdtemp(tmpl));
    dir_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }

  // Runs `workers` shardps-worker processes against a fresh local cluster.
  int Launch(int workers, const std::string& consistency, std::vector<std::string> worker_args, std::string* out,
             int staleness = 0) {
    std::vector<std::string> argv = {BinaryPath("SHARDPS_LAUNCH"), "--servers", "2", "--workers", std::to_string(workers),
                                     "--consistency", consistency, "--staleness", std::to_string(staleness),
                                     "--bin-dir", BinDir(), "--timeout", "400",
                                     "--", BinaryPath("SHARDPS_WORKER"), "--coordinator", "{coordinator}",
                                     "--rank", "{rank}", "--device", "cpu", "--progress-sec", "5"};
    argv.insert(argv.end(), worker_args.begin(), worker_args.end());
    return RunCommand(argv, out, 420);
  }
  std::string dir_;
};

TEST_F(TrainingTest, ShortRunOnFashionMnistLearns) {
  std::string out;
  int rc = Launch(2, "sync",
                  {"--model", "mlp", "--hidden", "64", "--epochs", "1", "--train-limit", "8000", "--test-limit", "2000",
                   "--min-accuracy", "0.6", "--csv", dir_ + "/run.csv"},
                  &out);
  ASSERT_EQ(rc, 0) << out;  // rc 3: accuracy not clearly above chance (10 %)
  EXPECT_NE(out.find("test accuracy"), std::string::npos) << out;
  std::ifstream csv(dir_ + "/run.csv");
  std::string header, row;
  std::getline(csv, header);
  std::getline(csv, row);
  EXPECT_EQ(header, "time_s,epoch,loss,test_accuracy");
  EXPECT_FALSE(row.empty());
}

TEST_F(TrainingTest, SynchronousTwoWorkersEqualOneProcessWithTheCombinedBatch) {
  const std::vector<std::string> common = {"--model", "mlp", "--hidden", "32", "--epochs", "2", "--train-limit", "1024",
                                           "--test-limit", "100", "--optimizer", "sgd", "--lr", "0.1"};
  std::string out;
  auto two = common;
  two.insert(two.end(), {"--batch", "32", "--save-params", dir_ + "/two.bin"});
  ASSERT_EQ(Launch(2, "sync", two, &out), 0) << out;
  auto one = common;
  one.insert(one.end(), {"--batch", "64", "--save-params", dir_ + "/one.bin"});
  ASSERT_EQ(Launch(1, "sync", one, &out), 0) << out;
  auto a = ReadFloats(dir_ + "/two.bin"), b = ReadFloats(dir_ + "/one.bin");
  ASSERT_EQ(a.size(), size_t{784 * 32 + 32 + 32 * 10 + 10});
  ASSERT_EQ(a.size(), b.size());
  double max_diff = 0;
  for (size_t i = 0; i < a.size(); ++i) max_diff = std::max(max_diff, static_cast<double>(std::fabs(a[i] - b[i])));
  EXPECT_LE(max_diff, 1e-5);
}

// Bounded staleness with a straggler: the batches of each epoch come from a
// pool shared through the coordinator, so the two workers together train
// every batch exactly once, however the pool was split between them.
TEST_F(TrainingTest, BoundedStalenessSharesEachEpochsBatchesWithAStraggler) {
  std::string out;
  int rc = Launch(2, "bounded",
                  {"--model", "mlp", "--hidden", "32", "--epochs", "2", "--train-limit", "12800", "--test-limit", "1000",
                   "--batch", "64", "--slowdown", "3", "--slow-rank", "1",
                   "--min-accuracy", "0.6"},
                  &out, 2);
  ASSERT_EQ(rc, 0) << out;
  // "worker R | finished 2 epochs in T s | N batches (M while ...".
  std::regex line(R"(worker (\d) \| finished 2 epochs in [0-9.]+ s \| (\d+) batches \((\d+) while)");
  std::map<int, long> batches;
  for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end; ++it)
    batches[std::stoi((*it)[1])] = std::stol((*it)[2]);
  ASSERT_EQ(batches.size(), 2u) << out;
  EXPECT_EQ(batches[0] + batches[1], 2 * 12800 / 64) << out;
  EXPECT_GT(batches[0], 0);
  EXPECT_GT(batches[1], 0);
}

// Async with a delayed worker: its gradients arrive stale, the servers
// measure that (the workers report what their push replies said) and weigh
// them by the default rule, the workers compute their batches on predicted
// parameters (the default --predict 2), and the model still learns.
TEST_F(TrainingTest, AsyncWithADelayedWorkerWeighsStaleGradientsAndLearns) {
  std::string out;
  int rc = Launch(2, "async",
                  {"--model", "mlp", "--hidden", "32", "--epochs", "2", "--train-limit", "12800", "--test-limit", "1000",
                   "--batch", "64", "--slowdown", "3", "--slow-rank", "1", "--min-accuracy", "0.6"},
                  &out, 2);
  ASSERT_EQ(rc, 0) << out;
  std::regex line(R"(worker (\d) \| finished .* push staleness mean ([0-9.]+) max (\d+) updates)");
  std::map<int, double> mean;
  std::map<int, long> max;
  for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end; ++it) {
    mean[std::stoi((*it)[1])] = std::stod((*it)[2]);
    max[std::stoi((*it)[1])] = std::stol((*it)[3]);
  }
  ASSERT_EQ(mean.size(), 2u) << out;
  // The workers read their own steps (per-layer prefetch): a push misses
  // only the other worker's, which arrive while it computes (or, for the
  // slow one, sleeps) — about one per push here, and at times several.
  EXPECT_GT(mean[0], 0.0) << out;
  EXPECT_GT(mean[1], 0.0) << out;
  EXPECT_GE(std::max(max[0], max[1]), 2) << out;
  // The fast worker's pushes are stale (the slow one's land in between):
  // its batches are computed ahead of the values pulled.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(worker 0 \| finished .* computed ([0-9.]+) updates ahead)")))
      << out;
  EXPECT_GT(std::stod(m[1]), 0.0) << out;
}

TEST_F(TrainingTest, SparseLogisticRegressionLearnsTheClickModel) {
  std::string out;
  int rc = Launch(2, "async",
                  {"--model", "sparse-lr", "--examples", "40000", "--id-space", "100000", "--optimizer", "adagrad",
                   "--lr", "0.1", "--epochs", "1", "--batch", "100", "--eval-examples", "5000", "--min-accuracy", "0.6"},
                  &out);
  ASSERT_EQ(rc, 0) << out;
  // Async: the two workers shared the stream's 400 batches through the pool.
  std::regex line(R"(worker (\d) \| finished in [0-9.]+ s \| (\d+) batches)");
  long total = 0;
  int workers = 0;
  for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end; ++it, ++workers)
    total += std::stol((*it)[2]);
  EXPECT_EQ(workers, 2) << out;
  EXPECT_EQ(total, 40000 / 100) << out;
}

TEST_F(TrainingTest, BadWorkerFlagsAreRefused) {
  std::string out;
  EXPECT_NE(RunCommand({BinaryPath("SHARDPS_WORKER"), "--coordinator", "tcp://127.0.0.1:1", "--model", "resnet"}, &out), 0);
  EXPECT_NE(out.find("resnet"), std::string::npos) << out;
  EXPECT_NE(RunCommand({BinaryPath("SHARDPS_WORKER"), "--coordinator", "tcp://127.0.0.1:1", "--hidden", "12,x"}, &out, 30), 0);
  EXPECT_NE(out.find("--hidden: 'x'"), std::string::npos) << out;
  EXPECT_NE(RunCommand({BinaryPath("SHARDPS_WORKER"), "--coordinator", "tcp://127.0.0.1:1", "--max-fill", "-1"}, &out, 30), 0);
  EXPECT_NE(out.find("--max-fill"), std::string::npos) << out;
  // Files written at the end are checked at the start.
  EXPECT_EQ(RunCommand({BinaryPath("SHARDPS_WORKER"), "--coordinator", "tcp://127.0.0.1:1", "--save-params",
                        "/nonexistent/dir/p.bin"},
                       &out, 30),
            2);
  EXPECT_NE(out.find("--save-params '/nonexistent/dir/p.bin': there is no folder '/nonexistent/dir'"), std::string::npos)
      << out;
  EXPECT_EQ(RunCommand({BinaryPath("SHARDPS_WORKER"), "--coordinator", "tcp://127.0.0.1:1", "--csv", "/etc/hostname/x.csv"},
                       &out, 30),
            2);
  EXPECT_NE(out.find("--csv '/etc/hostname/x.csv': there is no folder '/etc/hostname'"), std::string::npos) << out;
}

// A worker's own inputs are checked before it connects: a missing data
// directory is reported at once (nothing listens on port 1: a worker that
// connected first would wait its whole connect timeout).
TEST_F(TrainingTest, MissingDataIsReportedBeforeTheCoordinatorIsWaitedFor) {
  std::string out;
  // (exit 124 from timeout(1) would be a worker that waited for the coordinator)
  EXPECT_EQ(RunCommand({BinaryPath("SHARDPS_WORKER"), "--coordinator", "tcp://127.0.0.1:1", "--model", "mlp",
                        "--data-dir", "/nonexistent"},
                       &out, 50),
            1);
  EXPECT_NE(out.find("/nonexistent/train-images-idx3-ubyte"), std::string::npos) << out;
  EXPECT_NE(out.find("--data-dir"), std::string::npos) << out;
  EXPECT_EQ(out.find("coordinator"), std::string::npos) << "it never got as far as the coordinator: " << out;
}

}  // namespace
}  // namespace shardps
