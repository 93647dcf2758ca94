// The worker's training loop for the dense models (softmax regression and
// the MLP), as a unit: pulls, forward and backward on the device, pushes as
// backward produces them, clock ticks, the batches of each epoch (a fixed
// shard under sync, a shared pool under bounded staleness and async),
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

// A straggler (--slowdown k): the extra sleep after a step whose own share
// took `own` seconds (compute and pushes) when the quickest recent pull took
// `quickest_pull`: (own + quickest_pull) * (k - 1).
double StragglerSleep(double own, double quickest_pull, double slowdown);

// The batches one worker trains in an epoch, by their position in it: all
// `steps` of its own shard, or (pooled) those it claims from the epoch's
// shared pool of `steps` batches, `chunk` at a time.
class EpochBatches {
 public:
  // claim(pool, total, max, out): Client::ClaimWork; stop(): StopRequested.
  using ClaimFn = std::function<Status(uint64_t, uint64_t, uint32_t, WorkRange*)>;
  using StopFn = std::function<bool()>;
  EpochBatches(ClaimFn claim, StopFn stop, bool pooled, int steps, int chunk)
      : claim_(std::move(claim)), stop_(std::move(stop)), pooled_(pooled), steps_(steps), chunk_(chunk) {}
  void Start(int epoch);
  // The next batch of the epoch; -1 when the epoch is done or the job was
  // asked to stop (stopped() says which). A failed claim is returned.
  Status Next(int* step);
  bool stopped() const { return stop_(); }

 private:
  ClaimFn claim_;
  StopFn stop_;
  const bool pooled_;
  const int steps_, chunk_;
  int epoch_ = 0, next_ = 0;
  WorkRange grant_;
};

// Bounded and async workers share each epoch's batches through a work pool
// (docs/worker.md, "Stragglers"); sync keeps fixed shards, which its exact
// equivalence to one process needs.
inline bool SharesBatches(Consistency c, bool static_shards) { return c != Consistency::kSync && !static_shards; }

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
  bool static_shards = false;  // bounded/async: own shard instead of the pool
  int work_chunk = 8;
  int max_fill = 2;            // bounded: batches per clock trained while held back
  bool fill_at_once = true;    // push each at once (else with the next step, PushSteps)
  bool late_prefetch = false;  // bounded/async: pull after the pushes, not during backward
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
  long filled = 0;           // of them, while held back
  double final_accuracy = -1;  // evaluator: after the last epoch
  uint64_t push_staleness_max = 0;
  double push_staleness_mean = 0;
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
  Status WaitPulls(int64_t* min_clock);
  Status DrainPushes();
  void LoadBatch(int step);
  void PushLayer(int l, const float* gw, const float* gb);
  Status FlushFills();
  Status FillStep();
  Status Step(bool last_of_epoch, double* waited);
  Status EndEpoch(int epoch, double epoch_loss, int trained, TrainResult* r);
  double Evaluate();
  void UploadPulled();

  Client& ps_;
  Device& dev_;
  Mlp& mlp_;
  const std::vector<Table> wt_, bt_;
  const Dataset& train_;
  const Dataset* test_;
  const TrainerOptions o_;
  const int L_, B_, rank_;
  bool pooled_ = false, prefetch_early_ = false;
  int steps_ = 0;
  std::vector<uint32_t> order_;

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
  int pending_fills_ = 0;     // with-next: fills not pushed yet
  int fills_this_clock_ = 0;
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
