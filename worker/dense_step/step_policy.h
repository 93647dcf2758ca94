// The step loop's decisions that read no sockets (docs/consistency.md):
// whether the bound holds the next pull back, when to train an extra batch
// meanwhile, how far ahead to predict the parameters, how long a straggler
// sleeps, and the push-staleness figures. Plain values and small classes,
// tested without a cluster (worker/dense_step/step_policy_test.cc).
// Thread: each object is used by one thread (the trainer's).
#pragma once

#include <cstdint>
#include <vector>

#include "shardps/types.h"

namespace shardps::worker {

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

// Which batches are extra ones (--max-fill, --fill-when-held): trained
// while the bound holds the next clock's parameters back, at most
// `max_fill` per clock, and only while held back persistently (HoldHistory).
class FillPolicy {
 public:
  FillPolicy(int max_fill, double fill_when_held) : max_fill_(max_fill), holds_(fill_when_held) {}
  // Before each batch: whether it is an extra batch. `held`: the next
  // pull is held back and not answered yet; `have_params`: a step has
  // trained (the first batch of a clock is counted in the history, once).
  // An extra batch counts at once (fills_this_clock, filled).
  bool Decide(bool held, bool have_params);
  // A step on fresh parameters: a new clock's batches.
  void NewClock() { this_clock_ = 0; }
  // After an extra batch: whether another may follow at this clock.
  bool AnotherMayFollow() const { return this_clock_ < max_fill_; }
  // Whether the next clock's batch is likely an extra one, its pull being
  // held back (`held_next`): then its fresh values go out ahead.
  bool Expected(bool held_next) const { return max_fill_ > 0 && held_next && holds_.Persistent(); }
  int fills_this_clock() const { return this_clock_; }
  long filled() const { return filled_; }

 private:
  const int max_fill_;
  HoldHistory holds_;
  int this_clock_ = 0;  // extra batches since the last step
  long filled_ = 0;     // extra batches in all
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

// The staleness the servers measured for this worker's pushes: the largest,
// the mean over all, and the recent mean (tau, for the prediction).
class PushStaleness {
 public:
  void Add(uint64_t staleness);
  uint64_t max() const { return max_; }
  double mean() const { return static_cast<double>(sum_) / (n_ > 0 ? n_ : 1); }
  double tau() const { return recent_.mean(); }

 private:
  uint64_t max_ = 0, sum_ = 0, n_ = 0;
  StalenessMean recent_;
};

// A straggler (--slowdown k): the extra sleep after a step whose own share
// took `own` seconds (compute and pushes) when the quickest recent pull took
// `quickest_pull`: (own + quickest_pull) * (k - 1).
double StragglerSleep(double own, double quickest_pull, double slowdown);

// The waits for the last kSize steps' pulls, for StragglerSleep: a pull
// answered at once is what this worker's own share of a clock costs.
class RecentWaits {
 public:
  static constexpr int kSize = 32;
  void Add(double seconds) { waits_[next_++ % waits_.size()] = seconds; }
  // The quickest of the last kSize (1e9 before any).
  double Quickest() const;

 private:
  std::vector<double> waits_ = std::vector<double>(kSize, 1e9);
  size_t next_ = 0;
};

}  // namespace shardps::worker
