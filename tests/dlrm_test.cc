// The DLRM's training loop (worker/trainers/dlrm_trainer.h) against a real
// coordinator and real servers on loopback, on a click log written here:
// under sync two workers of batch b end with the model one worker of batch
// 2b trains (the per-clock pool cuts each clock's examples in rank order,
// the servers average the two gradients; embedding rows summed per id by
// each client, summed over the workers by the servers); the evaluator
// reports a test AUC.
#include <cblas.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <thread>

#include "tests/cluster.h"
#include "worker/trainers/dlrm_trainer.h"

namespace shardps::worker {
namespace {

using testing::ClusterOptions;
using testing::LocalCluster;

// `n` lines of a Criteo-format log whose label depends on I1 and on C1's
// value (a few dozen values), so a model can learn it.
std::string WriteLog(const std::string& dir, const std::string& name, int n, unsigned seed) {
  const std::string path = dir + "/" + name;
  std::ofstream f(path);
  std::mt19937 rng(seed);
  for (int i = 0; i < n; ++i) {
    const int c1 = static_cast<int>(rng() % 40), i1 = static_cast<int>(rng() % 20);
    const double logit = (c1 % 2 ? 1.5 : -1.5) + 0.1 * (i1 - 10);
    const int label = std::uniform_real_distribution<double>(0, 1)(rng) < 1 / (1 + std::exp(-logit)) ? 1 : 0;
    f << label << '\t' << i1;
    for (int j = 1; j < kCriteoIntegers; ++j) f << '\t' << (j == 1 ? -1 : static_cast<int>(rng() % 5));
    for (int c = 0; c < kCriteoCategories; ++c) {
      char hex[16];
      std::snprintf(hex, sizeof hex, "%08x", c == 0 ? c1 : static_cast<int>(rng() % 7) + 100 * c);
      f << '\t' << (c == 5 && rng() % 4 == 0 ? "" : hex);
    }
    f << '\n';
  }
  return path;
}

DlrmTrainOptions SmallModel(const std::string& train, const std::string& test, int batch) {
  DlrmTrainOptions o;
  o.model.dim = 4;
  o.model.bottom_hidden = {8};
  o.model.top_hidden = {8};
  o.train_tsv = train;
  o.test_tsv = test;
  o.batch = batch;
  o.epochs = 2;
  o.lr = 0.05f;
  o.embedding.kind = TableKind::kSparse;
  o.progress_sec = 1000;
  return o;
}

struct Outcome {
  Status status;
  DlrmResult result;
  std::string out;
};

void TrainOne(const LocalCluster& c, int rank, DlrmTrainOptions o, Outcome* run) {
  auto ps = testing::ConnectClient(c, ClientRole::kWorker, rank);
  if (!ps) return void(run->status = Status::Unavailable("no connection"));
  auto dev = MakeCpuDevice();
  o.evaluator = rank == 0;
  FILE* out = std::tmpfile();
  o.out = out;
  DlrmLogs logs;
  run->status = OpenDlrmLogs(o, o.evaluator, &logs);
  if (run->status.ok()) {
    DlrmTrainer trainer(*ps, *dev, o, std::move(logs));
    run->status = trainer.CreateTables();
    if (run->status.ok()) run->status = trainer.Run(&run->result);
  }
  std::rewind(out);
  char buf[1 << 16];
  run->out.assign(buf, std::fread(buf, 1, sizeof buf, out));
  std::fclose(out);
  (void)ps->Close();
}

// Every table's values as an observer reads them: the dense ones whole, the
// embeddings at `ids`.
std::vector<float> Model(const LocalCluster& c, const DlrmTrainOptions& o, const std::vector<uint64_t>& ids) {
  auto obs = testing::ConnectClient(c, ClientRole::kObserver);
  std::vector<float> all;
  if (!obs) return all;
  for (const TableSpec& spec : DlrmTableSpecs(o)) {
    Table t;
    EXPECT_TRUE(obs->GetTable(spec.name, &t).ok()) << spec.name;
    std::vector<float> v(spec.kind == TableKind::kDense ? t.size() : ids.size() * spec.cols);
    Status s = spec.kind == TableKind::kDense ? obs->Pull(t, v).Wait() : obs->Pull(t, ids, v).Wait();
    EXPECT_TRUE(s.ok()) << s.ToString();
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

class DlrmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    openblas_set_num_threads(1);
    char tmpl[] = "/tmp/shardps-dlrm-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    train_ = WriteLog(dir_, "train.tsv", 1536, 1);
    test_ = WriteLog(dir_, "test.tsv", 600, 2);
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  std::string dir_, train_, test_;
};

TEST_F(DlrmTest, TwoSyncWorkersTrainWhatOneTrainsWithTheCombinedBatch) {
  std::vector<uint64_t> ids;  // every key of the log's first lines
  {
    DlrmTrainOptions o = SmallModel(train_, test_, 32);
    DlrmLogs logs;
    ASSERT_TRUE(OpenDlrmLogs(o, false, &logs).ok());
    std::vector<CriteoExample> ex;
    ASSERT_TRUE(logs.train->Read(0, 200, &ex).ok());
    std::vector<float> x, y;
    DlrmInputs(ex, 0, &x, &y, &ids);
  }
  std::vector<float> models[2];
  for (int workers : {1, 2}) {
    LocalCluster c;
    ClusterOptions co;
    co.servers = 2;
    co.workers = workers;
    ASSERT_TRUE(c.Start(co).ok());
    std::vector<Outcome> runs(workers);
    std::vector<std::thread> threads;
    for (int r = 0; r < workers; ++r)
      threads.emplace_back(TrainOne, std::cref(c), r, SmallModel(train_, test_, 64 / workers), &runs[r]);
    for (auto& t : threads) t.join();
    for (auto& r : runs) ASSERT_TRUE(r.status.ok()) << r.status.ToString() << "\n" << r.out;
    EXPECT_NE(runs[0].out.find("test AUC"), std::string::npos) << runs[0].out;
    EXPECT_EQ(runs[0].result.epochs_done, 2);
    EXPECT_GT(runs[0].result.auc, 0.6) << runs[0].out;  // it learned the planted rule
    models[workers - 1] = Model(c, SmallModel(train_, test_, 64), ids);
    if (HasFailure()) c.DumpLogs();
  }
  ASSERT_EQ(models[0].size(), models[1].size());
  ASSERT_FALSE(models[0].empty());
  double worst = 0;
  for (size_t i = 0; i < models[0].size(); ++i) worst = std::max(worst, std::fabs(double(models[0][i]) - models[1][i]));
  EXPECT_LT(worst, 1e-4) << "the largest difference between one worker of batch 64 and two of batch 32";
}

TEST_F(DlrmTest, AMalformedLineIsAnErrorNamingItOrSkippedAndCounted) {
  {
    std::ofstream f(train_, std::ios::app);
    f << "1\t2\t3\n";
  }
  LocalCluster c;
  ClusterOptions co;
  co.servers = 1;
  co.workers = 1;
  ASSERT_TRUE(c.Start(co).ok());
  Outcome failed;
  DlrmTrainOptions o = SmallModel(train_, test_, 64);
  o.epochs = 1;
  TrainOne(c, 0, o, &failed);
  EXPECT_EQ(failed.status.code(), Code::kInvalidArgument);
  EXPECT_NE(failed.status.message().find(train_ + ":1537: 3 fields, expected 40"), std::string::npos)
      << failed.status.ToString();
}

TEST_F(DlrmTest, SkippedLinesAreCountedAndTheRestTrains) {
  {
    std::ofstream f(train_, std::ios::app);
    f << "1\t2\t3\n";
  }
  LocalCluster c;
  ClusterOptions co;
  co.servers = 1;
  co.workers = 1;
  ASSERT_TRUE(c.Start(co).ok());
  Outcome run;
  DlrmTrainOptions o = SmallModel(train_, test_, 64);
  o.epochs = 1;
  o.read.skip_malformed = true;
  TrainOne(c, 0, o, &run);
  ASSERT_TRUE(run.status.ok()) << run.status.ToString();
  EXPECT_EQ(run.result.skipped, 1u);
  EXPECT_EQ(run.result.samples, 1536);
}

}  // namespace
}  // namespace shardps::worker
