// The worker's training loop for the dense models (softmax regression and
// the MLP), as a unit: pulls, forward and backward on the device, pushes as
// backward produces them, clock ticks, the batches of each epoch (from the
// epoch's pool shared through the coordinator: one per clock under sync, a
// few at a time under bounded staleness and async),
// training while the bound holds the next parameters back, a straggler's
// slowdown, progress lines and the evaluation after each epoch.
// shardps-worker (worker_main.cc) parses flags, defines the tables and
// runs it; the sparse model's loop is worker/trainers/sparse_trainer.h.
//
// MlpTrainer is the step loop; each concern is a part of its own:
//   worker/data/batches.h       which batches an epoch trains (EpochBatches)
//   worker/dense_step/device_batch.h  the batch on the device (DeviceBatch)
//   worker/dense_step/layer_pulls.h   the pulls of each layer's parameters (LayerPulls)
//   worker/dense_step/pushes.h        gradients, pushes, the clock tick (GradientPushes)
//   worker/dense_step/param_loader.h  the parameters on the device, weight prediction (ParamLoader)
//   worker/dense_step/extra_batches.h batches trained while held back (ExtraBatches)
//   worker/trainers/epoch_report.h  the evaluation and the epoch lines (EpochReport)
//   worker/dense_step/step_policy.h   the decisions that read no sockets
//   worker/trainers/progress.h      progress lines and the CSV log
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "shardps/client.h"
#include "worker/data/batches.h"
#include "worker/data/data.h"
#include "worker/dense_step/device_batch.h"
#include "worker/dense_step/extra_batches.h"
#include "worker/dense_step/layer_pulls.h"
#include "worker/dense_step/param_loader.h"
#include "worker/dense_step/pushes.h"
#include "worker/dense_step/step_policy.h"
#include "worker/devices/device.h"
#include "worker/models/mlp.h"
#include "worker/trainers/epoch_report.h"
#include "worker/trainers/progress.h"

namespace shardps::worker {

struct TrainerOptions {
  int epochs = 10;
  int batch = 64;
  int max_steps = 0;  // per epoch and worker, 0 = all
  bool shuffle = true;
  uint64_t seed = 1;
  bool static_shards = false;  // own shard (every world-th example) instead of the pool
  int work_chunk = 8;
  int max_fill = 2;            // bounded: batches per clock trained while held back
  double fill_when_held = 0.5;  // ... once at least this fraction of the last 16 clocks were held back
  bool fill_fresh = true;      // ... on the newest values (Client::PullCurrent), not the ones at hand
  bool fill_at_once = true;    // push each at once (else with the next step, PushSteps)
  // Bounded (s >= 1) and async: when the next step's parameters are fetched
  // (under sync and s = 0 always after the tick).
  //  kPerLayer: each layer's pull right after its push, during backward: the
  //    servers handle it after this worker's step (one connection per server
  //    is in order), the pulls of the layers done first travel while the
  //    rest of backward runs.
  //  kEarly: every pull after forward, before backward: the most overlap, but
  //    the values miss this worker's own step (staleness >= 1 always).
  //  kLate: after every push and the tick.
  enum class PrefetchMode { kPerLayer, kEarly, kLate };
  PrefetchMode prefetch = PrefetchMode::kPerLayer;
  // Bounded staleness and async: each batch is computed on the parameters
  // extrapolated along their drift to where they are expected when its push
  // is applied (PredictionFactor); the lookahead k, 0: on the values pulled.
  double predict = 2.0;
  double slowdown = 1.0;       // > 1: this worker is a straggler
  double progress_sec = 2.0;
  bool evaluator = false;      // evaluates on `test` after each epoch
  std::string csv;             // evaluator: (time, epoch, loss, accuracy) rows
  FILE* out = stdout;          // progress and epoch lines
};

struct TrainResult {
  int epochs_done = 0;
  bool stopped = false;      // the job was asked to stop
  long batches = 0;          // trained by this worker
  uint64_t examples = 0;     // ... their examples
  long filled = 0;           // of them, while held back
  double final_accuracy = -1;  // evaluator: after the last epoch
  uint64_t push_staleness_max = 0;
  double push_staleness_mean = 0;
  double prediction = 0;     // bounded/async: how many updates ahead the last batch was computed (layer 0's weights)
  double seconds = 0;
};

// When a step fetches the next step's parameters, from the consistency
// model and the options.
struct FetchPlan {
  // Under bounded staleness (s >= 1) and async the next step's pull may be
  // sent before this step's pushes (Client::Prefetch); under sync it would
  // only be parked, and the evaluator wants the end-of-epoch model.
  bool ahead = false;
  // Weight prediction wherever a push may be stale: bounded (any s: the
  // other workers' pushes of the same clock land in between) and async.
  bool predicting = false;
  static FetchPlan For(Consistency c, uint32_t staleness, const TrainerOptions& o);

  struct Step {
    bool ahead = false;      // the next step's pulls go before this step's tick
    bool early = false;      // ... all of them after forward
    bool per_layer = false;  // ... each layer's behind its push
  };
  // A step's: the evaluator's last step of an epoch (a shard's) fetches after it.
  Step ForStep(TrainerOptions::PrefetchMode mode, bool evaluator, bool last_of_epoch) const;
};

// The examples of an epoch a worker trains from (pooled: all `rows`; else
// its shard's), cut to max_steps; InvalidArgument when less than one batch.
Status ExamplesPerWorker(int rows, int world, bool pooled, int max_steps, int batch, uint64_t* out);

// The step loop: Run() goes epoch by epoch (RunEpoch), batch by batch
// (TrainBatch: a Step on the next clock's parameters, an extra batch while
// held back, or an IdleStep), evaluating at each epoch's end (EndEpoch),
// and Finish()es with the totals.
//
// Thread: the caller of Run() owns every member (there is no evaluator
// thread: the evaluation runs on it between epochs). The client's I/O
// thread writes pulled values into pulls_ (and the fresh pulls of fills_)
// and reads the gradient buffers of pushes_ (and fills_) between a request's
// issue and its Wait() (see LayerPulls, GradientPushes).
class MlpTrainer {
 public:
  // `wt`/`bt`: the tables of each layer's weights and bias (created by the
  // caller, shaped as `mlp`'s layers). `test` may be null unless evaluating.
  MlpTrainer(Client& ps, Device& dev, Mlp& mlp, std::vector<Table> wt, std::vector<Table> bt, const Dataset& train,
             const Dataset* test, const TrainerOptions& o);
  MlpTrainer(const MlpTrainer&) = delete;
  MlpTrainer& operator=(const MlpTrainer&) = delete;

  // Trains o.epochs epochs (or until the job is asked to stop). InvalidArgument
  // if this worker's share of the data is less than one batch; the first
  // error of the client otherwise.
  Status Run(TrainResult* result);
  // The parameters of the last pull (after Run: the final model as read at
  // the end), layer by layer: weights then bias, float32.
  Status SaveParams(const std::string& path) const;

 private:
  struct EpochTotals {
    double loss = 0;  // the sum of its batches' mean losses
    int trained = 0;  // batches of it this worker trained
  };
  Status Prepare(uint64_t* examples);
  Status RunEpoch(int epoch, EpochBatches& batches, Progress& progress, TrainResult* r);
  Status TrainBatch(const Batch& b, int epoch, const EpochBatches& batches, Progress& progress, EpochTotals* t);
  Status Step(bool last_of_epoch, double* waited);
  Status AwaitParams(int64_t* min_clock, double* waited);
  void PushLayer(int l);
  Status IdleStep();
  void Straggle(double t0, double waited, bool fill) const;
  Status EndEpoch(int epoch, const EpochTotals& t, const EpochBatches& batches, TrainResult* r);
  Status Finish(const Progress& progress, TrainResult* r);

  Client& ps_;
  Device& dev_;
  Mlp& mlp_;
  const std::vector<Table> wt_, bt_;
  const Dataset& train_;
  const Dataset* test_;
  const TrainerOptions o_;
  const int rank_;
  int world_ = 1;  // workers, as of Run's start
  BatchSource source_ = BatchSource::kShard;
  bool pooled_ = false;
  FetchPlan plan_;
  DeviceBatch batch_;
  LayerPulls pulls_;  // the next step's parameters
  GradientPushes pushes_;
  ParamLoader params_;
  ExtraBatches fills_;
  EpochReport report_;
  RecentWaits waits_;          // of the steps' pulls
  bool have_params_ = false;   // a step has loaded pulled parameters
  int64_t stale_ = 0;          // the last step's staleness (clocks), for progress lines
  int64_t last_min_clock_ = 0;  // the slowest worker's clock as of the last step's pull
};

}  // namespace shardps::worker
