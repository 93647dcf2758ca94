// The step loop's plan, without a cluster: when the next step's
// parameters are fetched and whether the batches are predicted, from the
// consistency model and the options, and how many examples a worker trains
// an epoch from. (The parts: batches_test, step_policy_test,
// device_batch_test, param_loader_test, epoch_report_test, progress_test;
// the whole loop against real servers: tests/trainer_test.cc.)
#include "worker/trainers/dlrm_trainer.h"
#include "worker/trainers/trainer.h"

#include <gtest/gtest.h>

namespace shardps::worker {
namespace {

using Mode = TrainerOptions::PrefetchMode;

TrainerOptions With(Mode m, double predict = 2.0) {
  TrainerOptions o;
  o.prefetch = m;
  o.predict = predict;
  return o;
}

TEST(FetchPlan, AheadUnderAsyncAndBoundedWithSlackNeverUnderSyncOrLate) {
  EXPECT_FALSE(FetchPlan::For(Consistency::kSync, 0, With(Mode::kPerLayer)).ahead);
  EXPECT_FALSE(FetchPlan::For(Consistency::kBounded, 0, With(Mode::kPerLayer)).ahead);  // s = 0: lock step
  EXPECT_TRUE(FetchPlan::For(Consistency::kBounded, 1, With(Mode::kPerLayer)).ahead);
  EXPECT_TRUE(FetchPlan::For(Consistency::kAsync, 0, With(Mode::kEarly)).ahead);
  EXPECT_FALSE(FetchPlan::For(Consistency::kAsync, 0, With(Mode::kLate)).ahead);
}

TEST(FetchPlan, PredictionWhereverAPushMayBeStaleUnlessOff) {
  EXPECT_FALSE(FetchPlan::For(Consistency::kSync, 0, With(Mode::kPerLayer)).predicting);
  EXPECT_TRUE(FetchPlan::For(Consistency::kBounded, 0, With(Mode::kPerLayer)).predicting);  // any s
  EXPECT_TRUE(FetchPlan::For(Consistency::kAsync, 0, With(Mode::kLate)).predicting);
  EXPECT_FALSE(FetchPlan::For(Consistency::kAsync, 0, With(Mode::kPerLayer, 0.0)).predicting);
}

TEST(FetchPlan, AStepsFetchFollowsTheModeButTheEvaluatorsLastWaits) {
  const FetchPlan p = FetchPlan::For(Consistency::kAsync, 0, With(Mode::kPerLayer));
  FetchPlan::Step s = p.ForStep(Mode::kPerLayer, false, false);
  EXPECT_TRUE(s.ahead);
  EXPECT_TRUE(s.per_layer);
  EXPECT_FALSE(s.early);
  s = p.ForStep(Mode::kEarly, true, false);
  EXPECT_TRUE(s.early);
  EXPECT_FALSE(s.per_layer);
  s = p.ForStep(Mode::kPerLayer, true, true);  // the end-of-epoch model for the evaluation
  EXPECT_FALSE(s.ahead || s.early || s.per_layer);
  s = p.ForStep(Mode::kPerLayer, false, true);  // only the evaluator waits
  EXPECT_TRUE(s.per_layer);
  s = FetchPlan::For(Consistency::kSync, 0, With(Mode::kEarly)).ForStep(Mode::kEarly, false, false);
  EXPECT_FALSE(s.ahead || s.early || s.per_layer);
}

TEST(Trainer, ExamplesPerWorkerArePoolOrShardCutToMaxSteps) {
  uint64_t n = 0;
  ASSERT_TRUE(ExamplesPerWorker(1000, 4, true, 0, 16, &n).ok());
  EXPECT_EQ(n, 1000u);
  ASSERT_TRUE(ExamplesPerWorker(1000, 4, false, 0, 16, &n).ok());
  EXPECT_EQ(n, 250u);
  ASSERT_TRUE(ExamplesPerWorker(1000, 4, false, 3, 16, &n).ok());
  EXPECT_EQ(n, 48u);
  ASSERT_TRUE(ExamplesPerWorker(1000, 4, true, 3, 16, &n).ok());
  EXPECT_EQ(n, 192u);
  ASSERT_TRUE(ExamplesPerWorker(1000, 0, false, 0, 16, &n).ok());  // no workers counted yet: all of it
  EXPECT_EQ(n, 1000u);
  Status s = ExamplesPerWorker(40, 4, false, 0, 16, &n);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "10 examples per worker is less than one batch of 16");
}

TEST(DlrmEvalBatch, ARequestedSizeIsKeptAndTheDefaultBoundsTheRowsBytes) {
  EXPECT_EQ(EvalBatch(100, 26, 256), 100);
  EXPECT_EQ(EvalBatch(0, 26, 16), 8192);                      // 13 MiB of rows: the usual 8192
  EXPECT_EQ(EvalBatch(0, 26, 256), (64 << 20) / (26 * 256 * 4));  // 2520
  EXPECT_LE(int64_t{EvalBatch(0, 26, 256)} * 26 * 256 * 4, int64_t{64} << 20);
  EXPECT_EQ(EvalBatch(0, 26, 4096), 157);
  EXPECT_EQ(EvalBatch(0, 1000, 4096), 64);  // never below 64
}

}  // namespace
}  // namespace shardps::worker
