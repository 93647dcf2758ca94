#include "client/cluster_cache.h"

namespace shardps::detail {

Status ClusterCache::Refresh(Millis timeout) {
  ClusterView v;
  Status s = channel_.GetCluster(timeout, &v);
  if (!s.ok()) return s;
  if (auto endpoints = Update(std::move(v))) io_.ConnectServers(std::move(*endpoints));
  return Status::OK();
}

Status ClusterCache::GetTable(std::string_view name, Table* out) {
  if (Find(name, out)) return Status::OK();
  Status s = Refresh(opts_.request_timeout);
  if (!s.ok()) return s;
  if (Find(name, out)) return Status::OK();
  const std::string known = KnownTables();
  return Status::UnknownTable("table '" + std::string(name) + "' is not defined (known: " +
                              (known.empty() ? "none" : known) + ")");
}

Status ClusterCache::CreateTable(const TableSpec& spec, Table* out) {
  Status s = spec.Validate();
  if (!s.ok()) return s;
  TableSpec t;
  s = channel_.CreateTable(spec, &t);
  if (!s.ok()) return s;
  AddTable(t);
  out->id = t.id;
  out->spec = t;
  return Status::OK();
}

std::optional<std::vector<std::string>> ClusterCache::Update(ClusterView v) {
  std::lock_guard<std::mutex> lock(view_mu_);
  const bool connect = !view_.complete() || view_.servers != v.servers;
  // A view from before the map this client has (a cluster answer that
  // crossed a fail-over) keeps the newer map.
  if (view_.complete() && v.complete() && v.map.version < view_.map.version) v.map = view_.map;
  view_ = std::move(v);
  map_ = std::make_shared<const ShardMap>(view_.map);
  io_.SetMap(map_);
  if (!connect) return std::nullopt;
  return view_.servers;
}

std::shared_ptr<const ShardMap> ClusterCache::map() const {
  std::lock_guard<std::mutex> lock(view_mu_);
  return map_;
}

void ClusterCache::AddTable(const TableSpec& t) {
  std::lock_guard<std::mutex> lock(view_mu_);
  if (view_.tables.size() <= t.id) view_.tables.resize(t.id + 1);
  view_.tables[t.id] = t;
}

bool ClusterCache::Find(std::string_view name, Table* out) const {
  std::lock_guard<std::mutex> lock(view_mu_);
  for (const auto& t : view_.tables)
    if (t.name == name) {
      out->id = t.id;
      out->spec = t;
      return true;
    }
  return false;
}

std::string ClusterCache::KnownTables() const {
  std::lock_guard<std::mutex> lock(view_mu_);
  std::string known;
  for (const auto& t : view_.tables) known += (known.empty() ? "'" : ", '") + t.name + "'";
  return known;
}

Status ClusterCache::Resolve(const Table& t, std::shared_ptr<const ShardMap>* map, uint32_t* servers) const {
  std::lock_guard<std::mutex> lock(view_mu_);
  if (t.id >= view_.tables.size() || view_.tables[t.id].name != t.spec.name)
    return Status::UnknownTable("table '" + t.spec.name + "' (id " + std::to_string(t.id) +
                                ") is not a table of this job");
  *map = map_;
  *servers = view_.num_servers;
  return Status::OK();
}

Consistency ClusterCache::consistency() const {
  std::lock_guard<std::mutex> lock(view_mu_);
  return view_.consistency;
}

uint32_t ClusterCache::staleness() const {
  std::lock_guard<std::mutex> lock(view_mu_);
  return view_.staleness;
}

uint32_t ClusterCache::num_servers() const {
  std::lock_guard<std::mutex> lock(view_mu_);
  return view_.num_servers;
}

uint32_t ClusterCache::num_workers() const {
  std::lock_guard<std::mutex> lock(view_mu_);
  return view_.num_workers;
}

}  // namespace shardps::detail
