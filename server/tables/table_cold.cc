// ServerTable's cold tier (server/tables/table.h, "Tiered tables"): rows
// moved up on use in one batched read per partition, moved down by a CLOCK
// in sorted batches, and the cold rows seen by exports, snapshots, restores
// and eviction as the hot ones are.
#include <algorithm>
#include <cstring>

#include "common/base/log.h"
#include "common/cluster/partition.h"
#include "server/tables/cold_store.h"
#include "server/tables/table.h"

namespace shardps {

namespace {
constexpr uint8_t kTaken = 2;  // a use byte: picked by this call's hand
}  // namespace

void ServerTable::AttachColdTier(ColdStore* cold) {
  if (spec_.kind != TableKind::kSparse) return;
  tier_.cold = cold;
  tier_.raw.resize(sparse_record_bytes() ? sparse_record_bytes() : SparseRows::RecordBytes(spec_.cols,
                   static_cast<uint32_t>(state_width_), spec_.dtype));
}

void ServerTable::SetHotLimit(uint64_t bytes) {
  tier_.hot_limit = bytes;
  uint32_t held = 0;
  for (const auto& p : sparse_) held += p != nullptr;
  // A row costs its record, the index's 4 bytes at 80 % load at most, and
  // its use bit's byte.
  const uint64_t per_row = SparseRows::RecordBytes(spec_.cols, static_cast<uint32_t>(state_width_), spec_.dtype) + 6;
  tier_.part_rows = held ? std::max<uint64_t>(64, bytes / held / per_row) : UINT64_MAX;
}

void ServerTable::TierFailed(const std::string& what) {
  if (tier_.error != what) LOG_ERROR << "table '" << spec_.name << "': " << what;
  tier_.error = what;
}

bool ServerTable::ColdRow(uint64_t id, uint8_t* raw) const {
  const uint32_t p = PartitionOfKey(id);
  const SparsePart& part = *sparse_[p];
  if (!tier_.cold || part.cold_rows == 0) return false;
  return tier_.cold->Get(spec_.id, p, id, part.rows.raw_bytes(), raw);
}

void ServerTable::ForgetChanges() {
  for (auto& p : sparse_)
    if (p) p->rows.ForgetChanges();
}

Status ServerTable::Promote(const uint64_t* keys, size_t n, bool count) {
  if (!tier_.cold) return Status::OK();
  // The ids not in memory, of partitions with cold rows, by partition.
  std::vector<std::pair<uint32_t, uint64_t>> wanted;
  for (size_t i = 0; i < n; ++i) {
    PrefetchAhead(keys, n, i);
    const uint32_t p = PartitionOfKey(keys[i]);
    SparsePart& part = *sparse_[p];
    const uint32_t slot = part.rows.Find(keys[i]);
    if (slot != SparseRows::kNone) {
      part.Use(slot);
      tier_.counts.hits += count;
    } else if (part.cold_rows > 0) {
      wanted.emplace_back(p, keys[i]);
    }
  }
  if (wanted.empty()) return Status::OK();
  std::sort(wanted.begin(), wanted.end());
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  std::vector<uint64_t> ids;
  std::vector<uint8_t> found, buf;
  for (size_t i = 0; i < wanted.size();) {
    const uint32_t p = wanted[i].first;
    size_t j = i;
    ids.clear();
    while (j < wanted.size() && wanted[j].first == p) ids.push_back(wanted[j++].second);
    i = j;
    SparsePart& part = *sparse_[p];
    const size_t rb = part.rows.raw_bytes();
    buf.resize(ids.size() * rb);
    SHARDPS_RETURN_IF_ERROR(tier_.cold->MultiGet(spec_.id, p, ids.data(), ids.size(), rb, buf.data(), &found));
    const uint64_t before = part.rows.bytes();
    for (size_t k = 0; k < ids.size(); ++k) {
      if (!found[k]) continue;  // a new id: made by a push, if one comes
      const uint32_t slot = part.rows.Insert(ids[k], /*changed=*/false);
      part.rows.set_raw(slot, buf.data() + k * rb);
      part.Use(slot);
      tier_.cold->Delete(spec_.id, p, ids[k]);
      --part.cold_rows;
      --tier_.counts.cold_rows;
      ++tier_.counts.reads;
    }
    bytes_ = bytes_ - before + part.rows.bytes();
    part.rows.set_rows_elsewhere(part.cold_rows);
  }
  if (Status s = tier_.cold->Commit(); !s.ok()) {  // (stale copies below live rows: the server stops)
    TierFailed(s.message());
    return s;
  }
  return Status::OK();
}

uint64_t ServerTable::MoveDownSome(uint64_t max_rows, bool* more) {
  *more = false;
  if (!tier_.cold || tier_.part_rows == UINT64_MAX) return 0;
  uint64_t moved = 0;
  for (uint32_t p = 0; p < partitions_ && moved < max_rows; ++p) {
    SparsePart* part = sparse_[p].get();
    if (!part || part->rows.size() <= tier_.part_rows) continue;
    const uint64_t low = tier_.part_rows - tier_.part_rows / 10;  // down to 90 %
    const uint64_t want = std::min(part->rows.size() - low, max_rows - moved);
    const uint64_t got = MoveDownPartition(p, want);
    moved += got;
    if (got == 0) break;  // (the tier failed: logged; rows stay in memory)
  }
  for (uint32_t p = 0; p < partitions_ && !*more; ++p)
    *more = sparse_[p] && sparse_[p]->rows.size() > tier_.part_rows && tier_.error.empty();
  return moved;
}

uint64_t ServerTable::MoveDownPartition(uint32_t p, uint64_t rows) {
  SparsePart& part = *sparse_[p];
  const uint32_t slots = part.rows.slots();
  if (slots == 0 || rows == 0) return 0;
  if (part.used.size() < slots) part.used.resize(slots, 0);
  // CLOCK: a used row loses its bit and stays; one without is taken. Two
  // turns of the hand find `rows` victims whatever the bits were.
  std::vector<std::pair<uint64_t, uint32_t>> victims;
  victims.reserve(rows);
  for (uint64_t looked = 0; victims.size() < rows && looked < 2ull * slots; ++looked) {
    const uint32_t s = part.hand;
    part.hand = part.hand + 1 >= slots ? 0 : part.hand + 1;
    if (!part.rows.live(s) || part.used[s] == kTaken) continue;
    if (part.used[s]) {
      part.used[s] = 0;
      continue;
    }
    part.used[s] = kTaken;  // (the hand's second turn passes it again)
    victims.emplace_back(part.rows.id(s), s);
  }
  std::sort(victims.begin(), victims.end());  // sorted batches: RocksDB's memtable and files take them in order
  const size_t rb = part.rows.raw_bytes();
  for (const auto& [id, s] : victims) tier_.cold->Put(spec_.id, p, id, part.rows.raw(s), rb);
  if (Status st = tier_.cold->Commit(); !st.ok()) {
    for (const auto& v : victims) part.used[v.second] = 1;
    TierFailed("moving " + std::to_string(victims.size()) + " rows to the cold tier failed (they stay in memory): " +
               st.message());
    return 0;
  }
  const uint64_t before = part.rows.bytes();
  for (const auto& [id, s] : victims) {
    part.rows.Erase(s, /*changed=*/false);
    part.used[s] = 0;
  }
  bytes_ = bytes_ - before + part.rows.bytes();
  part.cold_rows += victims.size();
  part.rows.set_rows_elsewhere(part.cold_rows);
  tier_.counts.cold_rows += victims.size();
  tier_.counts.moved_down += victims.size();
  return victims.size();
}

uint64_t ServerTable::EvictCold(uint64_t max_rows, uint32_t limit, uint32_t now) {
  // One partition's cold rows at a time, from where the last call stopped;
  // a whole sweep at most once per stamp (clock or second): nothing on disk
  // gets idler between two.
  if (tier_.swept_at == now) return 0;
  uint64_t removed = 0, looked = 0;
  for (uint32_t visited = 0; visited < partitions_ && looked < max_rows; ++visited) {
    const uint32_t p = tier_.sweep_partition;
    SparsePart* part = sparse_[p].get();
    if (part && part->cold_rows > 0) {
      bool done = false;
      std::vector<uint64_t> stale;
      part->cold_sweep = tier_.cold->Scan(spec_.id, p, part->cold_sweep, &done, [&](uint64_t id, std::string_view v) {
        const uint32_t s = v.size() >= 4 ? SparseRows::RawStamp(reinterpret_cast<const uint8_t*>(v.data())) : 0;
        if (now > s && now - s >= limit) stale.push_back(id);
        return ++looked < max_rows;
      });
      for (uint64_t id : stale) tier_.cold->Delete(spec_.id, p, id);
      if (Status s = tier_.cold->Commit(); !s.ok()) {
        TierFailed(s.message());
        return removed;
      }
      // Removed rows are changes (snapshots of what changed list them gone).
      for (uint64_t id : stale) part->rows.MarkGone(id);
      part->cold_rows -= stale.size();
      part->rows.set_rows_elsewhere(part->cold_rows);
      tier_.counts.cold_rows -= stale.size();
      sparse_rows_ -= stale.size();
      counts_.evicted += stale.size();
      removed += stale.size();
      if (!done) break;
      part->cold_sweep = 0;
    }
    tier_.sweep_partition = (p + 1) % partitions_;
    if (tier_.sweep_partition == 0) {
      tier_.swept_at = now;
      break;
    }
  }
  return removed;
}

void ServerTable::CollectColdIds(uint32_t p, std::vector<uint64_t>* out) const {
  const SparsePart& part = *sparse_[p];
  if (!tier_.cold || part.cold_rows == 0) return;
  bool done = false;
  tier_.cold->Scan(spec_.id, p, 0, &done, [&](uint64_t id, std::string_view) {
    out->push_back(id);
    return true;
  });
}

void ServerTable::EncodeRawRow(const SparsePart& part, const uint8_t* raw, float* row) const {
  const uint32_t c = spec_.cols, sw = static_cast<uint32_t>(state_width_);
  part.rows.LoadRawValues(raw, row);
  std::memcpy(row + c, part.rows.RawState(raw), sw * sizeof(float));
  if (RowStride(spec_) > c + sw) std::memcpy(row + c + sw, raw, 4);  // the stamp's bits
}

}  // namespace shardps
