// The job's tables and shard map, and who has still to confirm them: the
// first shard map (the cluster is ready once every server acknowledged the
// update carrying it), each table defined while the job runs (answered
// once every server answering then acknowledged it), and the requests
// waiting on either (GetCluster, CreateTable). Memory budgets are checked
// here: a dense table must fit each server's budget next to the tables
// before it.
//
// Decisions only: the coordinator broadcasts the updates (ClusterUpdate)
// and sends the answers this returns.
//
// Thread: not thread-safe; the coordinator's Run() thread owns its
// TableDirectory.
#pragma once

#include <chrono>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/cluster/partition.h"
#include "server/coordinator/logic/waiter.h"
#include "shardps/status.h"
#include "shardps/types.h"

namespace shardps {

class TableDirectory {
 public:
  using Clock = std::chrono::steady_clock;

  // What a CreateTable comes to (Lookup).
  struct Lookup {
    enum Kind {
      kRefused,  // `error`: a table of that name with another shape
      kWaits,    // answered later (the table is still being confirmed, or a resumed cluster is not ready)
      kAnswer,   // answer now with table `table`
      kNew,      // no such table: define it (CheckBudget, Define)
    } kind = kNew;
    Status error;
    uint32_t table = 0;
  };
  // Requests answered by an acknowledgement (Ack), in the order to answer.
  struct Answers {
    std::vector<Waiter> clusters;                      // GetCluster: the cluster view
    std::vector<std::pair<Waiter, uint32_t>> tables;   // CreateTable: the table's spec
  };

  // The job file's tables; their ids are their positions.
  explicit TableDirectory(const std::vector<TableSpec>& job_tables);

  const std::vector<TableSpec>& tables() const { return tables_; }
  // A restore or a resumed job (REQUIRES: ids are positions).
  void SetTables(std::vector<TableSpec> tables) { tables_ = std::move(tables); }
  const ShardMap& map() const { return map_; }
  // The map clients are told: the newest one every live server has
  // acknowledged (a changed map is not used before its servers hold it).
  const ShardMap& published() const { return published_map_; }
  bool complete() const { return !map_.owner.empty(); }  // there is a shard map
  bool ready() const { return ready_; }                  // every server acknowledged it

  // OK when `spec` fits every server's memory budget next to the first
  // `defined` tables (budgets[r]: server r's in bytes, 0: unknown or not
  // registered), on the shard map or, before there is one, the contiguous
  // map of `partitions` over budgets.size() servers; else TooLarge naming
  // the table, the bytes it needs and the bytes left.
  Status CheckBudget(const TableSpec& spec, size_t defined, const std::vector<uint64_t>& budgets,
                     uint32_t partitions) const;

  // Copies of each group: the budgets count every copy a server holds.
  void set_replicas(uint32_t replicas, uint32_t groups = 0) {
    replicas_ = replicas;
    groups_ = groups;
  }
  // A resumed job whose map changed (a fail-over): the version and replica
  // lists its map is made with again.
  void SetResumedMap(uint64_t version, std::vector<std::vector<uint32_t>> replicas) {
    resumed_version_ = version;
    resumed_replicas_ = std::move(replicas);
  }
  // `fresh` (the job's first map), or the resumed one on its layout.
  ShardMap FirstMap(ShardMap fresh) const;
  // The map a saved state must hold (false: none, the job's first map is
  // made again from its layout): the current one past v1, or, before a
  // resumed job made its map again, the resumed one — a coordinator that
  // saves in between (a claim, a worker leaving) and dies must not leave
  // the next one only v1 to make, older than what the servers hold.
  bool MapToSave(uint64_t* version, std::vector<std::vector<uint32_t>>* replicas) const;
  // A resumed job before its map is made again: `server` is dead; it
  // leaves the replica lists the map will be made with (`fresh`: the job's
  // first map, where none was saved). The groups left without a copy go
  // to *lost (and nothing changes then).
  void DropFromResumed(const ShardMap& fresh, uint32_t server, std::vector<uint32_t>* lost);
  // The first shard map.
  void SetMap(ShardMap map) {
    map_ = std::move(map);
    published_map_ = map_;
  }
  // A new map (a fail-over), sent in update `update_id`: published once
  // each of `servers` acknowledged it.
  void ChangeMap(ShardMap map, uint64_t update_id, std::set<uint32_t> servers);
  // Server `server` is dead: nothing waits for its acknowledgements.
  Answers ForgetServer(uint32_t server);
  // Servers [0, servers) must acknowledge update `update_id` (the one
  // carrying the first map) before the cluster is ready.
  void AwaitMap(uint64_t update_id, uint32_t servers);
  // The same for the servers `servers` (a resumed job: those not dead).
  void AwaitMap(uint64_t update_id, const std::set<uint32_t>& servers);
  // A GetCluster: true when the cluster is ready (answer now); else it
  // waits for Ack.
  bool AwaitReady(const Waiter& w);

  // A CreateTable of `spec` from `asker`; `resumed`: the coordinator
  // resumed a saved job (its servers may not hold the tables yet).
  Lookup Find(const TableSpec& spec, const Waiter& asker, bool resumed);
  // Defines a new table (logged); returns its id.
  uint32_t Define(TableSpec spec);
  // Table `table`'s creator is answered once each of `servers` acknowledged
  // update `update_id` (or with an error past `deadline`).
  void AwaitTable(uint32_t table, const Waiter& creator, uint64_t update_id, Clock::time_point deadline,
                  std::set<uint32_t> servers);

  // Server `server` acknowledged every update up to `update_id`.
  Answers Ack(uint32_t server, uint64_t update_id);
  // Table definitions some server did not confirm by `now`: their
  // creators, each with its error (Unavailable naming the servers).
  std::vector<std::pair<Waiter, Status>> Expire(Clock::time_point now);
  // A rollback: no shard map (not ready); the table definitions waiting
  // for servers are dropped, their creators returned to be refused. The
  // tables and the requests waiting for readiness are kept.
  std::vector<Waiter> RollBack();

 private:
  // What the acknowledgements so far complete: a published map, the ready
  // cluster, defined tables.
  Answers Settle();

  struct PendingTable {
    uint32_t table_id;
    Waiter creator;
    std::set<uint32_t> waiting_for;  // server ranks yet to ack
    uint64_t update_id;
    Clock::time_point deadline;
  };

  // Run()'s thread owns all of these.
  std::vector<TableSpec> tables_;  // index = id
  ShardMap map_;
  ShardMap published_map_;
  uint32_t replicas_ = 1;
  uint32_t groups_ = 0;  // (0: one per server)
  uint64_t resumed_version_ = 0;
  std::vector<std::vector<uint32_t>> resumed_replicas_;
  uint64_t change_update_id_ = 0;        // the update carrying map_ when it is not published yet
  std::set<uint32_t> change_waiting_;    // servers yet to acknowledge it
  bool ready_ = false;                   // every server acknowledged the first map
  uint64_t map_update_id_ = 0;           // the update carrying it (0: not sent)
  std::set<uint32_t> map_waiting_;       // servers yet to acknowledge it
  std::vector<Waiter> cluster_waiters_;  // GetCluster before every server holds the map
  // CreateTable of a known table while a resumed cluster is not ready: the
  // asker and the table.
  std::vector<std::pair<Waiter, uint32_t>> table_waiters_;
  std::vector<PendingTable> pending_;
};

}  // namespace shardps
