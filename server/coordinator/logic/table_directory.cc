#include "server/coordinator/logic/table_directory.h"

#include "common/base/log.h"
#include "server/tables/table.h"

namespace shardps {

TableDirectory::TableDirectory(const std::vector<TableSpec>& job_tables) {
  for (size_t i = 0; i < job_tables.size(); ++i) {
    tables_.push_back(job_tables[i]);
    tables_.back().id = static_cast<uint32_t>(i);
  }
}

Status TableDirectory::CheckBudget(const TableSpec& spec, size_t defined, const std::vector<uint64_t>& budgets,
                                   uint32_t partitions) const {
  // A sparse table without max_rows: its rows are counted as pushes make them.
  if (spec.kind != TableKind::kDense && spec.max_rows == 0) return Status::OK();
  const auto servers = static_cast<uint32_t>(budgets.size());
  const ShardMap map = map_.owner.empty() ? ShardMap::Replicated(partitions, servers, replicas_, {}, 1, groups_) : map_;
  uint64_t total = 0;
  for (uint32_t r = 0; r < servers; ++r) total += ServerTable::BudgetBytes(spec, map.partitions(), map.HeldBy(r));
  for (uint32_t r = 0; r < servers; ++r) {
    const uint64_t budget = budgets[r];
    if (budget == 0) continue;
    const auto owned = map.HeldBy(r);  // every copy it holds, backups included
    uint64_t used = 0;
    for (size_t i = 0; i < defined && i < tables_.size(); ++i)
      used += ServerTable::BudgetBytes(tables_[i], map.partitions(), owned);
    const uint64_t need = ServerTable::BudgetBytes(spec, map.partitions(), owned);
    if (used + need > budget)
      return Status::TooLarge("table '" + spec.name + "' needs " + std::to_string(need) + " bytes on server " +
                              std::to_string(r) + " (" + std::to_string(total) + " in all), but server " +
                              std::to_string(r) + " has " + std::to_string(budget > used ? budget - used : 0) +
                              " of its " + std::to_string(budget) + "-byte memory budget left; nothing was created");
  }
  return Status::OK();
}

ShardMap TableDirectory::FirstMap(ShardMap fresh) const {
  if (resumed_replicas_.size() != fresh.groups()) return fresh;
  for (const auto& r : resumed_replicas_)
    if (r.empty()) return fresh;
  fresh.version = resumed_version_;
  fresh.replicas = resumed_replicas_;
  for (uint32_t p = 0; p < fresh.partitions(); ++p) fresh.owner[p] = fresh.replicas[fresh.group[p]][0];
  return fresh;
}

bool TableDirectory::MapToSave(uint64_t* version, std::vector<std::vector<uint32_t>>* replicas) const {
  if (complete()) {
    if (map_.version <= 1) return false;
    *version = map_.version;
    *replicas = map_.replicas;
    return true;
  }
  if (resumed_replicas_.empty()) return false;
  *version = resumed_version_;
  *replicas = resumed_replicas_;
  return true;
}

void TableDirectory::DropFromResumed(const ShardMap& fresh, uint32_t server, std::vector<uint32_t>* lost) {
  const ShardMap from = FirstMap(fresh);
  const ShardMap next = from.Without(server, lost);
  if (!lost->empty()) return;
  resumed_version_ = next.version;
  resumed_replicas_ = next.replicas;
}

void TableDirectory::ChangeMap(ShardMap map, uint64_t update_id, std::set<uint32_t> servers) {
  map_ = std::move(map);
  change_update_id_ = update_id;
  change_waiting_ = std::move(servers);
  if (change_waiting_.empty()) published_map_ = map_;
}

TableDirectory::Answers TableDirectory::ForgetServer(uint32_t server) {
  map_waiting_.erase(server);
  change_waiting_.erase(server);
  for (auto& p : pending_) p.waiting_for.erase(server);
  return Settle();
}

void TableDirectory::AwaitMap(uint64_t update_id, uint32_t servers) {
  std::set<uint32_t> all;
  for (uint32_t r = 0; r < servers; ++r) all.insert(r);
  AwaitMap(update_id, all);
}

void TableDirectory::AwaitMap(uint64_t update_id, const std::set<uint32_t>& servers) {
  map_update_id_ = update_id;
  map_waiting_ = servers;
}

bool TableDirectory::AwaitReady(const Waiter& w) {
  if (ready_) return true;
  cluster_waiters_.push_back(w);
  return false;
}

TableDirectory::Lookup TableDirectory::Find(const TableSpec& spec, const Waiter& asker, bool resumed) {
  Lookup l;
  for (const auto& t : tables_) {
    if (t.name != spec.name) continue;
    if (!t.SameShape(spec)) {
      l.kind = Lookup::kRefused;
      l.error = Status::Conflict("table '" + spec.name +
                                 "' already exists with another shape, initializer or optimizer");
      return l;
    }
    l.table = t.id;
    for (const auto& p : pending_)
      if (p.table_id == t.id) {  // still being defined: answered with the first creator
        PendingTable extra = p;
        extra.creator = asker;
        pending_.push_back(std::move(extra));
        l.kind = Lookup::kWaits;
        return l;
      }
    if (!ready_ && resumed) {  // the servers may not hold it yet: answered once they all do
      table_waiters_.push_back({asker, t.id});
      l.kind = Lookup::kWaits;
      return l;
    }
    l.kind = Lookup::kAnswer;
    return l;
  }
  return l;
}

uint32_t TableDirectory::Define(TableSpec spec) {
  spec.id = static_cast<uint32_t>(tables_.size());
  LOG_INFO << "table '" << spec.name << "' (" << ToString(spec.kind) << ", id " << spec.id << ") defined";
  tables_.push_back(std::move(spec));
  return tables_.back().id;
}

void TableDirectory::AwaitTable(uint32_t table, const Waiter& creator, uint64_t update_id,
                                Clock::time_point deadline, std::set<uint32_t> servers) {
  pending_.push_back({table, creator, std::move(servers), update_id, deadline});
}

TableDirectory::Answers TableDirectory::Ack(uint32_t server, uint64_t update_id) {
  if (change_update_id_ != 0 && update_id >= change_update_id_) change_waiting_.erase(server);
  if (!ready_ && map_update_id_ != 0 && update_id >= map_update_id_) map_waiting_.erase(server);
  for (auto& p : pending_)
    if (p.update_id <= update_id) p.waiting_for.erase(server);
  return Settle();
}

TableDirectory::Answers TableDirectory::Settle() {
  Answers a;
  if (change_update_id_ != 0 && change_waiting_.empty() && published_map_.version != map_.version) {
    published_map_ = map_;
    LOG_INFO << "every live server holds shard map v" << map_.version << ": clients use it now";
  }
  if (!ready_ && map_update_id_ != 0 && map_waiting_.empty()) {
    ready_ = true;
    LOG_INFO << "every server holds the shard map: the cluster is ready";
    a.clusters = std::move(cluster_waiters_);
    cluster_waiters_.clear();
    a.tables = std::move(table_waiters_);  // resent to a resumed coordinator
    table_waiters_.clear();
  }
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->waiting_for.empty()) {
      a.tables.emplace_back(it->creator, it->table_id);
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
  return a;
}

std::vector<std::pair<Waiter, Status>> TableDirectory::Expire(Clock::time_point now) {
  std::vector<std::pair<Waiter, Status>> out;
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (now < it->deadline) {
      ++it;
      continue;
    }
    std::string missing;
    for (auto r : it->waiting_for) missing += (missing.empty() ? "" : ",") + std::to_string(r);
    out.emplace_back(it->creator, Status::Unavailable("servers [" + missing + "] did not confirm table '" +
                                                      tables_[it->table_id].name + "' in time"));
    it = pending_.erase(it);
  }
  return out;
}

std::vector<Waiter> TableDirectory::RollBack() {
  map_ = published_map_ = ShardMap{};
  resumed_version_ = 0;  // the new servers start from the job's first map
  resumed_replicas_.clear();
  change_update_id_ = 0;
  change_waiting_.clear();
  ready_ = false;
  map_update_id_ = 0;
  map_waiting_.clear();
  std::vector<Waiter> refused;
  for (auto& p : pending_) refused.push_back(std::move(p.creator));
  pending_.clear();
  return refused;
}

}  // namespace shardps
