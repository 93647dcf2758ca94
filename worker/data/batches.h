// Where a worker's batches come from, epoch by epoch (docs/worker.md,
// "Batches"): the epoch's pool shared through the coordinator or this
// worker's own shard. Claims go through an injected function, so the
// decisions are tested without a cluster (worker/data/batches_test.cc).
#pragma once

#include <cstdint>
#include <functional>

#include "shardps/client.h"

namespace shardps::worker {

// - kPerClock (sync): one batch per clock from the epoch's pool (units =
//   examples), the clock's batches cut in rank order over the live workers
//   — together the batch of a single process — each handed out exactly
//   once: a dead worker's batch is trained by another;
// - kPool (bounded staleness, async): a few batches at a time from the
//   epoch's pool, so a fast worker trains more of the epoch than a slow one;
// - kShard (--static-shards): every world-th example of the epoch's order.
enum class BatchSource { kShard, kPool, kPerClock };
BatchSource ChooseBatchSource(Consistency c, bool static_shards);

// Whether an epoch's batches come from a pool shared through the coordinator.
inline bool SharesBatches(BatchSource s) { return s != BatchSource::kShard; }

// `examples` (the epoch's, or this worker's shard's) cut to --max-steps
// (per epoch and worker; 0: no cut): at most max_steps batches for each
// worker, so a shared pool holds world x that many.
uint64_t CapToMaxSteps(uint64_t examples, int max_steps, int batch, int world, bool pooled);

struct Batch {
  int epoch = 0;       // the epoch whose example order it indexes (a dead worker's may be an earlier one)
  uint64_t first = 0;  // position of its first example in that order (kShard: in this worker's shard)
  int n = 0;           // examples; 0: none
  bool idle = false;   // kPerClock: no batch for this clock but the epoch goes on: tick an empty clock
};

// The batches one worker trains in an epoch.
// Thread: one (the trainer's); claim_ and stop_ are called on it.
class EpochBatches {
 public:
  // claim: Client::ClaimWork; stop: Client::StopRequested.
  using ClaimFn = std::function<Status(uint64_t, uint64_t, uint32_t, const ClaimOptions&, WorkRange*)>;
  using StopFn = std::function<bool()>;
  // `examples`: the epoch's (kShard: this worker's shard's); `chunk`: kPool
  // claims up to this many batches at a time.
  EpochBatches(ClaimFn claim, StopFn stop, BatchSource source, uint64_t examples, int batch, int chunk);
  void Start(int epoch);
  // Start(epoch), then the epoch's batches: idle() at each idle clock,
  // train(b) for each batch, until the epoch is done or the job was asked
  // to stop (stopped() says which). The first error of a claim, idle or train.
  Status Run(int epoch, const std::function<Status()>& idle, const std::function<Status(const Batch&)>& train);
  // The next batch; n == 0 and !idle when the epoch is done or the job was
  // asked to stop (stopped() says which). A failed claim is returned.
  // kPerClock: exactly one call per clock (the claim names the clock).
  Status Next(Batch* b);
  // The batch the next Next() will return, when it is known without a
  // claim: the rest of a pooled grant, or a shard's next; false otherwise
  // (under sync each clock's batch is claimed at that clock).
  bool PeekNext(Batch* b) const;
  bool stopped() const { return stop_(); }
  uint64_t examples() const { return examples_; }
  // Batches of a whole epoch (for progress lines).
  int steps() const { return static_cast<int>((examples_ + batch_ - 1) / batch_); }
  // After the epoch: the examples its pool handed out and no dead worker
  // handed back (kShard: those this worker trained).
  uint64_t handed() const { return handed_; }

 private:
  Status NextPerClock(Batch* b);
  Status NextPooled(Batch* b);

  ClaimFn claim_;
  StopFn stop_;
  const BatchSource source_;
  const uint64_t examples_;
  const int batch_, chunk_;
  int epoch_ = 0;
  uint64_t next_ = 0, handed_ = 0;
  WorkRange grant_;  // kPool: what is left of the last claim
};

}  // namespace shardps::worker
