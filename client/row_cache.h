// RowCache: rows of sparse tables a worker pulled recently, reused for a
// while under bounded staleness (ClientOptions.row_cache_bytes, off by
// default; docs/embeddings.md, "Worker side").
//
// A row pulled by a pull tagged clock c is served again to a pull tagged
// c' while c' - c <= s (the job's staleness bound): a cached row may lag by
// at most s clocks more than the bound already allows, and it misses the
// updates of those clocks, this worker's own pushes included. Never used
// under sync (a worker there must read every clock's update, so that N
// workers compute what one process would) nor async (no bound to keep).
// Least recently used rows go first when the cache is full.
//
// Thread-safety: every method takes the cache's mutex: caller threads look
// rows up while building a pull; the I/O thread stores a reply's rows.
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace shardps::detail {

class RowCache {
 public:
  explicit RowCache(uint64_t capacity_bytes) : capacity_(capacity_bytes) {}

  // Copies the row of `key` in table `table` into `out` (cols floats) and
  // returns true when one is cached from a pull tagged `clock` - `bound` or
  // later; counts a lookup, and a hit.
  bool Get(uint32_t table, uint64_t key, int64_t clock, uint32_t bound, uint32_t cols, float* out);
  // Stores (or refreshes) the row of `key` as read by a pull tagged `clock`.
  void Put(uint32_t table, uint64_t key, int64_t clock, const float* row, uint32_t cols);

  struct Stats {
    uint64_t lookups = 0, hits = 0, rows = 0, bytes = 0;
  };
  Stats stats() const;
  // Bytes a cached row of `cols` floats is counted as (values and bookkeeping).
  static uint64_t RowBytes(uint32_t cols) { return static_cast<uint64_t>(cols) * sizeof(float) + 64; }

 private:
  struct Key {
    uint32_t table;
    uint64_t id;
    bool operator==(const Key& o) const { return table == o.table && id == o.id; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  struct Entry {
    int64_t clock;
    std::vector<float> row;
    std::list<Key>::iterator lru;
  };
  void EvictFor(uint64_t bytes);  // REQUIRES mu_ held

  const uint64_t capacity_;
  mutable std::mutex mu_;  // guards everything below
  std::unordered_map<Key, Entry, KeyHash> rows_;
  std::list<Key> lru_;  // most recently used first
  uint64_t bytes_ = 0;
  uint64_t lookups_ = 0, hits_ = 0;
};

}  // namespace shardps::detail
