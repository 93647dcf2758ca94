// The server's side of snapshots, as the event loop drives SnapshotCut: when
// a cut is due (sync: at applied clocks; bounded and async: once every live
// worker passed its clock; with no live worker: at once), the coordinator's
// snapshot control, and the reports of written cuts. Restoring is
// TableSet's.
#include <algorithm>
#include <deque>

#include "common/base/log.h"
#include "common/codec/wire.h"
#include "server/server.h"

namespace shardps {

bool Server::CutDue(const Shard& sh, int64_t clock) const {
  return !view_.snapshot_root.empty() && sh.cut.DueAt(clock, view_.snapshot_every_clocks);
}

void Server::CutIfDue(Shard& sh, int64_t clock) {
  if (sh.primary && CutDue(sh, clock)) TakeCut(sh, clock);
}

void Server::MaybeCut(Shard& sh) {
  if (view_.snapshot_root.empty() || !view_.complete() || !sh.primary) return;
  if (!sh.clocks.any_live()) {
    // Nothing changes without live workers: every scheduled cut is exact now.
    if (const int64_t first = sh.cut.FirstScheduled(); first >= 0) TakeCut(sh, first);
    return;
  }
  if (sh.clocks.sync()) return;  // cut in Advance(), clock by clock
  if (const int64_t due = sh.cut.DueBehind(sh.clocks.MinClock(), view_.snapshot_every_clocks); due >= 0)
    TakeCut(sh, due);
}

void Server::TakeCut(Shard& sh, int64_t clock) {
  // The writer thread gets where to write with the job: it never reads
  // view_, which the event loop replaces on every cluster update. The file
  // is the group's (a server's own group has its rank).
  const int64_t label = view_.snapshot_clock_base + clock;
  sh.cut.Take(clock, sh.group, view_.snapshot_root, view_.snapshot_root + "/" + snapshot::DirName(label), label,
              view_.snapshot_full_every);
}

void Server::SendSnapshotReports() {
  for (auto& sh : shards_) {
    std::deque<CutDone> done;
    if (!sh || !sh->cut.TakeDone(&done)) continue;
  for (const auto& d : done) {
    const uint32_t group = sh->group;
    if (d.error.empty())
      LOG_INFO << "snapshot at clock " << d.clock << " written (" << d.bytes << " bytes)";
    else
      LOG_ERROR << "snapshot at clock " << d.clock << " failed: " << d.error;
    fbb_.Clear();
    std::vector<flatbuffers::Offset<wire::SnapshotFile>> files;
    files.push_back(wire::CreateSnapshotFile(fbb_, group, fbb_.CreateString(snapshot::ServerFileName(group)), d.bytes,
                                             d.checksum));
    std::vector<flatbuffers::Offset<wire::SnapshotPart>> parts;
    for (const auto& p : d.parts)
      parts.push_back(
          wire::CreateSnapshotPart(fbb_, p.table, p.partition, p.server, p.rows, p.checksum, p.base, p.deleted));
    auto body = wire::CreateSnapshotReport(fbb_, d.clock, fbb_.CreateVector(files), fbb_.CreateVector(parts),
                                           d.error.empty() ? 0 : fbb_.CreateString(d.error));
    wire::Fields f;
    f.type = wire::MsgType::SnapshotDone;
    f.request_id = coord_link_.next_request_id++;
    f.role = wire::Role::Server;
    f.rank = static_cast<int32_t>(rank_);
    f.clock = d.clock;
    f.group = static_cast<int32_t>(group);
    Coord().send(wire::Encode(fbb_, f, wire::Body::SnapshotReport, body.Union()), zmq::send_flags::dontwait);
  }
  }
}

void Server::HandleSnapshotControl(const wire::Header& h) {
  wire::Fields r;
  r.type = wire::MsgType::Reply;
  r.request_id = h.request_id();
  r.role = wire::Role::Server;
  r.rank = static_cast<int32_t>(rank_);
  // Where a cut taken now would be (the furthest of the groups it serves):
  // sync cuts at applied clocks, the others once every live worker passed
  // the clock.
  const std::vector<Shard*> mine = Primaries();
  int64_t at = 0, last_cut = -1;
  bool quiescent = true;
  for (Shard* sh : mine) {
    at = std::max(at, sh->clocks.sync() ? sh->clocks.applied_clock() : sh->clocks.MinClock());
    last_cut = std::max(last_cut, sh->cut.last_cut());
    quiescent &= !sh->clocks.any_live();  // no live workers: nothing will change
  }
  r.min_clock = at;
  Status s;
  if (view_.snapshot_root.empty()) {
    s = Status::InvalidArgument("this job has no snapshot directory (coordinator --snapshot-dir)");
  } else if (h.type() == wire::MsgType::SnapshotAt) {
    // A cut at its own clock is taken at once (sync: before that clock is
    // applied; the others: the workers are at most the staleness bound
    // ahead of it); one it took already (periodic) is reported as taken.
    const int64_t c = h.clock();
    if (c < last_cut || (!quiescent && c < at))
      s = Status::StaleClock("server " + std::to_string(rank_) + " is already at clock " + std::to_string(at) +
                             ", past the cut at " + std::to_string(c));
    else if (c > last_cut)
      for (Shard* sh : mine) sh->cut.Schedule(c);
  } else if (h.type() == wire::MsgType::SnapshotCancel) {
    for (Shard* sh : mine) sh->cut.Cancel(h.clock());
  }
  r.error = wire::ToWire(s.code());
  r.message = s.message();
  Coord().send(wire::EncodeSimple(fbb_, r), zmq::send_flags::dontwait);
  if (s.ok() && h.type() == wire::MsgType::SnapshotAt)
    for (Shard* sh : mine) {
      if (sh->clocks.sync() && sh->clocks.any_live()) CutIfDue(*sh, sh->clocks.applied_clock());
      MaybeCut(*sh);
    }
}

}  // namespace shardps
