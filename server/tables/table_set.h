// TableSet: the tables this server holds — its partitions of each, by table
// id — within its memory budget. A table is made when a cluster view first
// defines it (and filled from a RowSource, the job's snapshot, when the job
// restores);
// one that would pass the budget, or whose allocation fails, is refused
// and never held.
//
// Thread: the server's event loop owns it; no locks. SnapshotCut reads the
// tables (all()) on the same thread.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <vector>

#include "common/cluster/cluster.h"
#include "server/tables/cold_store.h"
#include "server/tables/row_source.h"
#include "server/tables/table.h"
#include "shardps/status.h"

namespace shardps {

class TableSet {
 public:
  explicit TableSet(uint64_t memory_budget) : budget_(memory_budget) {}

  // Where the cold tier of tiered tables goes (opened when the first one
  // is defined; "": ColdDirOf the working directory and this rank).
  void SetColdDir(std::string dir) { cold_dir_ = std::move(dir); }
  const ColdStore* cold() const { return cold_.get(); }
  // Tiered tables: rows past the hot tier's share of the budget go down,
  // at most `max_rows` per call (between requests); true while some table
  // is still past its share. The hot tier of all tiered tables together
  // is 90 % of the budget less the other tables' bytes and kColdReserve
  // (RocksDB's memtables and block cache), split evenly.
  bool Balance(uint64_t max_rows);
  // The tiered tables' counts added up (hot_rows: rows in memory).
  struct TierTotals {
    uint64_t hot_rows = 0, cold_rows = 0, hits = 0, reads = 0, moved_down = 0;
  };
  TierTotals Totals() const;
  // The cold tier's first failure (Internal, naming it), or OK: a server
  // whose tier failed stops, its replicas take over.
  Status ColdTierFailure() const {
    return cold_ && !cold_->failure().empty() ? Status::Internal(cold_->failure()) : Status::OK();
  }
  static constexpr uint64_t kColdReserve = 96ull << 20;
  // Free bytes a tiered table leaves on its cold tier's disk: rows that
  // would take them are refused.
  static constexpr uint64_t kDiskReserve = 256ull << 20;

  // The job restores: every table made from now on is filled from `rows`
  // (the snapshot it restores from, server/snapshot/snapshot_rows.h).
  void RestoreFrom(std::unique_ptr<RowSource> rows) { restore_ = std::move(rows); }
  bool restoring() const { return restore_ != nullptr; }
  // Makes every table of `v` not held or refused yet, holding `held` (the
  // partitions of every replica group this server has a copy of), and
  // fills each from the RowSource when the job restores. REQUIRES
  // v.complete(). Returns why a restore failed (the server cannot serve
  // then).
  Status Define(const ClusterView& v, const std::vector<uint32_t>& held);
  // The partitions server `rank` holds a copy of, by the map of `v`.
  Status Define(const ClusterView& v, uint32_t rank) {
    rank_ = rank;
    return Define(v, v.map.HeldBy(rank));
  }
  // Names this server in messages (its rank).
  void set_rank(uint32_t rank) { rank_ = rank; }
  // A complete view was defined: requests may be served.
  bool ready() const { return partitions_ > 0; }

  size_t size() const { return tables_.size(); }
  ServerTable* get(uint32_t id) const { return id < tables_.size() ? tables_[id].get() : nullptr; }  // null: not held
  bool refused(uint32_t id) const { return refused_.count(id) > 0; }
  const std::vector<std::unique_ptr<ServerTable>>& all() const { return tables_; }
  uint32_t rank() const { return rank_; }

  // Bytes of the tables held now, against the memory budget.
  uint64_t Bytes() const;
  // Every table's clock for sparse rows' stamps (ServerTable::SetClock),
  // and a bounded eviction sweep over them (ServerTable::EvictSome): at
  // most `max_slots` rows looked at per table.
  void SetClock(int64_t clock);
  void EvictSome(uint64_t max_slots);
  uint64_t budget() const { return budget_; }
  // A sparse request that would create rows: TooLarge when past this
  // server's share of the table's max_rows (by its share of the partitions)
  // or the memory budget.
  Status CheckSparseGrowth(const ServerTable& t, const uint64_t* keys, uint64_t n) const;

 private:
  const uint64_t budget_;
  uint32_t rank_ = 0;
  uint32_t partitions_ = 0;        // of the shard map (0: none yet)
  uint64_t owned_partitions_ = 0;  // partitions this server holds (the shard map)
  // Splits the hot tier over the tiered tables (again only when the other
  // tables' bytes changed it, unless `force`: partitions were added).
  void UpdateHotLimits(bool force = false);
  Status OpenColdTier();
  Status CheckDisk(const ServerTable& t, uint64_t rows, const std::string& what) const;

  std::string cold_dir_;
  uint64_t hot_each_ = UINT64_MAX;  // UpdateHotLimits: each tiered table's hot tier as last set
  std::unique_ptr<ColdStore> cold_;  // (made before the tables that use it, gone after them)
  std::vector<std::unique_ptr<ServerTable>> tables_;  // by table id
  std::set<uint32_t> refused_;  // over the budget: not held (requests get TooLarge)
  std::unique_ptr<RowSource> restore_;  // null: the job does not restore
};

}  // namespace shardps
