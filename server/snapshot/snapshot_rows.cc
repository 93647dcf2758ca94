#include "server/snapshot/snapshot_rows.h"

#include <string>

#include "common/base/log.h"

namespace shardps::snapshot {

Status SnapshotRows::Load() {
  if (loaded_) return Status::OK();
  SHARDPS_RETURN_IF_ERROR(chain_.Open(dir_));
  loaded_ = true;
  return Status::OK();
}

bool SnapshotRows::Covers(const TableSpec& spec) {
  if (!Load().ok()) return false;
  const Manifest& m = chain_.head().m;
  bool same = false;
  for (const auto& t : m.tables) same |= t.id == spec.id && t.SameShape(spec);
  if (!same) return false;
  // Every row: the full parts' rows (a dense table's parts of what changed
  // are empty or full).
  uint64_t rows = 0;
  std::vector<Chain::Link> links;
  for (const auto& p : m.parts) {
    if (p.table != spec.id) continue;
    if (!chain_.Links(p.table, p.partition, &links).ok()) return false;
    for (const auto& l : links) rows += l.part->full() ? l.part->rows : 0;
  }
  return rows == spec.rows;
}

Status SnapshotRows::Fill(const TableSpec& spec, ServerTable& t) {
  SHARDPS_RETURN_IF_ERROR(Load());
  const TableSpec* saved = nullptr;
  const Manifest& head = chain_.head().m;
  for (const auto& m : head.tables)
    if (m.id == spec.id) saved = &m;
  if (!saved) return Status::OK();  // a table created after the snapshot
  if (!saved->SameShape(spec))
    return Status::Conflict("table '" + spec.name + "' differs from the one in " + dir_);
  uint64_t rows = 0;
  for (uint32_t p = 0; p < t.partitions(); ++p) {
    if (!t.Holds(p)) continue;
    // A row is imported only into the partition it belongs to: a damaged
    // or foreign file must not write outside the table. The full part
    // first, then what changed since, oldest first.
    std::vector<Chain::Link> links;
    SHARDPS_RETURN_IF_ERROR(chain_.Links(spec.id, p, &links));
    for (const auto& l : links) {
      Status bad;
      Status s = ForEachRow(l.snap->dir, l.snap->m, spec.id, p, [&](uint64_t row, const float* values, uint32_t) {
        if (!bad.ok()) return;
        if (!t.RowInPartition(row, p) || (!values && spec.kind != TableKind::kSparse)) {
          bad = Status::BadMessage("snapshot " + l.snap->dir + ": row " + std::to_string(row) + " of table '" +
                                   spec.name + "' is stored under partition " + std::to_string(p) +
                                   (values ? ", which does not hold it" : " as gone, in a dense table"));
          return;
        }
        if (values) {
          t.Import(row, values);
          ++rows;
        } else {
          t.EraseSparse(row);
        }
      });
      if (!s.ok()) return s;
      if (!bad.ok()) return bad;
    }
    if (spec.kind == TableKind::kSparse && spec.admit_after > 1) {
      std::string sketch;
      SHARDPS_RETURN_IF_ERROR(ReadAdmission(dir_, head, spec.id, p, &sketch));
      if (!sketch.empty() && !t.ImportAdmission(p, sketch))
        return Status::BadMessage("snapshot " + dir_ + ": the admission sketch of table '" + spec.name +
                                  "' partition " + std::to_string(p) + " is corrupt");
    }
  }
  LOG_INFO << "restored " << rows << " rows of table '" << spec.name << "' from " << dir_
           << (chain_.snaps().size() > 1 ? " and the " + std::to_string(chain_.snaps().size() - 1) + " snapshots of its chain" : "");
  return Status::OK();
}

}  // namespace shardps::snapshot
