// The coordinator's durable state (--state-dir): what it saves after each
// change and takes back when it restarts (docs/fault-tolerance.md). Commit,
// which saves and then sends the replies that depended on it, is in
// coordinator.cc.
#include "server/coordinator/coordinator.h"

#include <algorithm>
#include <utility>

#include "common/base/log.h"

namespace shardps {

Status Coordinator::OpenState(bool* resumed, const std::atomic<bool>* stop) {
  *resumed = false;
  StoreWait wait;
  wait.stop = stop;
  if (opts_.standby) wait.campaign = std::chrono::seconds(0);  // for ever: a standby
  wait.ended = &opened_.ended_before;
  SHARDPS_RETURN_IF_ERROR(StateStore::Open(opts_.state_dir, &store_, wait));
  DurableState d;
  bool found = false;
  SHARDPS_RETURN_IF_ERROR(store_->Load({opts_.num_servers, opts_.num_workers, members_.worker_ranks(), opts_.Groups()}, &d, &found));
  if (!found) return Status::OK();
  Resume(std::move(d));
  *resumed = true;
  return Status::OK();
}

Status Coordinator::KeepLead() {
  if (!store_) return Status::OK();
  Status s = store_->Keep();
  if (!s.ok()) {
    LOG_ERROR << s.message();
    outbox_.clear();
  }
  return s;
}

DurableState Coordinator::Durable() const {
  DurableState d;
  d.num_servers = opts_.num_servers;
  d.num_workers = opts_.num_workers;
  d.groups = opts_.Groups();
  d.partitions = opts_.partitions;
  d.tables = tables_.tables();
  d.servers = members_.SavedServers();
  d.workers = members_.SavedWorkers();
  d.work = work_.data();
  d.restore_dir = snaps_.restore_dir();
  d.clock_base = snaps_.clock_base();
  d.latest_snapshot_dir = snaps_.history().latest_dir;
  d.latest_snapshot_clock = snaps_.history().latest_clock;
  d.snapshots_taken = snaps_.history().taken;
  d.next_update_id = next_update_id_;
  d.membership_version = members_.version();
  d.stopping = stop_.stopping;
  tables_.MapToSave(&d.map_version, &d.map_replicas);  // (none: no map saved, the first is made again)
  return d;
}

void Coordinator::Resume(DurableState d) {
  opts_.partitions = d.partitions;
  tables_.SetTables(std::move(d.tables));
  members_.Restore(d.servers, d.workers, d.membership_version, Clock::now());
  work_.Restore(std::move(d.work));
  // A worker that died while it was being retired (this coordinator
  // stopped before its last clock was decided) still has its work: handed
  // back whole (at least once; settled ones have none left).
  for (uint32_t r = 0; r < members_.worker_ranks(); ++r)
    if (members_.workers()[r].state == WorkerState::kDead) work_.ForgetWorkOf(r, true, -1);
  snaps_.SetRestorePoint(std::move(d.restore_dir), d.clock_base);
  SnapshotScheduler::History history;
  history.taken = d.snapshots_taken;
  history.latest_clock = d.latest_snapshot_clock;
  history.latest_dir = std::move(d.latest_snapshot_dir);
  snaps_.RestoreHistory(history);
  next_update_id_ = std::max<uint64_t>(next_update_id_, d.next_update_id);
  stop_.stopping = d.stopping;
  if (!d.map_replicas.empty()) tables_.SetResumedMap(d.map_version, std::move(d.map_replicas));
}

}  // namespace shardps
