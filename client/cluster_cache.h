// What the client knows of the job: the coordinator's cluster view (the
// consistency model, the servers and where they listen, the tables) and the
// shard map, fetched at Connect and again when a table is looked up that is
// not known yet.
//
// Threads: any caller thread. The view and the map are under view_mu_; the
// map is handed out shared (it can hold a million partitions) and never
// changed once handed out: a new view brings a new map.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "client/coordinator_channel.h"
#include "client/io_thread.h"
#include "common/cluster/cluster.h"
#include "shardps/client.h"

namespace shardps::detail {

class ClusterCache {
 public:
  // `channel` and `io` outlive this; they are used only by Refresh,
  // GetTable and CreateTable.
  ClusterCache(const ClientOptions& opts, CoordinatorChannel& channel, IoThread& io)
      : opts_(opts), channel_(channel), io_(io) {}

  // Fetches the cluster view (waiting up to `timeout` for the cluster to be
  // ready) and connects to the servers if they are new or moved.
  Status Refresh(Millis timeout);
  // Client::GetTable: the known table, else the coordinator's (one Refresh).
  Status GetTable(std::string_view name, Table* out);
  // Client::CreateTable.
  Status CreateTable(const TableSpec& spec, Table* out);

  // Takes `v` as the view. Returns the server endpoints when the client
  // must (re)connect: the first complete view, or another server list.
  std::optional<std::vector<std::string>> Update(ClusterView v);
  // Records a table the coordinator created (or found).
  void AddTable(const TableSpec& t);
  // The known table called `name`.
  bool Find(std::string_view name, Table* out) const;
  // Checks that `t` is a table of this job; *map: the current shard map,
  // shared; *servers: how many servers the job has.
  Status Resolve(const Table& t, std::shared_ptr<const ShardMap>* map, uint32_t* servers) const;

  // The current shard map, shared.
  std::shared_ptr<const ShardMap> map() const;
  Consistency consistency() const;
  uint32_t staleness() const;
  uint32_t num_servers() const;
  uint32_t num_workers() const;

 private:
  std::string KnownTables() const;

  const ClientOptions& opts_;
  CoordinatorChannel& channel_;
  IoThread& io_;
  mutable std::mutex view_mu_;  // guards view_, map_
  ClusterView view_;
  std::shared_ptr<const ShardMap> map_ = std::make_shared<const ShardMap>();
};

}  // namespace shardps::detail
