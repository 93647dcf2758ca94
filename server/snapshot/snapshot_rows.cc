#include "server/snapshot/snapshot_rows.h"

#include <string>

#include "common/base/log.h"

namespace shardps::snapshot {

Status SnapshotRows::Load() {
  if (loaded_) return Status::OK();
  SHARDPS_RETURN_IF_ERROR(ReadManifest(dir_, &manifest_));
  loaded_ = true;
  return Status::OK();
}

bool SnapshotRows::Covers(const TableSpec& spec) {
  if (!Load().ok()) return false;
  uint64_t rows = 0;
  bool same = false;
  for (const auto& m : manifest_.tables) same |= m.id == spec.id && m.SameShape(spec);
  for (const auto& p : manifest_.parts)
    if (p.table == spec.id) rows += p.rows;
  return same && rows == spec.rows;
}

Status SnapshotRows::Fill(const TableSpec& spec, ServerTable& t) {
  SHARDPS_RETURN_IF_ERROR(Load());
  const TableSpec* saved = nullptr;
  for (const auto& m : manifest_.tables)
    if (m.id == spec.id) saved = &m;
  if (!saved) return Status::OK();  // a table created after the snapshot
  if (!saved->SameShape(spec))
    return Status::Conflict("table '" + spec.name + "' differs from the one in " + dir_);
  uint64_t rows = 0;
  for (uint32_t p = 0; p < t.partitions(); ++p) {
    if (!t.Holds(p)) continue;
    // A row is imported only into the partition it belongs to: a damaged
    // or foreign file must not write outside the table.
    Status bad;
    Status s = ForEachRow(dir_, manifest_, spec.id, p, [&](uint64_t row, const float* values, uint32_t) {
      if (!bad.ok()) return;
      if (!t.RowInPartition(row, p)) {
        bad = Status::BadMessage("snapshot " + dir_ + ": row " + std::to_string(row) + " of table '" + spec.name +
                                 "' is stored under partition " + std::to_string(p) + ", which does not hold it");
        return;
      }
      t.Import(row, values);
      ++rows;
    });
    if (!s.ok()) return s;
    if (!bad.ok()) return bad;
    if (spec.kind == TableKind::kSparse && spec.admit_after > 1) {
      std::string sketch;
      SHARDPS_RETURN_IF_ERROR(ReadAdmission(dir_, manifest_, spec.id, p, &sketch));
      if (!sketch.empty() && !t.ImportAdmission(p, sketch))
        return Status::BadMessage("snapshot " + dir_ + ": the admission sketch of table '" + spec.name +
                                  "' partition " + std::to_string(p) + " is corrupt");
    }
  }
  LOG_INFO << "restored " << rows << " rows of table '" << spec.name << "' from " << dir_;
  return Status::OK();
}

}  // namespace shardps::snapshot
