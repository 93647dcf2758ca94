// The Criteo TSV reader of shardps-worker (worker/data/criteo.h's
// ParseCriteoLine and CriteoKey) for Python trainers: one worker's batches
// of an epoch, parsed by a thread of its own a few batches ahead, handed
// out as (labels, dense features, keys) buffers. No Python in here: the
// binding (module.cc) releases the GIL around Next().
//
// Which batches: the log is read in chunks of chunk_batches * world * batch
// lines; each chunk's lines are shuffled by a permutation that depends only
// on (seed, epoch, chunk), the same on every worker; batch k of the epoch
// (k-th run of `batch` shuffled lines) goes to worker k % world, and only
// the first steps * world batches are dealt out, so every worker takes the
// same number of steps (what sync needs). Each worker parses only its own
// lines.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "shardps/status.h"

namespace shardps::worker {
struct CriteoExample;
}

namespace shardps::python {

struct CriteoReaderOptions {
  std::string path;
  uint32_t batch = 128;
  uint32_t rank = 0, world = 1;
  uint64_t rows = 1 << 20;   // each feature's hashed rows (CriteoKey); 0: a row per value
  int64_t steps = -1;        // batches for this worker; -1: lines / (batch * world)
  uint32_t chunk_batches = 64;
  uint64_t seed = 1, epoch = 1;
  uint32_t ahead = 4;        // batches parsed ahead of the trainer
  bool shuffle = true;       // false: the lines in file order (evaluation)
  bool last_partial = false; // with steps -1 and world 1: a last batch of fewer lines too (evaluation)
};

struct CriteoBatch {
  uint32_t size = 0;
  std::vector<float> labels;     // size
  std::vector<float> dense;      // size x 13: log(1 + max(x, 0)), missing 0
  std::vector<int64_t> keys;     // size x 26: CriteoKey (feature << 56 | row)
};

// Sizes `b` for `n` examples; PutExample writes example `e` as its row `j`
// (keys CriteoKey(e, f, rows)). Shared with PoolCriteoReader.
void ResizeBatch(uint32_t n, CriteoBatch* b);
void PutExample(const worker::CriteoExample& e, uint64_t rows, size_t j, CriteoBatch* b);

class CriteoReader {
 public:
  // Counts the file's lines (the steps), then starts the parsing thread.
  // Errors name the file (missing, unreadable) or the option.
  static Status Open(const CriteoReaderOptions& o, std::unique_ptr<CriteoReader>* out);
  ~CriteoReader();  // stops and joins the thread
  CriteoReader(const CriteoReader&) = delete;
  CriteoReader& operator=(const CriteoReader&) = delete;

  uint64_t lines() const { return lines_; }
  uint64_t steps() const { return steps_; }
  // The next batch (waits for it). False at the end; a parse error is
  // returned once, naming file, line and field, and ends the reading.
  Status Next(CriteoBatch* out, bool* got);

 private:
  explicit CriteoReader(const CriteoReaderOptions& o) : o_(o) {}
  void Run();
  Status ReadAll();
  bool Put(CriteoBatch b);  // false once stopping

  const CriteoReaderOptions o_;
  uint64_t lines_ = 0, steps_ = 0;
  std::thread thread_;
  std::mutex mu_;  // guards the rest
  std::condition_variable cv_;
  std::deque<CriteoBatch> ready_;
  Status error_;
  bool done_ = false, stopping_ = false;
};

}  // namespace shardps::python
