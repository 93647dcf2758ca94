// Chain: a snapshot and the snapshots it depends on. A snapshot of what
// changed (docs/snapshots.md) holds, per partition, either a full part
// (every row) or a part of what changed since an earlier snapshot (its
// `base`): the rows changed and the rows gone. A partition is read from
// the full part at the end of its chain, then each part of what changed
// on top, oldest first.
//
// Thread: any; a Chain is read-only once opened.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "server/snapshot/snapshot.h"

namespace shardps::snapshot {

class Chain {
 public:
  struct Snap {
    std::string dir;
    Manifest m;
  };
  struct Link {
    const Snap* snap;
    const PartEntry* part;
  };

  // Reads the manifest of `snap_dir` (or takes `head`, read already) and
  // of every snapshot its parts depend on, under the same root. Fails with
  // the missing or incomplete link named.
  Status Open(const std::string& snap_dir);
  Status Open(const std::string& snap_dir, Manifest head);

  const Snap& head() const { return snaps_.at(head_clock_); }
  // Every snapshot of the chain by clock, the head included.
  const std::map<int64_t, Snap>& snaps() const { return snaps_; }
  // The parts to read for (table, partition), the full one first; empty
  // when the head holds no part of it. Fails naming a link without it.
  Status Links(uint32_t table, uint32_t partition, std::vector<Link>* out) const;

 private:
  std::map<int64_t, Snap> snaps_;
  int64_t head_clock_ = 0;
};

// Verifies every snapshot of the chain (Verify), each once, and that every
// part of what changed has its base part; the message names the link.
Status VerifyChain(const Chain& c);

// Every row of (table, partition) as its chain makes it, in key order
// (rows recorded as gone left out). One full part is streamed; a chain of
// several parts is merged in memory first (one partition at a time).
Status ForEachChainRow(const Chain& c, uint32_t table, uint32_t partition,
                       const std::function<void(uint64_t row, const float* values, uint32_t stride)>& fn);

// Writes the model `c` reads as one full snapshot in `out_dir` (made; it
// must not hold a snapshot already): every partition's rows as its chain
// makes them, in the head's server files, with the head's manifest but
// full parts. A snapshot to copy elsewhere alone, or to keep when its
// chain goes.
Status Flatten(const Chain& c, const std::string& out_dir);

// The root a snapshot directory lies in ("." for a bare name).
std::string RootOf(const std::string& snap_dir);

}  // namespace shardps::snapshot
