#include "worker/data/batches.h"

#include <algorithm>
#include <string>

namespace shardps::worker {

BatchSource ChooseBatchSource(Consistency c, bool static_shards) {
  if (static_shards) return BatchSource::kShard;
  return c == Consistency::kSync ? BatchSource::kPerClock : BatchSource::kPool;
}

uint64_t CapToMaxSteps(uint64_t examples, int max_steps, int batch, int world, bool pooled) {
  if (max_steps <= 0) return examples;
  return std::min<uint64_t>(examples, static_cast<uint64_t>(max_steps) * batch * (pooled ? world : 1));
}

EpochBatches::EpochBatches(ClaimFn claim, StopFn stop, BatchSource source, uint64_t examples, int batch, int chunk)
    : claim_(std::move(claim)),
      stop_(std::move(stop)),
      source_(source),
      // A shard trains whole batches only (every worker the same number of
      // steps); a pool's last batch may be partial.
      examples_(source == BatchSource::kShard ? examples / batch * batch : examples),
      batch_(batch),
      chunk_(std::max(1, chunk)) {}

void EpochBatches::Start(int epoch) {
  epoch_ = epoch;
  next_ = 0;
  handed_ = 0;
  grant_ = WorkRange{};
}

Status EpochBatches::Run(int epoch, const std::function<Status()>& idle,
                         const std::function<Status(const Batch&)>& train) {
  Start(epoch);
  for (;;) {
    Batch b;
    SHARDPS_RETURN_IF_ERROR(Next(&b));
    if (b.idle) {
      SHARDPS_RETURN_IF_ERROR(idle());
      continue;
    }
    if (b.n == 0) return Status::OK();
    SHARDPS_RETURN_IF_ERROR(train(b));
  }
}

Status EpochBatches::Next(Batch* b) {
  *b = Batch{};
  if (stop_()) return Status::OK();
  b->epoch = epoch_;
  if (source_ == BatchSource::kShard) {
    if (next_ >= examples_) return Status::OK();
    b->first = next_;
    b->n = batch_;
    next_ += batch_;
    handed_ = next_;
    return Status::OK();
  }
  return source_ == BatchSource::kPerClock ? NextPerClock(b) : NextPooled(b);
}

bool EpochBatches::PeekNext(Batch* b) const {
  *b = Batch{};
  b->epoch = epoch_;
  if (stop_()) return false;
  if (source_ == BatchSource::kShard) {
    if (next_ >= examples_) return false;
    b->first = next_;
    b->n = batch_;
    return true;
  }
  if (source_ != BatchSource::kPool || grant_.empty()) return false;
  b->first = grant_.begin;
  b->n = static_cast<int>(std::min<uint64_t>(batch_, grant_.size()));
  return true;
}

Status EpochBatches::NextPerClock(Batch* b) {
  ClaimOptions o;
  o.per_clock = true;
  WorkRange g;
  SHARDPS_RETURN_IF_ERROR(claim_(static_cast<uint64_t>(epoch_), examples_, static_cast<uint32_t>(batch_), o, &g));
  if (g.empty()) {
    b->idle = g.wait;
    if (!g.wait) handed_ = g.handed;
    return Status::OK();
  }
  if (g.end > examples_ || g.pool == 0 || g.pool > static_cast<uint64_t>(epoch_))
    return Status::Internal("the coordinator granted examples [" + std::to_string(g.begin) + ", " +
                            std::to_string(g.end) + ") of epoch " + std::to_string(g.pool) + " to a worker in epoch " +
                            std::to_string(epoch_) + " of " + std::to_string(examples_) + " examples");
  b->epoch = static_cast<int>(g.pool);
  b->first = g.begin;
  b->n = static_cast<int>(g.size());
  return Status::OK();
}

Status EpochBatches::NextPooled(Batch* b) {
  if (grant_.empty()) {
    ClaimOptions o;
    o.granule = static_cast<uint32_t>(batch_);
    SHARDPS_RETURN_IF_ERROR(claim_(static_cast<uint64_t>(epoch_), examples_,
                                   static_cast<uint32_t>(std::min<uint64_t>(UINT32_MAX, uint64_t{1} * chunk_ * batch_)),
                                   o, &grant_));
    if (grant_.empty()) {
      handed_ = grant_.handed;
      return Status::OK();
    }
  }
  b->first = grant_.begin;
  b->n = static_cast<int>(std::min<uint64_t>(batch_, grant_.size()));
  grant_.begin += b->n;
  return Status::OK();
}

}  // namespace shardps::worker
