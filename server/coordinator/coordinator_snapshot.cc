// The coordinator's side of snapshots, restore and rollback: the messages
// fed to the SnapshotScheduler and what it decided sent out; an ended
// snapshot's manifest written last (the job's tables, shard map and where
// its work resumes); choosing what to restore; rolling the job back.
#include <chrono>

#include "common/base/log.h"
#include "common/codec/wire.h"
#include "server/coordinator/coordinator.h"

namespace shardps {

SnapshotScheduler::Servers Coordinator::SnapshotTargets() {
  return {members_.RegisteredServers(), &next_update_id_, !members_.LiveWorkers().empty()};
}

void Coordinator::Apply(SnapshotScheduler::Effects& e) {
  for (auto& ended : e.ended) FinishSnapshot(ended);
  for (const auto& a : e.asks) {
    wire::Fields f;
    f.type = a.type;
    f.request_id = a.request_id;
    f.clock = a.clock;
    Reply(members_.servers()[a.server].routing_id, wire::EncodeSimple(fbb_, f));
  }
}

void Coordinator::HandleSnapshotNow(const std::string& from, const wire::Header& h) {
  if (opts_.snapshot_dir.empty())
    return ReplyError(from, h.request_id(),
                      Status::InvalidArgument("this job has no snapshot directory (--snapshot-dir)"));
  if (!tables_.complete())
    return ReplyError(from, h.request_id(), Status::NotReady("not every server has registered yet"));
  const Waiter w{from, h.request_id()};
  SnapshotScheduler::Effects e;
  snaps_.StartOnDemand(&w, SnapshotTargets(), Clock::now(), &e);
  Apply(e);
}

void Coordinator::HandleReply(const std::string& from, const wire::Header& h) {
  SnapshotScheduler::Effects e;
  if (!snaps_.OnReply(h.request_id(), wire::ReplyStatus(&h), h.min_clock(), SnapshotTargets(), &e))
    return HandleAck(from, h);
  Apply(e);
}

void Coordinator::HandleSnapshotDone(const std::string& from, const wire::Header& h) {
  // A report is a replica group's part (a server reports for each group it
  // serves; without replicas, its own: its rank).
  const int server = members_.ServerRankOf(from);
  const int rank = server < 0 ? -1 : h.group() >= 0 ? h.group() : server;
  wire::Fields ok;
  ok.request_id = h.request_id();
  Reply(from, wire::EncodeSimple(fbb_, ok));
  const auto* rep = h.body_as_SnapshotReport();
  if (rank < 0 || !rep) return;
  SnapshotScheduler::Report r;
  r.clock = rep->clock();
  if (rep->error()) r.error = rep->error()->str();
  if (rep->files())
    for (const auto* f : *rep->files())
      r.files.push_back({f->server(), f->name() ? f->name()->str() : "", f->bytes(), f->checksum()});
  if (rep->parts())
    for (const auto* p : *rep->parts())
      r.parts.push_back({p->table(), p->partition(), p->server(), p->rows(), p->checksum(), p->base(), p->deleted()});
  SnapshotScheduler::Effects e;
  snaps_.OnReport(static_cast<uint32_t>(rank), r, opts_.Groups(), Clock::now(), &e);  // (a part per group)
  Apply(e);
}

void Coordinator::CheckSnapshotTimers() {
  if (tables_.complete())
    for (auto& ended : snaps_.TakeDeferred()) FinishSnapshot(ended);
  SnapshotScheduler::Effects e;
  snaps_.CheckTimers(Clock::now(), tables_.complete(), SnapshotTargets(), &e);
  Apply(e);
}

void Coordinator::FinishSnapshot(SnapshotScheduler::Ended& e) {
  Status s = e.status;
  const int64_t label = snaps_.clock_base() + e.clock;
  const std::string dir = snaps_.DirOf(e.clock);
  if (s.ok() && !e.existing && !tables_.complete()) {
    // A coordinator that restarted while the servers wrote: the manifest
    // records the shard map, written once every server registered again.
    LOG_INFO << "snapshot at clock " << e.clock << " written by every server; its manifest waits for the shard map";
    snaps_.Defer(std::move(e));
    return;
  }
  if (s.ok() && !e.existing) s = WriteManifest(e, label, dir);
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - e.started).count();
  if (e.existing) {
    LOG_INFO << "snapshot " << dir << " (taken at this clock already) answers the request";
  } else if (s.ok()) {
    snaps_.Completed(label, dir, ms);
    metrics_.SnapshotCompleted(ms);
  } else {
    LOG_ERROR << "snapshot at clock " << e.clock << " failed: " << s.ToString();
    metrics_.SnapshotFailed();
    snaps_.Failed(e.clock);
  }
  for (const auto& w : e.waiters) {
    if (!s.ok()) {
      ReplyError(w.routing_id, w.request_id, s);
      continue;
    }
    wire::Fields f;
    f.request_id = w.request_id;
    f.clock = label;
    f.message = dir;
    Reply(w.routing_id, wire::EncodeSimple(fbb_, f));
  }
  e.waiters.clear();
  if (e.final) {
    stop_.final_snapshot = s;
    ShutdownJob();
  }
}

Status Coordinator::WriteManifest(const SnapshotScheduler::Ended& e, int64_t label, const std::string& dir) {
  snapshot::Manifest m;
  m.clock = label;
  m.unix_time_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch()).count();
  m.consistency = opts_.consistency;
  m.staleness = opts_.staleness;
  m.num_servers = opts_.Groups();  // (a file and parts per replica group)
  m.partitions = tables_.map().partitions();
  m.owner = tables_.map().owner;
  m.tables = tables_.tables();
  m.files = e.files;
  m.parts = e.parts;
  WorkPosition at;
  bool recorded = false;
  if (work_.PositionAt(e.clock, &at, &recorded)) {
    // No claim was seen at or after the cut clock (none recorded): the
    // first pool not used up, from its first unit not known to be done
    // now. (Batches trained between the cut and now are not trained again
    // after a rollback to this snapshot.)
    if (!recorded)
      LOG_WARN << "snapshot at clock " << label << ": no work position recorded at its clock; using the pools' now";
    m.work_pool = at.pool;
    m.work_position = at.position;
  }
  return snapshot::WriteManifest(dir, m);
}

Status Coordinator::PrepareRestore() {
  RestoreChoice c;
  SHARDPS_RETURN_IF_ERROR(ChooseRestore(opts_.snapshot_dir, opts_.restore_clock, opts_.num_servers, opts_.partitions,
                                        tables_.tables(), &c));
  opts_.partitions = c.manifest.partitions;
  tables_.SetTables(std::move(c.tables));
  AdoptRestorePoint(c.dir, c.manifest);
  return Status::OK();
}

void Coordinator::AdoptRestorePoint(const std::string& dir, const snapshot::Manifest& m) {
  snaps_.SetRestorePoint(dir, m.clock);
  work_.SetResume({m.work_pool, m.work_position});
}

void Coordinator::HandleRollback(const std::string& from, const wire::Header& h) {
  if (opts_.snapshot_dir.empty())
    return ReplyError(from, h.request_id(),
                      Status::InvalidArgument("this job takes no snapshots (--snapshot-dir): a dead server's partitions "
                                              "cannot be restored, the job cannot go on"));
  std::string dir;
  snapshot::Manifest m;
  std::vector<std::string> refused;
  Status s = snapshot::FindNewestGood(opts_.snapshot_dir, -1, &dir, &m, &refused);
  for (const auto& r : refused) LOG_WARN << "rollback: refusing snapshot: " << r;
  if (!s.ok())
    return ReplyError(from, h.request_id(),
                      Status(s.code(), "no snapshot to roll back to in " + opts_.snapshot_dir + ": " + s.message()));
  if (m.partitions != tables_.map().partitions() && tables_.complete())
    return ReplyError(from, h.request_id(),
                      Status::Conflict(dir + " has " + std::to_string(m.partitions) + " partitions, the job " +
                                       std::to_string(tables_.map().partitions())));
  // The job's clock as the workers' latest heartbeats said (label).
  const int64_t furthest = members_.FurthestClock();
  const int64_t reached = furthest < 0 ? -1 : std::max<int64_t>(-1, snaps_.clock_base() + furthest);
  LOG_WARN << "rolling back to " << dir << " (clock " << m.clock << ") from clock " << reached
           << " (workers' heartbeats): every server reloads it, every worker starts again from it; "
           << std::max<int64_t>(0, reached - m.clock) << " clocks are trained again";
  RollBackTo(dir, m);
  wire::Fields f;
  f.request_id = h.request_id();
  f.clock = m.clock;
  f.message = dir;
  Reply(from, wire::EncodeSimple(fbb_, f));
}

void Coordinator::RollBackTo(const std::string& dir, const snapshot::Manifest& m) {
  // Everything that followed the snapshot is forgotten: the servers and
  // workers that register now are new processes; the job's clocks start
  // again at 0, labelled from the snapshot's clock.
  AdoptRestorePoint(dir, m);
  opts_.partitions = m.partitions;
  SnapshotScheduler::Effects e;
  snaps_.AbortAll(Status::Unavailable("the job was rolled back to " + dir), &e);
  Apply(e);
  members_.RollBack();
  work_.Clear();
  retiring_.clear();  // every worker starts again from the snapshot: nothing of theirs to settle
  moves_ = {};        // (new server processes: no drain, fill or move of the old ones goes on)
  retired_.clear();
  for (const auto& w : barrier_.Cancel())
    ReplyError(w.routing_id, w.request_id, Status::Unavailable("the job was rolled back"));
  for (const auto& w : tables_.RollBack())
    ReplyError(w.routing_id, w.request_id, Status::Unavailable("the job was rolled back"));
  start_ = Clock::now();  // the join timeout counts again
  map_told_ = 1;          // the new servers' map is v1 again
}

}  // namespace shardps
