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
  const uint64_t used = Bytes();
  // Cheap first: even if every id were new (a record and index room each,
  // and a new chunk of records in every partition), would it fit?
  const uint64_t worst_bytes = n * (t.sparse_record_bytes() + 8) + owned_partitions_ * (1u << 20);
  if (t.sparse_rows() + n <= share && used + worst_bytes <= budget_) return Status::OK();
  uint64_t grow = 0;
  const uint64_t fresh = t.CountCreated(keys, n, &grow);
  if (fresh == 0) return Status::OK();
  if (t.sparse_rows() + fresh > share)
    return Status::TooLarge("sparse table '" + spec.name + "' holds " + std::to_string(t.sparse_rows()) +
                            " rows on server " + std::to_string(rank_) + "; " + std::to_string(fresh) +
                            " new ids would pass its share (" + std::to_string(share) + ") of max_rows " +
                            std::to_string(spec.max_rows));
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
    if (restore_)
      if (Status rs = restore_->Fill(spec, *tables_[spec.id]); !rs.ok()) return rs;
    LOG_INFO << "holding table '" << spec.name << "' (" << ToString(spec.kind) << ", " << owned.size() << " of "
             << partitions_ << " partitions, " << tables_[spec.id]->rows_held() << " rows)";
  }
  return Status::OK();
}

}  // namespace shardps
