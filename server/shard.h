// Shard: one replica group as a server holds it (docs/fault-tolerance.md,
// "Replicas"): the group's consistency model (its worker clocks, held sync
// pushes, parked pulls), its delay-compensation pulls, its snapshot cuts,
// and its place in the replication stream. The rows themselves live in
// the server's TableSet, which holds every partition of every group the
// server has a copy of.
//
// A primary serves the group's requests. With backups, every input that
// changes the group's state (a push, a tick, a join, a live-worker change,
// a pull kept for delay compensation) is forwarded down the chain of its
// copies (the primary feeds its first backup, each backup the next), in the
// order the primary took it, numbered 1, 2, ... (fseq); a backup applies
// the same inputs in the same order with the same code, so its rows and
// optimizer state stay bit for bit the primary's. A reply that follows
// from an input (its acknowledgement, a pull answered after it) leaves
// only once every backup has applied that input (a backup acknowledges
// upstream what it and every copy after it applied), so nothing a worker
// was told can be lost with the primary. A backup sends nothing to
// workers; when its primary dies, the coordinator's new map makes it the
// primary, and when the copy it feeds dies it feeds the next one, sending
// again what that one may lack.
//
// With one copy per group a server holds one Shard, its own group, and no
// stream exists: requests are handled exactly as without replication.
//
// Thread: the server's event loop owns it; no locks (the cut's writer
// thread shares only CutWriter's queues).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "server/consistency/dc_kept.h"
#include "server/consistency/worker_clocks.h"
#include "server/snapshot/snapshot_cut.h"

namespace shardps {

class Shard {
 public:
  Shard(uint32_t group, const std::vector<std::unique_ptr<ServerTable>>& tables, uint64_t held_bytes,
        Millis snapshot_write_delay, uint64_t version_tag)
      : group(group), clocks(held_bytes), cut(tables, snapshot_write_delay), version_tag(version_tag) {}

  const uint32_t group;
  bool primary = false;   // serves the group's requests; else a backup fed by the primary's stream
  bool left = false;      // no longer held (a map change): its rows stay, nothing is served or fed
  // Its copy leaves (a move: the coordinator's Drain for this group): data
  // requests are dropped (clients send them again to the group's primary
  // in the next map), and the copies after it may refuse its stream.
  bool leaving = false;
  int32_t early_fill_from = -1;  // left: the server whose fill into it came before the map (kept early)
  WorkerClocks clocks;
  DcKept dc;
  SnapshotCut cut;        // a primary's cuts of the group's partitions
  // The top bits of every version handed out for the group's rows: the
  // primary's (a backup takes its primary's from the stream), so a worker's
  // base version stays valid across a fail-over.
  uint64_t version_tag;

  // ---- The stream, sending side: the primary, and with three or more
  // copies each backup but the last (a chain: each copy feeds the next in
  // the map's order, and acknowledges an input upstream once every copy
  // after it has it).
  // A reply held until every backup applied input `fseq`.
  struct HeldReply {
    uint64_t fseq;
    std::vector<zmq::message_t> frames;  // routing id first
  };
  static constexpr uint32_t kNoCopy = 0xffffffffu;
  uint32_t next = kNoCopy;             // the copy it feeds: the next in the map's order (kNoCopy: it is the last)
  bool feeds() const { return next != kNoCopy; }
  uint64_t sent = 0;                   // fseq of the last input forwarded (a backup's: as it came)
  // The last fseq `next` and every copy after it applied. When `next`
  // dies the value carries over to the copy after it (which had it too).
  uint64_t next_acked = 0;
  // Inputs forwarded and not yet acknowledged, kept while a copy after the
  // fed one exists: if the fed one dies, they go again to the next (which
  // skips those it has).
  struct Kept {
    uint64_t fseq;
    std::vector<zmq::message_t> frames;  // header and payload, as forwarded
  };
  bool keep = false;
  std::deque<Kept> kept;
  std::deque<HeldReply> held;          // in the order made
  bool hello_sent = false;             // the stream's first message (the version tag) went out
  uint64_t membership_sent = 0;        // the membership version last forwarded
  // ---- Re-replication (docs/fault-tolerance.md, "Re-replication and
  // drains"): the last copy feeding a copy being filled (`next` is the
  // map's joining server). It is sent the group's state (FillBegin, a
  // FillPart per table partition, FillEnd), each at the stream's place it
  // was taken at, and then every input; nothing waits for its
  // acknowledgements until its FillEnd is sent (filling()).
  struct FillPart {
    uint32_t table, partition;
  };
  struct FillOut {
    bool active = false;         // `next` is being filled
    std::deque<FillPart> todo;   // parts not sent yet
    uint64_t sent = 0;           // parts sent
    uint64_t acked = 0;          // parts the copy installed (its acknowledgements' `seq`)
    uint64_t bytes = 0;          // bytes of the parts sent
    bool end_sent = false;
    Clock::time_point start{};
  } fill;
  // Until its FillEnd is sent, the copy being filled is not waited for;
  // from then on it is, like any next copy (the coordinator may make it a
  // full copy as soon as it has that FillEnd: every reply after it must
  // wait for the copy, or the source's death could lose what it answered).
  bool filling() const { return fill.active && !fill.end_sent; }
  // The copy being filled: not `done` from its FillBegin to its FillEnd
  // (until then it has parts of the group's rows only).
  struct FillIn {
    bool done = true;
    bool begun = false;
    uint64_t parts = 0;  // parts installed
    Clock::time_point start{};
    bool failed = false;  // a part was refused (the coordinator was told): the rest is dropped
  } filled;
  // The last fseq every backup applied (sent when there is none); a copy
  // being filled is not waited for.
  uint64_t AckedByAll() const { return feeds() && !filling() ? std::min(sent, next_acked) : sent; }
  // Moves the replies every backup is far enough for into *out.
  void TakeReleasable(std::vector<std::vector<zmq::message_t>>* out) {
    const uint64_t all = AckedByAll();
    while (!held.empty() && held.front().fseq <= all) {
      out->push_back(std::move(held.front().frames));
      held.pop_front();
    }
  }

  // ---- The stream, backup side.
  uint64_t applied = 0;     // fseq of the last input applied from the primary
  std::string upstream_id;  // the routing id the stream comes from (acknowledgements go there)
  uint64_t acked_up = 0;    // the last fseq acknowledged upstream
  // What may be acknowledged upstream: what this copy applied, and (when
  // it feeds another) what every copy after it has.
  uint64_t Ackable() const { return feeds() && !filling() ? std::min(applied, next_acked) : applied; }
};

}  // namespace shardps
