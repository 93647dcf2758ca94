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
#include <string>
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
//
// Replica groups (docs/fault-tolerance.md, "Replicas"): the partitions are
// cut into groups — group g is the block Contiguous gives server g at the
// start of the job — and each group is held by `replicas` servers, its
// primary first. Workers send a group's requests to its primary only
// (`owner` is each partition's group's primary); the primary forwards what
// changes the group's state to the others, its backups. When a server
// dies, Promote() makes a backup of each of its groups the primary. With
// one replica a group is its server's block and nothing is forwarded.
struct ShardMap {
  static constexpr uint32_t kNone = 0xffffffffu;  // a replica slot whose server is lost

  uint64_t version = 0;
  std::vector<uint32_t> owner;                  // partition -> server serving it (its group's primary)
  std::vector<uint32_t> group;                  // partition -> replica group
  std::vector<std::vector<uint32_t>> replicas;  // group -> servers holding it, primary first
  // Re-replication (docs/fault-tolerance.md, "Re-replication and drains"):
  // group -> the server being filled with a copy of it (kNone: none; empty:
  // none anywhere). The last copy of replicas[g] feeds it the group's state,
  // then every input, without waiting for it; once filled it is appended
  // to replicas[g] (WithCopy). It serves nothing and never becomes the
  // primary before that.
  std::vector<uint32_t> joining;

  uint32_t partitions() const { return static_cast<uint32_t>(owner.size()); }
  uint32_t groups() const { return static_cast<uint32_t>(replicas.size()); }
  // The most copies any group has (the stride of the wire's replica lists).
  uint32_t ReplicaStride() const;
  // Contiguous blocks: server s owns partitions [s*P/S, (s+1)*P/S), so a
  // whole dense table is one contiguous row range per server; one replica.
  static ShardMap Contiguous(uint32_t partitions, uint32_t servers, uint64_t version);
  // `groups` contiguous blocks of partitions (0: one per server; servers <=
  // groups <= partitions), each on `copies` servers (1 <= copies <=
  // servers): group g's primary is server g*servers/groups (each server a
  // contiguous run of groups: with groups = servers, server g), its backups
  // the servers after it in rank order, those on another host than the
  // copies chosen so far first (`hosts`: server rank -> host; empty or
  // short: all different).
  static ShardMap Replicated(uint32_t partitions, uint32_t servers, uint32_t copies,
                             const std::vector<std::string>& hosts, uint64_t version, uint32_t groups = 0);
  // Partitions owned (served) by `server`, ascending.
  std::vector<uint32_t> OwnedBy(uint32_t server) const;
  // Partitions `server` holds a copy of (primary or backup), ascending.
  std::vector<uint32_t> HeldBy(uint32_t server) const;
  // Partitions of group g, ascending.
  std::vector<uint32_t> OfGroup(uint32_t g) const;
  // The group of partition p (a map without groups: its owner's block).
  uint32_t GroupOf(uint32_t p) const { return group.empty() ? owner[p] : group[p]; }
  // Group g's primary (kNone: every copy lost).
  uint32_t Primary(uint32_t g) const {
    if (replicas.empty()) return g;  // a map without groups: the blocks are the servers'
    return g < replicas.size() && !replicas[g].empty() ? replicas[g][0] : kNone;
  }
  // Group g's live backups, in order.
  std::vector<uint32_t> Backups(uint32_t g) const;
  // Whether `server` holds a copy of group g (a full one, or one being filled).
  bool Holds(uint32_t server, uint32_t g) const { return IsCopy(server, g) || Joining(g) == server; }
  // Whether `server` holds a full copy of group g (it is in replicas[g]).
  bool IsCopy(uint32_t server, uint32_t g) const;
  // The server being filled with a copy of group g (kNone: none).
  uint32_t Joining(uint32_t g) const { return g < joining.size() ? joining[g] : kNone; }
  // Full copies of group g.
  uint32_t Copies(uint32_t g) const {
    if (replicas.empty()) return 1;
    return g < replicas.size() && !replicas[g].empty() && replicas[g][0] != kNone
               ? static_cast<uint32_t>(replicas[g].size()) : 0;
  }
  // The copy that feeds `server`'s copy of group g: the one before it in
  // the chain, or for a copy being filled the last full copy (kNone: none,
  // it is the primary).
  uint32_t Feeder(uint32_t g, uint32_t server) const;
  // The map with `server` being filled with group g (kNone: no fill of g)
  // / with that copy full (appended to the chain, its fill over); version+1 each.
  ShardMap WithJoining(uint32_t g, uint32_t server) const;
  ShardMap WithCopy(uint32_t g, uint32_t server) const;
  // The map with `server` gone: it leaves every replica list, each group it
  // was primary of is served by its first backup, owner follows; version+1.
  // Groups left with no copy are listed in *lost (their primary kNone); a
  // fill into `server` is over, one from it goes on from the new last copy.
  ShardMap Without(uint32_t server, std::vector<uint32_t>* lost) const;
  // The map with `server`'s copy of group g gone (a move's end: the group
  // keeps its other copies; its primary, if it was that, is the next copy),
  // version+1. REQUIRES: g has another full copy.
  ShardMap WithoutCopy(uint32_t g, uint32_t server) const;
  // How many groups `server` holds (full copies and fills under way).
  uint32_t Load(uint32_t server) const;
};

}  // namespace shardps
