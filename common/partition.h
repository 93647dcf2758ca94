// Virtual partitions and the shard map.
//
// Every key of every table maps to one of P virtual partitions (P is much
// larger than the number of servers); the versioned shard map assigns each
// partition to a server. A partition can therefore move between servers
// (a server joins, leaves, or a snapshot is restored onto another number of
// servers) without rehashing any key.
//  - dense tables: partition p holds rows [RowBegin(p), RowBegin(p+1)),
//    contiguous ranges of nearly equal size;
//  - sparse tables: partition of id = Mix64(id) % P.
#pragma once

#include <cstdint>
#include <vector>

namespace shardps {

// A strong 64-bit mixer (splitmix64 finaliser).
inline uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

inline uint32_t PartitionOfId(uint64_t id, uint32_t partitions) {
  return static_cast<uint32_t>(Mix64(id) % partitions);
}

// First row of dense partition p (p may equal `partitions`: returns rows).
inline uint64_t PartitionRowBegin(uint32_t p, uint64_t rows, uint32_t partitions) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(p) * rows) / partitions);
}

// The partition holding dense row `row` (REQUIRES: row < rows).
inline uint32_t PartitionOfRow(uint64_t row, uint64_t rows, uint32_t partitions) {
  return static_cast<uint32_t>(
      ((static_cast<unsigned __int128>(row) + 1) * partitions - 1) / rows);
}

// partition -> server rank, with a version bumped on every change.
struct ShardMap {
  uint64_t version = 0;
  std::vector<uint32_t> owner;

  uint32_t partitions() const { return static_cast<uint32_t>(owner.size()); }
  // Contiguous blocks: server s owns partitions [s*P/S, (s+1)*P/S), so a
  // whole dense table is one contiguous row range per server.
  static ShardMap Contiguous(uint32_t partitions, uint32_t servers, uint64_t version);
  // Partitions owned by `server`, ascending.
  std::vector<uint32_t> OwnedBy(uint32_t server) const;
};

}  // namespace shardps
