// The worker's training loop for the dense models (softmax regression and
// the MLP), as a unit: pulls, forward and backward on the device, pushes as
// backward produces them, clock ticks, the batches of each epoch (from the
// epoch's pool shared through the coordinator: one per clock under sync, a
// few at a time under bounded staleness and async),
// training while the bound holds the next parameters back, a straggler's
// slowdown, progress lines and the evaluation after each epoch.
// shardps-worker (worker_main.cc) only parses flags and wires it up.
#pragma once

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "shardps/client.h"
#include "worker/data.h"
#include "worker/device.h"
#include "worker/mlp.h"

namespace shardps::worker {

double NowSeconds();  // steady clock

// Under bounded staleness (pooled), whether the next clock's pull will be
// held: as of the last pull the slowest worker was more than `staleness`
// clocks behind this worker's clock.
bool HeldBack(Consistency c, int64_t clock, uint32_t staleness, int64_t last_min_clock);

// Whether the bound holds this worker back persistently (a straggler in
// the job), from the last kWindow clocks: Add() once per clock whether its
// pull was held when the batch was ready. Extra batches are trained only
// then: two workers of the same speed on a busy machine are held back now
// and then, and extra batches then cost more accuracy per epoch than the
// short waits they save (docs/consistency.md).
class HoldHistory {
 public:
  static constexpr int kWindow = 16;
  explicit HoldHistory(double min_fraction) : min_fraction_(min_fraction) {}
  void Add(bool held);
  // At least min_fraction of a full window was held (0: always true).
  bool Persistent() const;

 private:
  double min_fraction_;
  uint32_t bits_ = 0;  // the last kWindow clocks, newest in bit 0
  int n_ = 0;          // clocks seen, up to kWindow
};

// Weight prediction (bounded staleness, async; docs/consistency.md,
// "Predicted parameters"): a gradient is computed on the parameters
// extrapolated to where they are expected to be when its push is applied,
// w + a * (w - w_prev), w_prev the values loaded for the worker's previous
// batch. The rows took `between` updates from w_prev to w (the pulls'
// stamps, PullStamp::UpdatesSince), and a push lands about tau updates
// after its pull (tau: the recent staleness of this worker's pushes):
// a = k * tau / between, k the lookahead (--predict; 1: the expected
// position, 2 (the default): twice as far, measured best for SGD, momentum
// and Adam; 0: off), at most k (never further than k times the drift seen:
// `between` may be a single update, the worker's own). 0 when nothing is
// stale or `between` is not known. The batch is then a * between updates
// ahead of the values pulled.
double PredictionFactor(double k, double tau, int64_t between);

// Recent push staleness (updates), for the prediction: an exponential mean
// over the last ~50 pushes' replies.
class StalenessMean {
 public:
  void Add(uint64_t staleness) { mean_ += 0.02 * (static_cast<double>(staleness) - mean_); }
  double mean() const { return mean_; }

 private:
  double mean_ = 0;
};

// A straggler (--slowdown k): the extra sleep after a step whose own share
// took `own` seconds (compute and pushes) when the quickest recent pull took
// `quickest_pull`: (own + quickest_pull) * (k - 1).
double StragglerSleep(double own, double quickest_pull, double slowdown);

// Where a worker's batches come from (docs/worker.md, "Batches"):
// - kPerClock (sync): one batch per clock from the epoch's pool (units =
//   examples), the clock's batches cut in rank order over the live workers
//   — together the batch of a single process — each handed out exactly
//   once: a dead worker's batch is trained by another;
// - kPool (bounded staleness, async): a few batches at a time from the
//   epoch's pool, so a fast worker trains more of the epoch than a slow one;
// - kShard (--static-shards): every world-th example of the epoch's order.
enum class BatchSource { kShard, kPool, kPerClock };
BatchSource ChooseBatchSource(Consistency c, bool static_shards);

struct Batch {
  int epoch = 0;       // the epoch whose example order it indexes (a dead worker's may be an earlier one)
  uint64_t first = 0;  // position of its first example in that order (kShard: in this worker's shard)
  int n = 0;           // examples; 0: none
  bool idle = false;   // kPerClock: no batch for this clock but the epoch goes on: tick an empty clock
};

// The batches one worker trains in an epoch.
class EpochBatches {
 public:
  // claim: Client::ClaimWork; stop: Client::StopRequested.
  using ClaimFn = std::function<Status(uint64_t, uint64_t, uint32_t, const ClaimOptions&, WorkRange*)>;
  using StopFn = std::function<bool()>;
  // `examples`: the epoch's (kShard: this worker's shard's); `chunk`: kPool
  // claims up to this many batches at a time.
  EpochBatches(ClaimFn claim, StopFn stop, BatchSource source, uint64_t examples, int batch, int chunk);
  void Start(int epoch);
  // The next batch; n == 0 and !idle when the epoch is done or the job was
  // asked to stop (stopped() says which). A failed claim is returned.
  // kPerClock: exactly one call per clock (the claim names the clock).
  Status Next(Batch* b);
  bool stopped() const { return stop_(); }
  uint64_t examples() const { return examples_; }
  // Batches of a whole epoch (for progress lines).
  int steps() const { return static_cast<int>((examples_ + batch_ - 1) / batch_); }
  // After the epoch: the examples its pool handed out and no dead worker
  // handed back (kShard: those this worker trained).
  uint64_t handed() const { return handed_; }

 private:
  ClaimFn claim_;
  StopFn stop_;
  const BatchSource source_;
  const uint64_t examples_;
  const int batch_, chunk_;
  int epoch_ = 0;
  uint64_t next_ = 0, handed_ = 0;
  WorkRange grant_;
};

// Whether an epoch's batches come from a pool shared through the coordinator.
inline bool SharesBatches(BatchSource s) { return s != BatchSource::kShard; }

// (time, epoch, loss, test accuracy) rows, after a header line.
class CsvLog {
 public:
  // An empty path writes nothing.
  Status Open(const std::string& path);
  void Row(double t, int epoch, double loss, double accuracy);

 private:
  std::ofstream f_;
};

// A progress line every `interval` seconds to `out`.
class Progress {
 public:
  Progress(double interval, FILE* out = stdout) : interval_(interval), out_(out) {}
  void Step(int rank, int epoch, int step, int steps, long n, double loss, int64_t stale);
  long samples() const { return samples_; }

 private:
  double interval_;
  FILE* out_;
  double last_ = NowSeconds();
  long samples_ = 0, since_samples_ = 0;
  double loss_sum_ = 0;
  long loss_n_ = 0;
  int64_t max_stale_ = 0;
};

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
  void IssuePulls(bool ahead);
  void IssueLayerPulls(int l, bool ahead);
  void IssueFreshLayer(int l);
  Status DropFresh();
  Status WaitPulls(int64_t* min_clock);
  Status DrainPushes();
  void LoadBatch(const Batch& b);
  Status IdleStep();
  void PushLayer(int l, const float* gw, const float* gb);
  Status FlushFills();
  Status FillStep();
  Status Step(bool last_of_epoch, double* waited);
  Status EndEpoch(int epoch, double epoch_loss, int trained, const EpochBatches& batches, TrainResult* r);
  double Evaluate();
  void LoadParams(const std::vector<Request>& from, const std::vector<HostBuffer>& w,
                  const std::vector<HostBuffer>& b, bool to_train);

  Client& ps_;
  Device& dev_;
  Mlp& mlp_;
  const std::vector<Table> wt_, bt_;
  const Dataset& train_;
  const Dataset* test_;
  const TrainerOptions o_;
  const int L_, B_, rank_;
  BatchSource source_ = BatchSource::kShard;
  bool pooled_ = false, prefetch_ahead_ = false;
  int n_ = 0;  // examples of the batch on the device
  std::vector<uint32_t> order_;  // the current epoch's example order (kShard: this worker's shard)
  int order_epoch_ = 0;
  std::vector<uint32_t> other_order_;  // an earlier epoch's (a dead worker's batch)
  int other_epoch_ = 0;

  std::vector<HostBuffer> pw_, pb_, gw_, gb_;  // pulled parameters, gradients (borrowed by pushes)
  HostBuffer hx_, hy_;
  DeviceBuffer dx_, dy_, dstats_;
  std::vector<Request> pulls_, pushes_;
  Request tick_;
  std::vector<PullStamp> on_device_;  // versions of the parameters on the device, per table (w0, b0, w1, ...)
  // Batches trained while held back: their gradients and the versions they
  // were computed on (fill_w_[f][l]).
  std::vector<std::vector<HostBuffer>> fill_w_, fill_b_;
  std::vector<std::vector<PullStamp>> fill_based_;
  std::vector<HostBuffer> fpw_, fpb_;  // fill_fresh: the newest parameters, per layer
  std::vector<Request> fresh_;        // ... their pulls (fresh_[2l], [2l + 1]), sent ahead of the extra batch
  int pending_fills_ = 0;     // with-next: fills not pushed yet
  int fills_this_clock_ = 0;
  HoldHistory holds_;
  // predict: the values loaded for the previous batch (device), per layer.
  bool predicting_ = false;
  std::vector<DeviceBuffer> prev_w_, prev_b_;
  std::vector<PullStamp> prev_stamps_;  // ... and their stamps, as on_device_
  StalenessMean tau_;
  double last_ahead_ = 0;
  bool have_params_ = false;
  int64_t stale_ = 0, last_min_clock_ = 0;
  std::vector<double> recent_waits_;
  size_t wait_i_ = 0;
  long filled_ = 0;
  uint64_t stale_max_ = 0, stale_sum_ = 0, stale_n_ = 0;
  CsvLog csv_;
  double t_start_ = 0;
};

}  // namespace shardps::worker
