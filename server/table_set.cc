#include "server/table_set.h"

#include <algorithm>
#include <string>

#include "common/log.h"
#include "common/partition.h"

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
    const bool restoring = !v.restore_from.empty() && spec.kind == TableKind::kDense && RestoreCovers(v, spec);
    try {
      tables_[spec.id] = std::make_unique<ServerTable>(spec, partitions_, owned, !restoring);
    } catch (const std::bad_alloc&) {
      LOG_ERROR << "table '" << spec.name << "': allocating " << need << " bytes failed: not holding it";
      refused_.insert(spec.id);
      continue;
    }
    if (!v.restore_from.empty())
      if (Status rs = Restore(v, spec); !rs.ok()) return rs;
    LOG_INFO << "holding table '" << spec.name << "' (" << ToString(spec.kind) << ", " << owned.size() << " of "
             << partitions_ << " partitions, " << tables_[spec.id]->rows_held() << " rows)";
  }
  return Status::OK();
}

bool TableSet::RestoreCovers(const ClusterView& v, const TableSpec& spec) {
  if (!restore_loaded_) {
    if (!snapshot::ReadManifest(v.restore_from, &restore_manifest_).ok()) return false;
    restore_loaded_ = true;
  }
  uint64_t rows = 0;
  bool same = false;
  for (const auto& t : restore_manifest_.tables) same |= t.id == spec.id && t.SameShape(spec);
  for (const auto& p : restore_manifest_.parts)
    if (p.table == spec.id) rows += p.rows;
  return same && rows == spec.rows;
}

Status TableSet::Restore(const ClusterView& v, const TableSpec& spec) {
  if (!restore_loaded_) {
    Status s = snapshot::ReadManifest(v.restore_from, &restore_manifest_);
    if (!s.ok()) return s;
    restore_loaded_ = true;
  }
  const TableSpec* saved = nullptr;
  for (const auto& t : restore_manifest_.tables)
    if (t.id == spec.id) saved = &t;
  if (!saved) return Status::OK();  // a table created after the snapshot
  if (!saved->SameShape(spec))
    return Status::Conflict("table '" + spec.name + "' differs from the one in " + v.restore_from);
  ServerTable& t = *tables_[spec.id];
  uint64_t rows = 0;
  for (uint32_t p = 0; p < partitions_; ++p) {
    if (!t.Holds(p)) continue;
    // A row is imported only into the partition it belongs to: a damaged
    // or foreign file must not write outside the table.
    Status bad;
    Status s = snapshot::ForEachRow(v.restore_from, restore_manifest_, spec.id, p,
                                    [&](uint64_t row, const float* values, uint32_t) {
                                      if (!bad.ok()) return;
                                      if (!t.RowInPartition(row, p)) {
                                        bad = Status::BadMessage("snapshot " + v.restore_from + ": row " +
                                                                 std::to_string(row) + " of table '" + spec.name +
                                                                 "' is stored under partition " + std::to_string(p) +
                                                                 ", which does not hold it");
                                        return;
                                      }
                                      t.Import(row, values);
                                      ++rows;
                                    });
    if (!s.ok()) return s;
    if (!bad.ok()) return bad;
    if (spec.kind == TableKind::kSparse && spec.admit_after > 1) {
      std::string sketch;
      SHARDPS_RETURN_IF_ERROR(snapshot::ReadAdmission(v.restore_from, restore_manifest_, spec.id, p, &sketch));
      if (!sketch.empty() && !t.ImportAdmission(p, sketch))
        return Status::BadMessage("snapshot " + v.restore_from + ": the admission sketch of table '" + spec.name +
                                  "' partition " + std::to_string(p) + " is corrupt");
    }
  }
  LOG_INFO << "restored " << rows << " rows of table '" << spec.name << "' from " << v.restore_from;
  return Status::OK();
}

}  // namespace shardps
