// The sparse model's training loop: logistic regression over hashed click
// features (the synthetic click log, worker/data/data.h), one sparse table of
// one weight per feature id and the bias. Each batch pulls only the rows it
// touches, pushes their gradients and ticks; the batches of each epoch come
// from its pool (one per clock under sync, a few at a time under bounded
// staleness and async) or this worker's shard; the evaluating worker tests
// the model on a held-out stream after each epoch. Nothing in it exits the
// process: shardps-worker (worker_main.cc) maps its Status to a message and
// an exit code.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <unordered_map>
#include <vector>

#include "shardps/client.h"
#include "worker/data/batches.h"
#include "worker/data/data.h"
#include "worker/trainers/epoch_report.h"
#include "worker/trainers/progress.h"

namespace shardps::worker {

// The key of the bias row.
inline constexpr uint64_t kSparseBias = ~0ull;

// The model's table: sparse, one column, `optimizer` at `lr`.
TableSpec SparseLrTableSpec(OptimizerKind optimizer, float lr);

// The examples of batch `b` from the click log's training stream: pooled,
// b's positions are the examples' indices; a shard's position p is example
// rank + world * p.
void GatherClicks(const ClickLogOptions& co, const Batch& b, bool pooled, int rank, int world, ClickBatch* out);

// The rows a batch touches: the bias first, then each feature id once, in
// the order first seen; slot: a key's position in keys.
void BatchKeys(const ClickBatch& batch, std::vector<uint64_t>* keys, std::unordered_map<uint64_t, uint32_t>* slot);

// The logistic loss of `batch` with the weights vals[slot[id]] (each
// feature's weight times feature_scale, plus the bias vals[0]): returns the
// summed loss and writes d(mean loss)/d(vals) into grads (keys' size).
double LogisticGradient(const ClickBatch& batch, const std::unordered_map<uint64_t, uint32_t>& slot,
                        const std::vector<float>& vals, float feature_scale, std::vector<float>* grads);

// The rows a test set reads: its feature ids and the bias, sorted, once each.
std::vector<uint64_t> TestKeys(const ClickBatch& test);

// The share of `test` the weights `w` (by key, as TestKeys) classify right.
double ClickAccuracy(const ClickBatch& test, const std::unordered_map<uint64_t, float>& w, float feature_scale);

struct SparseLrOptions {
  int epochs = 10;
  int batch = 64;
  int max_steps = 0;           // per epoch and worker, 0 = all
  bool static_shards = false;  // own shard (every world-th example) instead of the pool
  int work_chunk = 8;
  double progress_sec = 2.0;
  OptimizerKind optimizer = OptimizerKind::kAdam;
  float lr = 0.001f;
  ClickLogOptions clicks;      // the click log (its seed: --seed)
  uint64_t examples = 1'000'000;  // training examples per epoch
  int eval_examples = 20000;      // test examples
  bool evaluator = false;      // tests the model after each epoch
  std::string csv;             // evaluator: (time, epoch, loss, accuracy) rows
  FILE* out = stdout;          // progress and epoch lines
};

struct SparseLrResult {
  int epochs_done = 0;
  bool stopped = false;        // the job was asked to stop
  double final_accuracy = -1;  // evaluator: after the last epoch it trained
  long samples = 0;            // trained by this worker
  double seconds = 0;
};

// The loop: CreateTable(), OpenCsv(), then Run() goes epoch by epoch
// (RunEpoch), batch by batch (TrainBatch), evaluating at each epoch's end
// (EndEpoch).
// Thread: the caller owns every member. The client's I/O thread writes a
// pull's values into vals_ and reads a push's keys_/grads_ until the
// request's Wait() returned (each is waited on at once).
class SparseLrTrainer {
 public:
  SparseLrTrainer(Client& ps, const SparseLrOptions& o);
  SparseLrTrainer(const SparseLrTrainer&) = delete;
  SparseLrTrainer& operator=(const SparseLrTrainer&) = delete;

  // Defines the model's table: the client's error.
  Status CreateTable();
  // The evaluator's CSV log: InvalidArgument if it cannot be written.
  Status OpenCsv() { return report_.Open(o_.evaluator ? o_.csv : ""); }
  // REQUIRES: CreateTable() and OpenCsv() returned OK. Trains o.epochs
  // epochs (or until the job is asked to stop); the first error of the
  // client.
  Status Run(SparseLrResult* result);

 private:
  struct EpochTotals {
    double loss = 0;  // the sum of its batches' mean losses
    int trained = 0;  // batches of it this worker trained
  };
  Status RunEpoch(int epoch, EpochBatches& batches, Progress& progress, SparseLrResult* r);
  Status TrainBatch(const Batch& b, int epoch, const EpochBatches& batches, Progress& progress, EpochTotals* t);
  Status EndEpoch(int epoch, const EpochTotals& t, const EpochBatches& batches, SparseLrResult* r);

  Client& ps_;
  const SparseLrOptions o_;
  const int rank_, world_;
  const float feature_scale_;
  const bool pooled_;
  Table w_;
  EpochReport report_;
  ClickBatch batch_;  // the batch being trained
  std::vector<uint64_t> keys_;
  std::unordered_map<uint64_t, uint32_t> slot_;
  std::vector<float> vals_, grads_;
};

}  // namespace shardps::worker
