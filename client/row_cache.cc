#include "client/row_cache.h"

#include <algorithm>
#include <cstring>

#include "common/cluster/partition.h"

namespace shardps::detail {

size_t RowCache::KeyHash::operator()(const Key& k) const {
  return static_cast<size_t>(Mix64(k.id ^ (static_cast<uint64_t>(k.table) << 40)));
}

bool RowCache::Get(uint32_t table, uint64_t key, int64_t clock, uint32_t bound, uint32_t cols, float* out) {
  std::lock_guard<std::mutex> lock(mu_);
  ++lookups_;
  auto it = rows_.find(Key{table, key});
  if (it == rows_.end() || it->second.row.size() != cols || clock - it->second.clock > static_cast<int64_t>(bound))
    return false;
  std::memcpy(out, it->second.row.data(), cols * sizeof(float));
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  ++hits_;
  return true;
}

void RowCache::EvictFor(uint64_t bytes) {
  while (!lru_.empty() && bytes_ + bytes > capacity_) {
    auto it = rows_.find(lru_.back());
    bytes_ -= RowBytes(static_cast<uint32_t>(it->second.row.size()));
    rows_.erase(it);
    lru_.pop_back();
  }
}

void RowCache::Put(uint32_t table, uint64_t key, int64_t clock, const float* row, uint32_t cols) {
  const uint64_t need = RowBytes(cols);
  if (need > capacity_) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = rows_.find(Key{table, key});
  if (it != rows_.end()) {
    if (clock < it->second.clock) return;  // an older read arriving late keeps the newer row
    it->second.clock = clock;
    it->second.row.assign(row, row + cols);
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    return;
  }
  EvictFor(need);
  lru_.push_front(Key{table, key});
  rows_.emplace(Key{table, key}, Entry{clock, std::vector<float>(row, row + cols), lru_.begin()});
  bytes_ += need;
}

RowCache::Stats RowCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {lookups_, hits_, rows_.size(), bytes_};
}

}  // namespace shardps::detail
