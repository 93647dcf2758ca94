// The server's side of snapshots, as the event loop drives SnapshotCut: when
// a cut is due (sync: at applied clocks; bounded and async: once every live
// worker passed its clock; with no live worker: at once), the coordinator's
// snapshot control, and the reports of written cuts. Restoring is
// TableSet's.
#include <deque>

#include "common/log.h"
#include "common/wire.h"
#include "server/server.h"

namespace shardps {

bool Server::CutDue(int64_t clock) const {
  return !view_.snapshot_root.empty() && cut_.DueAt(clock, view_.snapshot_every_clocks);
}

void Server::CutIfDue(int64_t clock) {
  if (CutDue(clock)) TakeCut(clock);
}

void Server::MaybeCut() {
  if (view_.snapshot_root.empty() || !view_.complete()) return;
  if (!clocks_.any_live()) {
    // Nothing changes without live workers: every scheduled cut is exact now.
    if (const int64_t first = cut_.FirstScheduled(); first >= 0) TakeCut(first);
    return;
  }
  if (clocks_.sync()) return;  // cut in Advance(), clock by clock
  if (const int64_t due = cut_.DueBehind(clocks_.MinClock(), view_.snapshot_every_clocks); due >= 0) TakeCut(due);
}

void Server::TakeCut(int64_t clock) {
  // The writer thread gets where to write with the job: it never reads
  // view_, which the event loop replaces on every cluster update.
  cut_.Take(clock, rank_, view_.snapshot_root,
            view_.snapshot_root + "/" + snapshot::DirName(view_.snapshot_clock_base + clock));
}

void Server::SendSnapshotReports() {
  std::deque<CutDone> done;
  if (!cut_.TakeDone(&done)) return;
  for (const auto& d : done) {
    if (d.error.empty())
      LOG_INFO << "snapshot at clock " << d.clock << " written (" << d.bytes << " bytes)";
    else
      LOG_ERROR << "snapshot at clock " << d.clock << " failed: " << d.error;
    fbb_.Clear();
    std::vector<flatbuffers::Offset<wire::SnapshotFile>> files;
    files.push_back(wire::CreateSnapshotFile(fbb_, rank_, fbb_.CreateString(snapshot::ServerFileName(rank_)), d.bytes,
                                             d.checksum));
    std::vector<flatbuffers::Offset<wire::SnapshotPart>> parts;
    for (const auto& p : d.parts)
      parts.push_back(wire::CreateSnapshotPart(fbb_, p.table, p.partition, p.server, p.rows, p.checksum));
    auto body = wire::CreateSnapshotReport(fbb_, d.clock, fbb_.CreateVector(files), fbb_.CreateVector(parts),
                                           d.error.empty() ? 0 : fbb_.CreateString(d.error));
    wire::Fields f;
    f.type = wire::MsgType::SnapshotDone;
    f.request_id = next_request_id_++;
    f.role = wire::Role::Server;
    f.rank = static_cast<int32_t>(rank_);
    f.clock = d.clock;
    coord_.send(wire::Encode(fbb_, f, wire::Body::SnapshotReport, body.Union()), zmq::send_flags::dontwait);
  }
}

void Server::HandleSnapshotControl(const wire::Header& h) {
  wire::Fields r;
  r.type = wire::MsgType::Reply;
  r.request_id = h.request_id();
  r.role = wire::Role::Server;
  r.rank = static_cast<int32_t>(rank_);
  // Where a cut taken now would be: sync cuts at applied clocks, the others
  // once every live worker passed the clock.
  const int64_t at = clocks_.sync() ? clocks_.applied_clock() : clocks_.MinClock();
  const bool quiescent = !clocks_.any_live();  // no live workers: nothing will change
  r.min_clock = at;
  Status s;
  if (view_.snapshot_root.empty()) {
    s = Status::InvalidArgument("this job has no snapshot directory (coordinator --snapshot-dir)");
  } else if (h.type() == wire::MsgType::SnapshotAt) {
    const int64_t c = h.clock();
    if (c <= cut_.last_cut() || (!quiescent && c < at) || (!quiescent && !clocks_.sync() && c <= at))
      s = Status::StaleClock("server " + std::to_string(rank_) + " is already at clock " + std::to_string(at) +
                             ", past the cut at " + std::to_string(c));
    else
      cut_.Schedule(c);
  } else if (h.type() == wire::MsgType::SnapshotCancel) {
    cut_.Cancel(h.clock());
  }
  r.error = wire::ToWire(s.code());
  r.message = s.message();
  coord_.send(wire::EncodeSimple(fbb_, r), zmq::send_flags::dontwait);
  if (s.ok() && h.type() == wire::MsgType::SnapshotAt) {
    if (clocks_.sync() && clocks_.any_live()) CutIfDue(clocks_.applied_clock());
    MaybeCut();
  }
}

}  // namespace shardps
