// The coordinator's side of snapshots: choosing the cut clock for on-demand
// and timed snapshots, collecting the servers' reports, writing the
// manifest last, keeping the newest K, and choosing what to restore.
#include <filesystem>

#include "common/log.h"
#include "common/metrics.h"
#include "common/wire.h"
#include "server/coordinator.h"

namespace shardps {

Status Coordinator::PrepareRestore() {
  std::string dir;
  snapshot::Manifest m;
  std::vector<std::string> refused;
  Status s = snapshot::FindNewestGood(opts_.snapshot_dir, opts_.restore_clock, &dir, &m, &refused);
  for (const auto& r : refused) LOG_WARN << "refusing snapshot: " << r;
  if (!s.ok()) return s;
  if (opts_.partitions != m.partitions)
    LOG_INFO << "restoring: using the snapshot's " << m.partitions << " virtual partitions (not " << opts_.partitions << ")";
  opts_.partitions = m.partitions;
  if (opts_.partitions < opts_.num_servers)
    return Status::InvalidArgument("the snapshot has " + std::to_string(m.partitions) + " partitions, fewer than " +
                                   std::to_string(opts_.num_servers) + " servers");
  std::vector<TableSpec> tables(m.tables.size());
  for (const auto& t : m.tables) {
    if (t.id >= tables.size()) return Status::BadMessage(dir + ": table ids are not dense");
    tables[t.id] = t;
  }
  for (const auto& mine : tables_) {  // from the job file: must agree, or be new
    bool found = false;
    for (const auto& t : tables)
      if (t.name == mine.name) {
        found = true;
        if (!t.SameShape(mine))
          return Status::Conflict("table '" + mine.name + "' of the job file differs from the one in " + dir);
      }
    if (!found) {
      tables.push_back(mine);
      tables.back().id = static_cast<uint32_t>(tables.size() - 1);
    }
  }
  tables_ = std::move(tables);
  AdoptRestorePoint(dir, m);
  LOG_INFO << "restoring from " << dir << " (clock " << m.clock << ", " << m.tables.size() << " tables, written by "
           << m.num_servers << " servers)";
  return Status::OK();
}

void Coordinator::AdoptRestorePoint(const std::string& dir, const snapshot::Manifest& m) {
  restore_dir_ = dir;
  clock_base_ = m.clock;
  resume_pool_ = m.work_pool;
  resume_position_ = m.work_position;
}

void Coordinator::AskServers(SnapOp& op, wire::MsgType type, int64_t clock) {
  for (uint32_t r = 0; r < servers_.size(); ++r) {
    if (!servers_[r].registered) continue;
    wire::Fields f;
    f.type = type;
    f.request_id = next_update_id_++;
    f.clock = clock;
    op.asked[f.request_id] = r;
    Reply(servers_[r].routing_id, wire::EncodeSimple(fbb_, f));
  }
}

void Coordinator::StartOnDemandSnapshot(const Waiter* requester) {
  for (auto& op : snap_ops_)
    if (op.on_demand && !op.done) {
      if (requester) op.waiters.push_back(*requester);
      return;
    }
  SnapOp op;
  op.on_demand = true;
  op.deadline = Clock::now() + opts_.snapshot_timeout;
  if (requester) op.waiters.push_back(*requester);
  AskServers(op, wire::MsgType::ClockQuery, 0);
  snap_ops_.push_back(std::move(op));
}

bool Coordinator::HandleSnapshotReply(const std::string& from, const wire::Header& h) {
  for (auto& op : snap_ops_) {
    auto it = op.asked.find(h.request_id());
    if (it == op.asked.end()) continue;
    op.asked.erase(it);
    Status s = wire::ReplyStatus(&h);
    if (op.phase == 0 || op.phase == 3) {
      if (!s.ok()) {
        FinishSnapshot(op, s);
      } else {
        op.max_clock = std::max(op.max_clock, h.min_clock());
      }
    } else if (op.phase == 1) {
      if (s.code() == Code::kStaleClock) {
        op.missed = true;
      } else if (!s.ok()) {
        FinishSnapshot(op, s);
      }
    }
    if (op.done || !op.asked.empty()) return true;
    if (op.phase == 0 || op.phase == 3) {
      // Cut a few clocks ahead of the furthest server, so that every server
      // can still take it exactly.
      op.phase = 1;
      op.missed = false;
      op.clock = op.max_clock + op.margin;
      snapshot::Manifest existing;
      while (snapshot::ReadManifest(opts_.snapshot_dir + "/" + snapshot::DirName(clock_base_ + op.clock), &existing).ok())
        ++op.clock;  // never overwrite a complete snapshot
      AskServers(op, wire::MsgType::SnapshotAt, op.clock);
    } else if (op.phase == 1) {
      if (!op.missed) {
        op.phase = 2;  // the servers cut and write; SnapshotDone follows
        return true;
      }
      if (++op.tries >= 6) {
        FinishSnapshot(op, Status::Timeout("training moved past every cut clock offered (" + std::to_string(op.tries) +
                                           " tries)"));
        return true;
      }
      LOG_INFO << "snapshot at clock " << op.clock << " missed by a server; trying further ahead";
      AskServers(op, wire::MsgType::SnapshotCancel, op.clock);
      op.reported.clear();
      op.parts.clear();
      op.files.clear();
      op.margin *= 4;
      op.max_clock = 0;
      op.phase = 3;  // cancel, then query again
      op.clock = -1;
      AskServers(op, wire::MsgType::ClockQuery, 0);
    }
    return true;
  }
  return false;
}

void Coordinator::HandleSnapshotDone(const std::string& from, const wire::Header& h) {
  const int rank = ServerRankOf(from);
  wire::Fields ok;
  ok.request_id = h.request_id();
  Reply(from, wire::EncodeSimple(fbb_, ok));
  const auto* rep = h.body_as_SnapshotReport();
  if (rank < 0 || !rep) return;
  const int64_t clock = rep->clock();
  SnapOp* op = nullptr;
  for (auto& o : snap_ops_)
    if (!o.done && o.clock == clock && o.phase != 3) op = &o;
  if (!op) {  // a periodic cut (every k clocks) the servers took on their own
    SnapOp fresh;
    fresh.clock = clock;
    fresh.phase = 2;
    fresh.deadline = Clock::now() + opts_.snapshot_timeout;
    snap_ops_.push_back(std::move(fresh));
    op = &snap_ops_.back();
  }
  if (rep->error()) {
    FinishSnapshot(*op, Status::Internal("server " + std::to_string(rank) + ": " + rep->error()->str()));
  } else {
    op->reported.insert(static_cast<uint32_t>(rank));
    if (rep->files())
      for (const auto* f : *rep->files()) op->files.push_back({f->server(), f->name() ? f->name()->str() : "", f->bytes(), f->checksum()});
    if (rep->parts())
      for (const auto* p : *rep->parts())
        op->parts.push_back({p->table(), p->partition(), p->server(), p->rows(), p->checksum()});
    // Complete once every server of the job wrote its part.
    if (op->reported.size() == servers_.size() && op->phase >= 1) FinishSnapshot(*op, Status::OK());
  }
  snap_ops_.erase(std::remove_if(snap_ops_.begin(), snap_ops_.end(), [](const SnapOp& o) { return o.done; }),
                  snap_ops_.end());
}

void Coordinator::FinishSnapshot(SnapOp& op, const Status& failure) {
  op.done = true;
  Status s = failure;
  const int64_t label = clock_base_ + op.clock;
  const std::string dir = opts_.snapshot_dir + "/" + snapshot::DirName(label);
  if (s.ok() && map_.owner.empty()) s = Status::NotReady("the shard map is not complete (servers are still registering)");
  if (s.ok()) {
    snapshot::Manifest m;
    m.clock = label;
    m.unix_time_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch()).count();
    m.consistency = opts_.consistency;
    m.staleness = opts_.staleness;
    m.num_servers = opts_.num_servers;
    m.partitions = map_.partitions();
    m.owner = map_.owner;
    m.tables = tables_;
    m.files = op.files;
    m.parts = op.parts;
    if (auto w = work_at_.find(op.clock); w != work_at_.end()) {
      m.work_pool = w->second.first;
      m.work_position = w->second.second;
    } else if (!work_pools_.empty()) {
      // No claim was seen at or after the cut clock (none recorded): the
      // first pool not used up, from its first unit not known to be done
      // now. (Batches trained between the cut and now are not trained again
      // after a rollback to this snapshot.)
      LOG_WARN << "snapshot at clock " << label << ": no work position recorded at its clock; using the pools' now";
      m.work_pool = work_pools_.rbegin()->first + 1;  // every pool used up: the next one, from its start
      m.work_position = 0;
      for (const auto& [id, p] : work_pools_) {
        if (p.used_up() && p.last.empty()) continue;
        m.work_pool = id;
        m.work_position = p.FirstUndone();
        break;
      }
    }
    s = snapshot::WriteManifest(dir, m);
  }
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - op.started).count();
  if (s.ok()) {
    LOG_INFO << "snapshot " << dir << " complete";
    ++snapshots_taken_;
    latest_snapshot_clock_ = label;
    latest_snapshot_dir_ = dir;
    latest_snapshot_ms_ = ms;
    if (snapshots_counter_) snapshots_counter_->Inc();
    if (snapshot_seconds_) snapshot_seconds_->Observe(ms / 1000);
    // Keep the newest K complete snapshots; older ones go only now that a
    // newer one is complete.
    std::vector<snapshot::Listing> all;
    if (snapshot::List(opts_.snapshot_dir, &all).ok()) {
      size_t complete = 0;
      for (auto it = all.rbegin(); it != all.rend(); ++it) {
        if (!it->complete) continue;
        if (++complete > opts_.keep_snapshots) {
          std::error_code ec;
          std::filesystem::remove_all(it->dir, ec);
          LOG_INFO << "removed old snapshot " << it->dir;
        }
      }
    }
  } else {
    LOG_ERROR << "snapshot at clock " << op.clock << " failed: " << s.ToString();
    if (snapshot_failures_counter_) snapshot_failures_counter_->Inc();
  }
  for (const auto& w : op.waiters) {
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
  op.waiters.clear();
  if (op.final) {
    final_snapshot_ = s;
    ShutdownJob();
  }
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
  if (m.partitions != map_.partitions() && !map_.owner.empty())
    return ReplyError(from, h.request_id(),
                      Status::Conflict(dir + " has " + std::to_string(m.partitions) + " partitions, the job " +
                                       std::to_string(map_.partitions())));
  int64_t reached = -1;  // the job's clock as the workers' latest heartbeats said (label)
  for (const auto& w : workers_)
    if (w.clock >= 0) reached = std::max(reached, clock_base_ + w.clock);
  LOG_WARN << "rolling back to " << dir << " (clock " << m.clock << ") from clock " << reached
           << " (workers' heartbeats): every server reloads it, every worker starts again from it; "
           << std::max<int64_t>(0, reached - m.clock) << " clocks are trained again";
  // Everything that followed the snapshot is forgotten: the servers and
  // workers that register now are new processes; the job's clocks start
  // again at 0, labelled from the snapshot's clock.
  AdoptRestorePoint(dir, m);
  opts_.partitions = m.partitions;
  last_claims_.clear();
  for (auto& op : snap_ops_)
    if (!op.done) FinishSnapshot(op, Status::Unavailable("the job was rolled back to " + dir));
  snap_ops_.clear();
  for (auto& srv : servers_) {
    srv.registered = srv.alive = srv.adopt = false;
    srv.routing_id.clear();
    srv.waits = ServerWaitView{};
  }
  for (uint32_t r = 0; r < workers_.size(); ++r) {
    workers_[r].state = r < opts_.num_workers ? WorkerState::kPending : WorkerState::kVacant;
    workers_[r].clock = -1;
  }
  work_pools_.clear();
  clock_grants_.clear();
  work_at_.clear();
  map_ = ShardMap{};
  cluster_ready_ = false;
  map_update_id_ = 0;
  map_waiting_.clear();
  for (const auto& b : barrier_arrived_)
    ReplyError(b.second.routing_id, b.second.request_id, Status::Unavailable("the job was rolled back"));
  barrier_arrived_.clear();
  for (const auto& p : pending_tables_)
    ReplyError(p.creator.routing_id, p.creator.request_id, Status::Unavailable("the job was rolled back"));
  pending_tables_.clear();
  ++membership_version_;
  start_ = Clock::now();  // the join timeout counts again
  wire::Fields f;
  f.request_id = h.request_id();
  f.clock = m.clock;
  f.message = dir;
  Reply(from, wire::EncodeSimple(fbb_, f));
}

void Coordinator::CheckSnapshotTimers() {
  const auto now = Clock::now();
  for (auto& op : snap_ops_)
    if (!op.done && now > op.deadline)
      FinishSnapshot(op, Status::Timeout("snapshot at clock " + std::to_string(op.clock) + " not complete within " +
                                         std::to_string(opts_.snapshot_timeout.count()) + " ms"));
  snap_ops_.erase(std::remove_if(snap_ops_.begin(), snap_ops_.end(), [](const SnapOp& o) { return o.done; }),
                  snap_ops_.end());
  if (opts_.snapshot_every_sec > 0 && !map_.owner.empty()) {
    if (next_timed_snapshot_ == Clock::time_point()) next_timed_snapshot_ = now + std::chrono::seconds(opts_.snapshot_every_sec);
    if (now >= next_timed_snapshot_) {
      StartOnDemandSnapshot(nullptr);
      next_timed_snapshot_ = now + std::chrono::seconds(opts_.snapshot_every_sec);
    }
  }
}

}  // namespace shardps
