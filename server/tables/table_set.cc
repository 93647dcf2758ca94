#include "server/tables/table_set.h"

#include <algorithm>
#include <string>

#include "common/base/log.h"
#include "common/cluster/partition.h"

namespace shardps {

uint64_t TableSet::Bytes() const {
  uint64_t b = 0;
  for (const auto& t : tables_)
    if (t) b += t->bytes();
  return b;
}

Status TableSet::OpenColdTier() {
  if (cold_) return Status::OK();
  const std::string dir = cold_dir_.empty() ? ColdDirOf("", rank_) : cold_dir_;
  SHARDPS_RETURN_IF_ERROR(ColdStore::Open(dir, &cold_));
  LOG_INFO << "cold tier of tiered tables in " << dir << " (" << cold_->FreeBytes() / (1 << 20) << " MiB free)";
  return Status::OK();
}

void TableSet::UpdateHotLimits(bool force) {
  uint64_t fixed = 0, tiered = 0;
  for (const auto& t : tables_)
    if (t) (t->tiered() ? tiered : fixed) += t->tiered() ? 1 : t->bytes();
  if (tiered == 0) return;
  const uint64_t usable = budget_ / 10 * 9;
  const uint64_t hot = usable > fixed + kColdReserve ? usable - fixed - kColdReserve : 0;
  if (!force && hot / tiered == hot_each_) return;
  hot_each_ = hot / tiered;
  for (auto& t : tables_)
    if (t && t->tiered()) t->SetHotLimit(hot_each_);
}

TableSet::TierTotals TableSet::Totals() const {
  TierTotals s;
  for (const auto& t : tables_) {
    if (!t || !t->tiered()) continue;
    const ServerTable::TierCounts& c = t->tier_counts();
    s.hot_rows += t->sparse_rows() - c.cold_rows;
    s.cold_rows += c.cold_rows;
    s.hits += c.hits;
    s.reads += c.reads;
    s.moved_down += c.moved_down;
  }
  return s;
}

bool TableSet::Balance(uint64_t max_rows) {
  if (!cold_) return false;
  UpdateHotLimits();  // (the other tables' rows come and go)
  bool more = false;
  for (auto& t : tables_) {
    if (!t || !t->tiered()) continue;
    bool m = false;
    t->MoveDownSome(max_rows, &m);
    more |= m;
  }
  return more;
}

Status TableSet::CheckDisk(const ServerTable& t, uint64_t rows, const std::string& what) const {
  // (x 2: universal compaction may hold a file's rows twice while it merges)
  const uint64_t need = 2 * rows * (t.sparse_record_bytes() + 16), free = cold_->FreeBytes();
  if (free >= need + kDiskReserve) return Status::OK();
  return Status::TooLarge(what + " of sparse table '" + t.spec().name + "' need " + std::to_string(need) +
                          " bytes of disk on server " + std::to_string(rank_) + "; its cold tier (" + cold_->dir() +
                          ") has " + std::to_string(free) + " bytes free, " + std::to_string(kDiskReserve) +
                          " of them kept free");
}

void TableSet::SetClock(int64_t clock) {
  for (auto& t : tables_)
    if (t) t->SetClock(clock);
}

void TableSet::EvictSome(uint64_t max_slots) {
  for (auto& t : tables_)
    if (t) t->EvictSome(max_slots);
}

Status TableSet::CheckSparseGrowth(const ServerTable& t, const uint64_t* keys, uint64_t n) const {
  const TableSpec& spec = t.spec();
  // This server's share of max_rows: by its share of the partitions.
  const uint64_t parts = std::max<uint64_t>(1, partitions_);
  const uint64_t share =
      spec.max_rows == 0 ? UINT64_MAX
                         : static_cast<uint64_t>((static_cast<unsigned __int128>(spec.max_rows) * owned_partitions_ +
                                                  parts - 1) / parts);
  auto past_share = [&](uint64_t fresh) {
    return Status::TooLarge("sparse table '" + spec.name + "' holds " + std::to_string(t.sparse_rows()) +
                            " rows on server " + std::to_string(rank_) + "; " + std::to_string(fresh) +
                            " new ids would pass its share (" + std::to_string(share) + ") of max_rows " +
                            std::to_string(spec.max_rows));
  };
  if (t.tiered()) {  // rows past the hot tier go to disk: the disk is what limits them
    uint64_t fresh = n, grow = 0;
    if (t.sparse_rows() + n > share || cold_->FreeBytes() < 2 * n * (t.sparse_record_bytes() + 16) + kDiskReserve)
      fresh = t.CountCreated(keys, n, &grow);
    if (fresh == 0) return Status::OK();
    if (t.sparse_rows() + fresh > share) return past_share(fresh);
    return CheckDisk(t, fresh, std::to_string(fresh) + " new rows");
  }
  const uint64_t used = Bytes();
  // Cheap first: even if every id were new (a record and index room each,
  // and a new chunk of records in every partition), would it fit?
  const uint64_t worst_bytes = n * (t.sparse_record_bytes() + 8) + owned_partitions_ * (1u << 20);
  if (t.sparse_rows() + n <= share && used + worst_bytes <= budget_) return Status::OK();
  uint64_t grow = 0;
  const uint64_t fresh = t.CountCreated(keys, n, &grow);
  if (fresh == 0) return Status::OK();
  if (t.sparse_rows() + fresh > share) return past_share(fresh);
  if (used + grow > budget_)
    return Status::TooLarge("server " + std::to_string(rank_) + " holds " + std::to_string(used) +
                            " bytes of tables; " + std::to_string(fresh) + " new rows of sparse table '" + spec.name +
                            "' would pass its memory budget of " + std::to_string(budget_) + " bytes");
  return Status::OK();
}

Status TableSet::Define(const ClusterView& v, const std::vector<uint32_t>& owned) {
  partitions_ = v.map.partitions();
  owned_partitions_ = owned.size();
  tables_.resize(v.tables.size());
  for (const auto& spec : v.tables) {
    if (refused_.count(spec.id)) continue;
    if (ServerTable* t = tables_[spec.id].get()) {
      // Held already: a copy of another group filled here (re-replication)
      // adds its partitions, within the budget.
      std::vector<uint32_t> more;
      for (uint32_t p : owned)
        if (!t->Holds(p)) more.push_back(p);
      if (more.empty()) continue;
      const uint64_t need = ServerTable::BudgetBytes(spec, partitions_, more), used = Bytes();
      if (used + need > budget_)
        return Status::TooLarge("table '" + spec.name + "': " + std::to_string(more.size()) + " more partitions need " +
                                std::to_string(need) + " bytes here, " + std::to_string(used) + " of the " +
                                std::to_string(budget_) + "-byte memory budget are in use");
      try {
        t->AddPartitions(more, /*initialize=*/false);  // (a fill overwrites every row: not initialised first)
      } catch (const std::bad_alloc&) {
        return Status::TooLarge("table '" + spec.name + "': allocating " + std::to_string(need) + " bytes failed");
      }
      LOG_INFO << "holding " << more.size() << " more partitions of table '" << spec.name << "' (" << owned.size()
               << " of " << partitions_ << ")";
      UpdateHotLimits(/*force=*/true);
      continue;
    }
    // The coordinator checks every table against the servers' budgets
    // before it defines one; this is the last line: never allocate past
    // the budget, and never die of a failed allocation.
    const uint64_t need = ServerTable::BudgetBytes(spec, partitions_, owned), used = Bytes();
    if (used + need > budget_) {
      LOG_ERROR << "table '" << spec.name << "' needs " << need << " bytes here, " << used << " of the " << budget_
                << "-byte memory budget are in use: not holding it";
      refused_.insert(spec.id);
      continue;
    }
    const bool restoring = restore_ && spec.kind == TableKind::kDense && restore_->Covers(spec);
    try {
      tables_[spec.id] = std::make_unique<ServerTable>(spec, partitions_, owned, !restoring);
    } catch (const std::bad_alloc&) {
      LOG_ERROR << "table '" << spec.name << "': allocating " << need << " bytes failed: not holding it";
      refused_.insert(spec.id);
      continue;
    }
    if (spec.cold_tier && spec.kind == TableKind::kSparse) {
      Status cs = OpenColdTier();
      if (cs.ok() && spec.max_rows > 0) {
        const uint64_t share = (spec.max_rows * owned.size() + partitions_ - 1) / partitions_;
        cs = CheckDisk(*tables_[spec.id], share, "its share of max_rows (" + std::to_string(share) + " rows)");
      }
      if (!cs.ok()) {
        LOG_ERROR << "table '" << spec.name << "' (cold tier): " << cs.message() << ": not holding it";
        tables_[spec.id].reset();
        refused_.insert(spec.id);
        continue;
      }
      tables_[spec.id]->AttachColdTier(cold_.get());
      UpdateHotLimits(/*force=*/true);
    }
    if (restore_) {
      if (Status rs = restore_->Fill(spec, *tables_[spec.id]); !rs.ok()) return rs;
      tables_[spec.id]->ForgetChanges();  // (every row restored: its first cut is full anyway)
    }
    LOG_INFO << "holding table '" << spec.name << "' (" << ToString(spec.kind) << ", " << owned.size() << " of "
             << partitions_ << " partitions, " << tables_[spec.id]->rows_held() << " rows)";
  }
  return Status::OK();
}

}  // namespace shardps
