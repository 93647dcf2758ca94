#include "server/coordinator/logic/snapshot_scheduler.h"

#include <algorithm>
#include <filesystem>

#include "common/base/log.h"
#include "common/codec/wire.h"

namespace shardps {

void SnapshotScheduler::AskServers(SnapOp& op, wire::MsgType type, int64_t clock, const Servers& to, Effects* out) {
  for (uint32_t r : to.ranks) {
    const uint64_t id = (*to.next_id)++;
    op.asked[id] = r;
    out->asks.push_back({r, type, id, clock});
  }
}

void SnapshotScheduler::StartOnDemand(const Waiter* requester, const Servers& to, Clock::time_point now,
                                      Effects* out) {
  for (auto& op : ops_)
    if (op.on_demand && !op.done) {
      if (requester) op.waiters.push_back(*requester);
      return;
    }
  SnapOp op;
  op.on_demand = true;
  op.started = now;
  op.deadline = now + opts_.timeout;
  if (requester) op.waiters.push_back(*requester);
  AskServers(op, wire::MsgType::ClockQuery, 0, to, out);
  ops_.push_back(std::move(op));
}

void SnapshotScheduler::StartFinal(const Servers& to, Clock::time_point now, Effects* out) {
  StartOnDemand(nullptr, to, now, out);
  for (auto& op : ops_)
    if (op.on_demand && !op.done) op.final = true;
}

bool SnapshotScheduler::OnReply(uint64_t request_id, const Status& s, int64_t min_clock, const Servers& to,
                                Effects* out) {
  for (auto& op : ops_) {
    auto it = op.asked.find(request_id);
    if (it == op.asked.end()) continue;
    op.asked.erase(it);
    if (op.phase == 0 || op.phase == 3) {
      if (!s.ok()) {
        Finish(op, s, out);
      } else {
        op.max_clock = std::max(op.max_clock, min_clock);
      }
    } else if (op.phase == 1) {
      if (s.code() == Code::kStaleClock) {
        op.missed = true;
      } else if (!s.ok()) {
        Finish(op, s, out);
      }
    }
    if (!op.done && op.asked.empty()) Advance(op, to, out);
    return true;
  }
  return false;
}

void SnapshotScheduler::Advance(SnapOp& op, const Servers& to, Effects* out) {
  if (op.phase == 0 || op.phase == 3) {
    // Cut at the furthest server's clock: the others are behind it and
    // take it exactly when they reach it; the furthest takes it at once
    // (sync: before it applies that clock; the others: its workers are at
    // most the staleness bound ahead). Where a server moved past it in the
    // meantime, further ahead.
    op.phase = 1;
    op.missed = false;
    op.clock = op.max_clock + op.margin;
    if (op.margin == 0 && AlreadyTaken(op, to.workers_live, out)) return;
    snapshot::Manifest existing;
    while (snapshot::ReadManifest(DirOf(op.clock), &existing).ok()) ++op.clock;  // never overwrite a complete snapshot
    AskServers(op, wire::MsgType::SnapshotAt, op.clock, to, out);
  } else if (op.phase == 1) {
    if (!op.missed) {
      op.phase = 2;  // the servers cut and write; SnapshotDone follows
      return;
    }
    if (++op.tries >= 6) {
      Finish(op,
             Status::Timeout("training moved past every cut clock offered (" + std::to_string(op.tries) + " tries)"),
             out);
      return;
    }
    LOG_INFO << "snapshot at clock " << op.clock << " missed by a server; trying further ahead";
    AskServers(op, wire::MsgType::SnapshotCancel, op.clock, to, out);
    cancelled_.insert(op.clock);  // a server that cut it at once still reports it
    while (cancelled_.size() > 64) cancelled_.erase(cancelled_.begin());
    op.reported.clear();
    op.parts.clear();
    op.files.clear();
    op.margin = std::max<int64_t>(4, op.margin * 4);
    op.max_clock = 0;
    op.phase = 3;  // cancel, then query again
    op.clock = -1;
    AskServers(op, wire::MsgType::ClockQuery, 0, to, out);
  }
}

bool SnapshotScheduler::AlreadyTaken(SnapOp& op, bool workers_live, Effects* out) {
  snapshot::Manifest m;
  if (workers_live && snapshot::ReadManifest(DirOf(op.clock), &m).ok()) {
    Finish(op, Status::OK(), out);
    out->ended.back().existing = true;
    return true;
  }
  for (auto& other : ops_)
    if (&other != &op && !other.done && other.clock == op.clock && other.phase == 2) {
      other.waiters.insert(other.waiters.end(), op.waiters.begin(), op.waiters.end());
      other.final = other.final || op.final;
      other.on_demand = true;
      op.waiters.clear();
      op.done = true;  // (dropped with the done ones)
      return true;
    }
  return false;
}

void SnapshotScheduler::OnReport(uint32_t server, const Report& r, size_t num_servers, Clock::time_point now,
                                 Effects* out) {
  SnapOp* op = nullptr;
  for (auto& o : ops_)
    if (!o.done && o.clock == r.clock && o.phase != 3) op = &o;
  const bool periodic = opts_.every_clocks > 0 && r.clock > 0 && r.clock % opts_.every_clocks == 0;
  if (!op && !periodic && cancelled_.count(r.clock)) {
    // A cut offered, taken at once by this server and cancelled for
    // another that had moved past it: nothing will complete it.
    Failed(r.clock);
    return;
  }
  if (!op) {  // a periodic cut (every k clocks) the servers took on their own
    SnapOp fresh;
    fresh.clock = r.clock;
    fresh.phase = 2;
    fresh.started = now;
    fresh.deadline = now + opts_.timeout;
    ops_.push_back(std::move(fresh));
    op = &ops_.back();
  }
  if (r.error) {
    Finish(*op, Status::Internal("server " + std::to_string(server) + ": " + *r.error), out);
  } else {
    op->reported.insert(server);
    op->files.insert(op->files.end(), r.files.begin(), r.files.end());
    op->parts.insert(op->parts.end(), r.parts.begin(), r.parts.end());
    // Complete once every server of the job wrote its part.
    if (op->reported.size() == num_servers && op->phase >= 1) Finish(*op, Status::OK(), out);
  }
  DropDone();
}

void SnapshotScheduler::CheckTimers(Clock::time_point now, bool map_complete, const Servers& to, Effects* out) {
  for (auto& op : ops_)
    if (!op.done && now > op.deadline)
      Finish(op, Status::Timeout("snapshot at clock " + std::to_string(op.clock) + " not complete within " +
                                 std::to_string(opts_.timeout.count()) + " ms"),
             out);
  DropDone();
  if (opts_.every_sec > 0 && map_complete) {
    if (next_timed_ == Clock::time_point()) next_timed_ = now + std::chrono::seconds(opts_.every_sec);
    if (now >= next_timed_) {
      StartOnDemand(nullptr, to, now, out);
      next_timed_ = now + std::chrono::seconds(opts_.every_sec);
    }
  }
}

void SnapshotScheduler::AbortAll(const Status& why, Effects* out) {
  for (auto& op : ops_)
    if (!op.done) Finish(op, why, out);
  ops_.clear();
}

void SnapshotScheduler::Finish(SnapOp& op, const Status& s, Effects* out) {
  op.done = true;
  Ended e;
  e.clock = op.clock;
  e.status = s;
  e.parts = std::move(op.parts);
  e.files = std::move(op.files);
  e.waiters = std::move(op.waiters);
  e.final = op.final;
  e.started = op.started;
  op.parts.clear();
  op.files.clear();
  op.waiters.clear();
  out->ended.push_back(std::move(e));
}

void SnapshotScheduler::DropDone() {
  ops_.erase(std::remove_if(ops_.begin(), ops_.end(), [](const SnapOp& o) { return o.done; }), ops_.end());
}

CutClocks SnapshotScheduler::Cuts() const {
  CutClocks c;
  c.enabled = !opts_.dir.empty();
  c.every = opts_.every_clocks;
  for (const auto& op : ops_)
    if (!op.done) c.chosen.push_back(op.clock);
  return c;
}

void SnapshotScheduler::SetRestorePoint(std::string dir, int64_t clock_base) {
  restore_dir_ = std::move(dir);
  clock_base_ = clock_base;
}

std::string SnapshotScheduler::DirOf(int64_t clock) const {
  return opts_.dir + "/" + snapshot::DirName(clock_base_ + clock);
}

void SnapshotScheduler::Completed(int64_t label, const std::string& dir, double ms) {
  LOG_INFO << "snapshot " << dir << " complete";
  ++history_.taken;
  history_.latest_clock = label;
  history_.latest_dir = dir;
  history_.latest_ms = ms;
  // Keep the newest K complete snapshots and every snapshot their chains
  // read (snapshots of what changed); older ones go only now that a newer
  // one is complete.
  std::vector<snapshot::Listing> all;
  if (!snapshot::List(opts_.dir, &all).ok()) return;
  std::set<int64_t> kept;
  size_t newest = 0;
  for (auto it = all.rbegin(); it != all.rend(); ++it)
    if (it->complete && (++newest <= opts_.keep || kept.count(it->clock))) {
      kept.insert(it->clock);
      kept.insert(it->bases.begin(), it->bases.end());  // (older: seen later in this walk)
    }
  std::set<int64_t> under_way;
  for (const auto& op : ops_)
    if (!op.done && op.clock >= 0) under_way.insert(clock_base_ + op.clock);
  for (const auto& e : deferred_) under_way.insert(clock_base_ + e.clock);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    std::error_code ec;
    if (!it->complete) {
      if (it->clock >= label || under_way.count(it->clock)) continue;
      std::filesystem::remove_all(it->dir, ec);
      LOG_INFO << "removed incomplete snapshot " << it->dir << " (" << it->problem << ")";
    } else if (!kept.count(it->clock)) {
      std::filesystem::remove_all(it->dir, ec);
      LOG_INFO << "removed old snapshot " << it->dir;
    }
  }
}

void SnapshotScheduler::Failed(int64_t clock) {
  if (clock < 0) return;  // (never chosen: nothing written)
  const std::string dir = DirOf(clock);
  snapshot::Manifest m;
  std::error_code ec;
  if (snapshot::ReadManifest(dir, &m).ok() || !std::filesystem::exists(dir, ec)) return;
  std::filesystem::remove_all(dir, ec);
  if (!ec) LOG_INFO << "removed " << dir << ": its snapshot failed";
}

Status ChooseRestore(const std::string& root, int64_t clock, uint32_t num_servers, uint32_t partitions,
                     const std::vector<TableSpec>& job_tables, RestoreChoice* out) {
  std::string dir;
  snapshot::Manifest m;
  std::vector<std::string> refused;
  Status s = snapshot::FindNewestGood(root, clock, &dir, &m, &refused);
  for (const auto& r : refused) LOG_WARN << "refusing snapshot: " << r;
  if (!s.ok()) return s;
  if (partitions != m.partitions)
    LOG_INFO << "restoring: using the snapshot's " << m.partitions << " virtual partitions (not " << partitions << ")";
  if (m.partitions < num_servers)
    return Status::InvalidArgument("the snapshot has " + std::to_string(m.partitions) + " partitions, fewer than " +
                                   std::to_string(num_servers) + " servers");
  std::vector<TableSpec> tables(m.tables.size());
  for (const auto& t : m.tables) {
    if (t.id >= tables.size()) return Status::BadMessage(dir + ": table ids are not dense");
    tables[t.id] = t;
  }
  for (const auto& mine : job_tables) {  // from the job file: must agree, or be new
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
  LOG_INFO << "restoring from " << dir << " (clock " << m.clock << ", " << m.tables.size() << " tables, written by "
           << m.num_servers << " servers)";
  out->dir = std::move(dir);
  out->manifest = std::move(m);
  out->tables = std::move(tables);
  return Status::OK();
}

}  // namespace shardps
