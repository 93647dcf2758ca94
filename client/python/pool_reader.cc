#include "client/python/pool_reader.h"

#include <utility>

namespace shardps::python {

Status PoolCriteoReader::Open(Client* client, const PoolReaderOptions& o, std::unique_ptr<PoolCriteoReader>* out) {
  if (o.batch == 0) return Status::InvalidArgument("batch must be at least 1");
  if (o.epoch < 1) return Status::InvalidArgument("epoch must be at least 1 (the work pool's id), got " +
                                                  std::to_string(o.epoch));
  if (o.chunk == 0) return Status::InvalidArgument("chunk_batches must be at least 1");
  if (client->rank() < 0) return Status::InvalidArgument("a work-pool reader needs a worker's client (an observer has no work)");
  std::unique_ptr<PoolCriteoReader> r(new PoolCriteoReader(client, o));
  SHARDPS_RETURN_IF_ERROR(worker::CriteoFile::Open(o.path, {}, &r->file_));
  const worker::BatchSource source = worker::ChooseBatchSource(client->consistency(), false);
  r->per_clock_ = source == worker::BatchSource::kPerClock;
  r->batches_ = std::make_unique<worker::EpochBatches>(
      [client](uint64_t pool, uint64_t total, uint32_t max, const ClaimOptions& co, WorkRange* w) {
        return client->ClaimWork(pool, total, max, co, w);
      },
      [client] { return client->StopRequested(); }, source, r->file_->examples(), static_cast<int>(o.batch),
      static_cast<int>(o.chunk));
  r->batches_->Start(o.epoch);
  *out = std::move(r);
  return Status::OK();
}

Status PoolCriteoReader::Next(CriteoBatch* out, bool* got) {
  *got = false;
  for (auto& t : idle_ticks_) SHARDPS_RETURN_IF_ERROR(t.Wait());
  idle_ticks_.clear();
  worker::Batch b;
  for (;;) {
    if (per_clock_) {
      if (client_->clock() == claimed_at_)
        return Status::InvalidArgument(
            "under sync each batch is claimed at its clock, and this worker's clock is still " +
            std::to_string(claimed_at_) + ": take the next batch after the step's clock (or inside "
            "ShardedModel.step(ahead=...), which runs behind the tick)");
      claimed_at_ = client_->clock();
    }
    SHARDPS_RETURN_IF_ERROR(batches_->Next(&b));
    if (!b.idle) break;
    // No batch for this worker at this clock, the epoch not over: an empty
    // clock (the others' step is the mean over those that trained).
    idle_ticks_.push_back(client_->ClockAsync(false));
  }
  if (b.n == 0) return Status::OK();
  examples_.clear();
  SHARDPS_RETURN_IF_ERROR(file_->Read(b.first, b.first + static_cast<uint64_t>(b.n), &examples_));
  ResizeBatch(static_cast<uint32_t>(examples_.size()), out);
  for (size_t j = 0; j < examples_.size(); ++j) PutExample(examples_[j], o_.rows, j, out);
  *got = true;
  return Status::OK();
}

}  // namespace shardps::python
