// A Criteo TSV log read for Python trainers the way shardps-worker reads it:
// its batches taken from the job's work pool (worker/data/batches.h's
// EpochBatches over Client::ClaimWork), so that under sync every worker
// takes the same steps and a dead worker's batch is trained by another,
// and under bounded staleness or async a fast worker trains more of the
// epoch. Each grant's lines are read and parsed here (worker/data/criteo.h's
// CriteoFile), in file order, as shardps-worker --model dlrm does. No
// Python in here: the binding (module.cc) releases the GIL around Next().
//
// Under sync a batch is claimed at its clock: Next() refuses a second batch
// before the client's clock moved on (the claim would get the same batch
// again). Where the pool has no batch for this worker at a clock but the
// epoch goes on, Next() ticks an empty clock itself (Client::ClockAsync,
// waited for by the next call: the reader ends without waiting for them)
// and claims at the next one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "client/python/criteo_reader.h"
#include "shardps/client.h"
#include "shardps/status.h"
#include "worker/data/batches.h"
#include "worker/data/criteo.h"

namespace shardps::python {

struct PoolReaderOptions {
  std::string path;
  uint32_t batch = 128;
  uint64_t rows = 1 << 20;  // CriteoKey's hashed rows per feature; 0: a row per value
  int epoch = 1;            // the pool's id, as shardps-worker's epochs
  uint32_t chunk = 4;       // bounded staleness and async: batches per claim
};

class PoolCriteoReader {
 public:
  // Indexes the file; `client` (a worker's) must outlive the reader.
  static Status Open(Client* client, const PoolReaderOptions& o, std::unique_ptr<PoolCriteoReader>* out);

  uint64_t lines() const { return file_->examples(); }
  // The next batch of this worker; *got false at the epoch's end (or once
  // the job was asked to stop). Errors: a claim's, a parse error naming
  // the file, line and field, a second batch at one clock under sync.
  Status Next(CriteoBatch* out, bool* got);
  // Examples the pool handed out in the epoch (after its end).
  uint64_t handed() const { return batches_->handed(); }

 private:
  PoolCriteoReader(Client* client, const PoolReaderOptions& o) : client_(client), o_(o) {}

  Client* const client_;
  const PoolReaderOptions o_;
  std::unique_ptr<worker::CriteoFile> file_;
  std::unique_ptr<worker::EpochBatches> batches_;
  bool per_clock_ = false;
  int64_t claimed_at_ = -1;          // the clock of the last per-clock claim
  std::vector<Request> idle_ticks_;  // empty clocks ticked, waited for at the next call
  std::vector<worker::CriteoExample> examples_;
};

}  // namespace shardps::python
