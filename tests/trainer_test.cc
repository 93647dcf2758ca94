// The training loop (worker/trainers/trainer.h) against a real coordinator and real
// servers on loopback: two MlpTrainers in threads train a small synthetic
// problem on the CPU, under sync (fixed shards, every worker every step) and
// under bounded staleness with a straggler (a shared pool: every batch of
// every epoch trained exactly once between them).
#include <cblas.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <thread>

#include "tests/cluster.h"
#include "tests/table_spec.h"
#include "worker/trainers/trainer.h"

namespace shardps::worker {
namespace {

using testing::ClusterOptions;
using testing::LocalCluster;

// `rows` examples of 8 features in 4 classes: class c is feature c set
// high, plus noise; linearly separable.
Dataset Synthetic(int rows, unsigned seed) {
  Dataset d;
  d.rows = rows;
  d.cols = 8;
  d.classes = 4;
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 0.2f);
  for (int i = 0; i < rows; ++i) {
    const int c = i % 4;
    for (int j = 0; j < d.cols; ++j) d.x.push_back((j == c ? 1.0f : 0.0f) + noise(rng));
    d.y.push_back(static_cast<float>(c));
  }
  return d;
}

struct Outcome {
  Status status;
  TrainResult result;
  std::string out;
};

// One worker: connects, defines the model's tables, trains.
void TrainOne(const LocalCluster& c, int rank, TrainerOptions o, const Dataset& train, const Dataset& test, Outcome* run) {
  auto ps = testing::ConnectClient(c, ClientRole::kWorker, rank);
  if (!ps) {
    run->status = Status::Unavailable("no connection");
    return;
  }
  auto dev = MakeCpuDevice();
  Mlp mlp(dev.get(), {8, 16, 4});
  std::vector<Table> wt(2), bt(2);
  for (int l = 0; l < 2; ++l) {
    const auto rows = static_cast<uint64_t>(mlp.dims()[l]);
    const auto cols = static_cast<uint32_t>(mlp.dims()[l + 1]);
    TableSpec w = testing::Dense("t.w" + std::to_string(l), rows, cols)
                      .Normal(0, std::sqrt(2.0f / mlp.dims()[l]))
                      .Seed(5 + l)
                      .Adam(0.01f);
    TableSpec b = testing::Dense("t.b" + std::to_string(l), 1, cols).Seed(5 + l).Adam(0.01f);
    if (Status s = ps->CreateTable(w, &wt[l]); !s.ok()) return void(run->status = s);
    if (Status s = ps->CreateTable(b, &bt[l]); !s.ok()) return void(run->status = s);
  }
  FILE* out = std::tmpfile();
  o.out = out;
  o.evaluator = rank == 0;
  MlpTrainer trainer(*ps, *dev, mlp, wt, bt, train, &test, o);
  run->status = trainer.Run(&run->result);
  std::rewind(out);
  char buf[1 << 16];
  size_t n = std::fread(buf, 1, sizeof buf, out);
  run->out.assign(buf, n);
  std::fclose(out);
  (void)ps->Close();
}

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override { openblas_set_num_threads(1); }  // as shardps-worker: one core per worker
  void TearDown() override {
    if (HasFailure()) cluster_.DumpLogs();
  }
  LocalCluster cluster_;
};

TEST_F(TrainerTest, SyncTwoWorkersTrainTheirShardsAndLearn) {
  ClusterOptions co;
  co.servers = 2;
  co.workers = 2;
  ASSERT_TRUE(cluster_.Start(co).ok());
  const Dataset train = Synthetic(512, 1), test = Synthetic(200, 2);
  TrainerOptions o;
  o.epochs = 3;
  o.batch = 16;
  o.progress_sec = 1000;
  Outcome r0, r1;
  std::thread t1(TrainOne, std::cref(cluster_), 1, o, std::cref(train), std::cref(test), &r1);
  TrainOne(cluster_, 0, o, train, test, &r0);
  t1.join();
  ASSERT_TRUE(r0.status.ok()) << r0.status.ToString() << r0.out;
  ASSERT_TRUE(r1.status.ok()) << r1.status.ToString() << r1.out;
  // Each trains its half: 256 examples, 16 batches per epoch.
  EXPECT_EQ(r0.result.batches, 3 * 16);
  EXPECT_EQ(r1.result.batches, 3 * 16);
  EXPECT_EQ(r0.result.epochs_done, 3);
  EXPECT_EQ(r0.result.filled, 0);
  EXPECT_EQ(r0.result.push_staleness_max, 0u);  // sync: nothing is stale
  EXPECT_GT(r0.result.final_accuracy, 0.9) << r0.out;
  EXPECT_LT(r1.result.final_accuracy, 0);  // only rank 0 evaluates
  EXPECT_NE(r0.out.find("worker 0 | epoch 3 done"), std::string::npos) << r0.out;
}

TEST_F(TrainerTest, BoundedWithAStragglerTrainsEveryBatchOnceBetweenThem) {
  ClusterOptions co;
  co.servers = 2;
  co.workers = 2;
  co.consistency = "bounded";
  co.staleness = 1;
  ASSERT_TRUE(cluster_.Start(co).ok());
  const Dataset train = Synthetic(512, 3), test = Synthetic(200, 4);
  TrainerOptions o;
  o.epochs = 2;
  o.batch = 16;
  o.work_chunk = 2;
  o.progress_sec = 1000;
  TrainerOptions slow = o;
  slow.slowdown = 3.0;
  Outcome r0, r1;
  std::thread t1(TrainOne, std::cref(cluster_), 1, slow, std::cref(train), std::cref(test), &r1);
  TrainOne(cluster_, 0, o, train, test, &r0);
  t1.join();
  ASSERT_TRUE(r0.status.ok()) << r0.status.ToString() << r0.out;
  ASSERT_TRUE(r1.status.ok()) << r1.status.ToString() << r1.out;
  // The pool of 32 batches per epoch, each trained once by one of them.
  EXPECT_EQ(r0.result.batches + r1.result.batches, 2 * 32) << r0.out << r1.out;
  EXPECT_GT(r0.result.batches, 0);
  EXPECT_GT(r1.result.batches, 0);
  EXPECT_GT(r0.result.final_accuracy, 0.8) << r0.out;
}

// One worker under async, so every update a push could have missed is its
// own: with the next step's pulls sent behind each layer's push (the
// default) no push is stale; sent after forward, before the pushes, every
// push after the first of an epoch misses exactly its own previous step.
Outcome TrainAlone(LocalCluster& cluster, TrainerOptions::PrefetchMode mode, double predict = 1.0) {
  ClusterOptions co;
  co.servers = 2;
  co.workers = 1;
  co.consistency = "async";
  Outcome r;
  if (Status s = cluster.Start(co); !s.ok()) return r.status = s, r;
  const Dataset train = Synthetic(512, 5), test = Synthetic(200, 6);
  TrainerOptions o;
  o.epochs = 2;
  o.batch = 16;
  o.progress_sec = 1000;
  o.prefetch = mode;
  o.predict = predict;
  TrainOne(cluster, 0, o, train, test, &r);
  return r;
}

TEST_F(TrainerTest, AsyncPerLayerPrefetchReadsTheWorkersOwnStep) {
  const Outcome r = TrainAlone(cluster_, TrainerOptions::PrefetchMode::kPerLayer);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString() << r.out;
  EXPECT_EQ(r.result.batches, 2 * 32);
  EXPECT_EQ(r.result.push_staleness_max, 0u) << r.out;
  EXPECT_GT(r.result.final_accuracy, 0.9) << r.out;
  EXPECT_EQ(r.result.prediction, 0.0) << r.out;  // nothing stale: nothing to predict
}

std::string EpochLines(const std::string& out) {  // "| epoch N done | ... | test accuracy A" per epoch
  std::string lines;
  for (size_t at = out.find("| epoch "); at != std::string::npos; at = out.find("| epoch ", at + 1))
    lines += out.substr(at, out.find("% |", at) - at) + "\n";
  return lines;
}

// One worker alone with the prefetch `mode`, with weight prediction (k = 1)
// and without it, each on a cluster of its own.
std::pair<Outcome, Outcome> WithAndWithoutPrediction(LocalCluster& cluster, TrainerOptions::PrefetchMode mode) {
  std::pair<Outcome, Outcome> r;
  r.first = TrainAlone(cluster, mode, 1.0);
  LocalCluster other;
  r.second = TrainAlone(other, mode, 0.0);
  EXPECT_TRUE(r.first.status.ok()) << r.first.status.ToString() << r.first.out;
  EXPECT_TRUE(r.second.status.ok()) << r.second.status.ToString() << r.second.out;
  return r;
}

// Weight prediction extrapolates by the staleness share of the drift: with
// no stale push it leaves the values pulled alone, and the run is the same
// one, loss for loss, as without it.
TEST_F(TrainerTest, PredictionChangesNothingWhenNoPushIsStale) {
  const auto [with, without] = WithAndWithoutPrediction(cluster_, TrainerOptions::PrefetchMode::kPerLayer);
  ASSERT_FALSE(HasFailure());
  EXPECT_EQ(with.result.final_accuracy, without.result.final_accuracy);
  EXPECT_FALSE(EpochLines(with.out).empty()) << with.out;
  EXPECT_EQ(EpochLines(with.out), EpochLines(without.out));
  EXPECT_NE(with.out.find("computed 0.00 updates ahead"), std::string::npos) << with.out;
  EXPECT_EQ(without.out.find("updates ahead"), std::string::npos) << without.out;
}

// With every push 1 stale (the early prefetch) the batches are computed on
// extrapolated values: the run is not the one on the values pulled.
TEST_F(TrainerTest, PredictionMovesTheValuesTrainedOnWhenPushesAreStale) {
  const auto [with, without] = WithAndWithoutPrediction(cluster_, TrainerOptions::PrefetchMode::kEarly);
  ASSERT_FALSE(HasFailure());
  ASSERT_FALSE(EpochLines(with.out).empty()) << with.out;
  EXPECT_NE(EpochLines(with.out), EpochLines(without.out));
  EXPECT_GT(with.result.final_accuracy, 0.9) << with.out;
}

TEST_F(TrainerTest, AsyncEarlyPrefetchMissesTheWorkersOwnStep) {
  const Outcome r = TrainAlone(cluster_, TrainerOptions::PrefetchMode::kEarly);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString() << r.out;
  EXPECT_EQ(r.result.push_staleness_max, 1u) << r.out;
  // 31 of each epoch's 32 pushes are 1 stale (the first follows a fresh pull).
  EXPECT_NEAR(r.result.push_staleness_mean, 31.0 / 32.0, 1e-9) << r.out;
  EXPECT_GT(r.result.final_accuracy, 0.9) << r.out;
  // Every push lands one update after its pull, and a load is one update
  // after the one before: the batches were computed about one update ahead
  // (the staleness mean starts at 0 and nears 1; k = 1 caps it at 1).
  EXPECT_GT(r.result.prediction, 0.9) << r.out;
  EXPECT_LE(r.result.prediction, 1.0) << r.out;
}

TEST_F(TrainerTest, TooLittleDataForOneBatchIsAClearError) {
  ClusterOptions co;
  co.servers = 1;
  co.workers = 1;
  ASSERT_TRUE(cluster_.Start(co).ok());
  const Dataset train = Synthetic(8, 1), test = Synthetic(8, 2);
  TrainerOptions o;
  o.batch = 16;
  Outcome r;
  TrainOne(cluster_, 0, o, train, test, &r);
  EXPECT_EQ(r.status.code(), Code::kInvalidArgument) << r.status.ToString();
  EXPECT_NE(r.status.message().find("8 examples per worker is less than one batch of 16"), std::string::npos)
      << r.status.ToString();
}

}  // namespace
}  // namespace shardps::worker
