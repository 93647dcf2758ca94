// ServerTable: the rows of one table that this server holds (the partitions
// the shard map assigns to it), their optimizer state, and the accumulator
// synchronous mode sums gradients into.
//
// Dense partitions are contiguous arrays (parameters, then optimizer state
// in a parallel array), so a row range is one pointer offset. Sparse rows
// (server/tables/sparse_rows.h) are created by an id's first push — or its
// admit_after-th (server/tables/admission.h) — and removed once idle for
// evict_after_clocks clocks or evict_after_sec seconds, a few at a time
// (EvictSome); their values are stored in the table's dtype, their state in
// float32 (docs/embeddings.md). Sparse code: table_sparse.cc.
//
// Every mutating call is preceded by a Check*() that validates the whole
// request, so a bad request leaves the table unchanged.
//
// Thread-safety: none; a server's event loop owns its tables.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <zmq.hpp>

#include "common/cluster/partition.h"
#include "server/tables/admission.h"
#include "server/tables/partition_data.h"
#include "server/tables/sparse_rows.h"
#include "shardps/status.h"
#include "shardps/types.h"

namespace shardps {

class ColdStore;

// An allocator that leaves new floats uninitialised: dense partitions are
// written in full right after allocation (initializer or restore), and a
// 1 GiB table should not be zeroed first.
template <typename T>
struct UninitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = UninitAllocator<U>;
  };
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
using FloatArray = std::vector<float, UninitAllocator<float>>;

class ServerTable {
 public:
  // `owned`: the partitions (of `partitions`) this server holds.
  // initialize = false leaves dense rows unset (a restore overwrites them all).
  ServerTable(const TableSpec& spec, uint32_t partitions, const std::vector<uint32_t>& owned, bool initialize = true);
  ServerTable(const ServerTable&) = delete;
  ServerTable& operator=(const ServerTable&) = delete;

  const TableSpec& spec() const { return spec_; }
  size_t state_width() const { return state_width_; }

  // OK, OutOfRange (past a dense table's rows, or an empty/inverted range;
  // ranges are for dense tables only) or WrongServer (a partition not held).
  Status CheckRange(uint64_t begin, uint64_t end) const;
  Status CheckKeys(const uint64_t* keys, size_t n) const;

  // out: (end - begin) x cols floats (dense tables).
  void ReadRange(uint64_t begin, uint64_t end, float* out) const;
  // The same rows as frames that point into the table (no copy): one frame
  // per extent the range touches (runs under 256 KiB are copied into one
  // frame instead), each holding a reference that keeps the rows as they
  // were until ZeroMQ has sent them (a push meanwhile copies first).
  void ReadRangeFrames(uint64_t begin, uint64_t end, std::vector<zmq::message_t>* frames) const;
  // The same rows in `type` (16-bit: rounded to nearest even), one pass
  // over the rows straight into `out`: a 16-bit pull of a dense table.
  void ReadRangeAs(uint64_t begin, uint64_t end, DType type, void* out) const;
  // n x cols floats. A sparse id without a row reads its initial values
  // (rounded to the table's dtype, as a row made now would hold them) and
  // creates nothing.
  void ReadKeys(const uint64_t* keys, size_t n, float* out) const;
  // The same in the table's dtype (what a pull reply carries): 16-bit
  // values are copied as stored. A dense table's rows in `type` (its
  // wire type, rounded to nearest even).
  void ReadKeysAs(const uint64_t* keys, size_t n, void* out, DType type = DType::kF32) const;
  // Bytes of one value on the wire and in a sparse row: DTypeBytes(dtype).
  uint32_t value_bytes() const { return DTypeBytes(spec_.dtype); }
  // Of `keys` (a sparse table), how many distinct ids a push of them would
  // give a row (absent, and admitted by this push), and what the table's
  // bytes() would grow by.
  uint64_t CountCreated(const uint64_t* keys, size_t n, uint64_t* bytes) const;
  // Sparse rows held, and the bytes the table holds (parameters, optimizer
  // state, sparse records and indexes): what counts against a memory budget.
  uint64_t sparse_rows() const { return sparse_rows_; }
  uint64_t bytes() const { return bytes_; }
  // Bytes of one sparse row's record (id, stamp, state, values).
  uint64_t sparse_record_bytes() const;

  // What happened to sparse rows since the table was made (metrics).
  struct SparseCounts {
    uint64_t created = 0;       // rows made by a push
    uint64_t not_admitted = 0;  // gradients of ids not admitted yet, dropped
    uint64_t evicted = 0;       // rows removed as idle
  };
  const SparseCounts& sparse_counts() const { return counts_; }
  // The job's clock as this server sees it (sync: the clock being applied;
  // else the slowest live worker's): a sparse row updated now is stamped
  // with it (evict_after_clocks), or with the time (evict_after_sec).
  void SetClock(int64_t clock) { clock_ = clock; }
  // Removes rows idle past the table's eviction limit, looking at no more
  // than `max_slots` rows (so no request waits behind a whole sweep);
  // returns the rows removed. Each call goes on where the last one stopped,
  // one partition after the other, so repeated calls cover every row. A
  // no-op for tables without eviction.
  uint64_t EvictSome(uint64_t max_slots);
  // Tiered tables (spec.cold_tier; docs/embeddings.md, "Tables larger
  // than memory"): rows beyond the hot limit live in `cold` (the server's
  // ColdStore, which outlives the table). Every row is in one tier only; a
  // row read or updated is in memory (Promote), and the rows not used for
  // longest go down (MoveDownSome, a CLOCK: a use bit per row, a hand that
  // clears it and takes the rows whose bit is clear). bytes() counts the
  // hot tier only; sparse_rows() and rows_held() both tiers.
  void AttachColdTier(ColdStore* cold);
  bool tiered() const { return tier_.cold != nullptr; }
  // Brings the rows of keys[0, n) that are in the cold tier up (one
  // batched read per partition) and marks every one as used. A no-op for
  // untiered tables. Internal: the cold tier could not be read (nothing
  // changed).
  Status Promote(const uint64_t* keys, size_t n, bool count = true);
  // The bytes the hot tier may hold: split evenly over the held
  // partitions, rows past a partition's share go down.
  void SetHotLimit(uint64_t bytes);
  uint64_t hot_limit() const { return tier_.hot_limit; }
  // Moves rows of partitions past their share of the hot limit down to 90 %
  // of it, at most `max_rows` rows in sorted batches; *more: some partition
  // is still past its share.
  uint64_t MoveDownSome(uint64_t max_rows, bool* more);
  struct TierCounts {
    uint64_t hits = 0;        // ids of pulls and pushes found in memory
    uint64_t reads = 0;       // ... and read from the cold tier (then moved up)
    uint64_t moved_down = 0;  // rows written to the cold tier
    uint64_t cold_rows = 0;   // rows in the cold tier now
  };
  const TierCounts& tier_counts() const { return tier_.counts; }

  // Dense bytes a server holding `owned` partitions needs for `spec`.
  static uint64_t DenseBytes(const TableSpec& spec, uint32_t partitions, const std::vector<uint32_t>& owned);
  // What a table may grow to on such a server, against its memory budget
  // when the table is defined: a dense table's bytes; a sparse table's
  // share of max_rows (by its share of the partitions) at a record and 8
  // bytes of index each; 0 for a sparse table without max_rows (its rows
  // are counted as pushes make them).
  static uint64_t BudgetBytes(const TableSpec& spec, uint32_t partitions, const std::vector<uint32_t>& owned);

  // Applies the optimizer to the rows, gradient scaled by `scale`, this
  // step's learning rate by `lr_scale` (server/tables/optimizer.h). A key repeated
  // within one call is applied once per occurrence. Each call is one update
  // of every partition it touches (see RangeVersion).
  void ApplyRange(uint64_t begin, uint64_t end, const float* g, float scale, float lr_scale = 1.0f);
  void ApplyKeys(const uint64_t* keys, size_t n, const float* g, float scale, float lr_scale = 1.0f);
  // Writes the rows themselves (`v`: cols floats a row; 16-bit tables round
  // to nearest) and resets their optimizer state; a sparse row missing is
  // made, admission aside (loading pretrained rows, a checkpoint). One
  // update of every partition touched, as an Apply* call.
  void AssignRange(uint64_t begin, uint64_t end, const float* v);
  void AssignKeys(const uint64_t* keys, size_t n, const float* v);

  // Versions, for staleness (docs/consistency.md, "Stale gradients"): each
  // partition counts the updates applied to it since this table was made
  // on this server (an Apply* call or an ApplyAccumulated touching it is
  // one). The version of some rows is the largest count among the
  // partitions they lie in: a pull reports it, and a push's staleness is
  // the version now minus the version its gradient was computed on.
  uint64_t RangeVersion(uint64_t begin, uint64_t end) const;
  uint64_t KeysVersion(const uint64_t* keys, size_t n) const;

  // Synchronous mode: sum gradients into the accumulator (in call order),
  // then apply the sum once, scaled by `scale`, and reset the accumulator.
  void AccumulateRange(uint64_t begin, uint64_t end, const float* g);
  void AccumulateKeys(const uint64_t* keys, size_t n, const float* g);
  void ApplyAccumulated(float scale);

  // Rows held: dense rows of owned partitions, sparse rows created so far.
  uint64_t rows_held() const;

  // Snapshots and fills: copies every held partition, rows ascending, parameters then
  // optimizer state per row (`table_id` labels the copies) — then, for a
  // table with eviction, the row's stamp (one more float, RowStride) —
  // and a sparse partition's admission sketch.
  void Export(uint32_t table_id, std::vector<PartitionData>* out) const;
  // The same for one held partition.
  void ExportPartition(uint32_t table_id, uint32_t partition, std::vector<PartitionData>* out) const;
  uint32_t partitions() const { return partitions_; }
  // Snapshots of what changed (a sparse table): one row as Export writes
  // it (RowStride floats; false: no row for `id`); a held partition's ids,
  // ascending; the ids changed in it since the last call, ascending and
  // distinct (false: too many to track, take every row:
  // SparseRows::TakeChanged); its admission sketch ("" none).
  bool ExportSparseRow(uint64_t id, float* out) const;
  void SparseIds(uint32_t partition, std::vector<uint64_t>* out) const;
  bool TakeChanged(uint32_t partition, std::vector<uint64_t>* ids);
  // Stops tracking what changed until the next TakeChanged (which then
  // says every row): after a restore, whose rows all count as changed.
  void ForgetChanges();
  std::string AdmissionBytes(uint32_t partition) const;
  // Restore of a snapshot of what changed: removes the row of `id` (a row
  // the snapshot records as gone); a no-op when there is none.
  void EraseSparse(uint64_t id);
  // Restore: sets row `row` (a dense row or sparse id of a held partition)
  // to `values` (RowStride floats), and a partition's admission sketch
  // (false: not a sketch of this table).
  void Import(uint64_t row, const float* values);
  bool ImportAdmission(uint32_t partition, const std::string& bytes);
  // Re-replication (a copy of a group filled on a running server): holds
  // `owned` partitions too (those not held yet; dense rows initialised
  // unless `initialize` is false); empties a held sparse partition before
  // it is filled; a partition's update count (RangeVersion) and a sparse
  // partition's rounding state, as the copy it is filled from has them.
  void AddPartitions(const std::vector<uint32_t>& owned, bool initialize = true);
  void ClearSparsePartition(uint32_t partition);
  uint64_t PartitionVersion(uint32_t p) const { return p < versions_.size() ? versions_[p] : 0; }
  void SetPartitionVersion(uint32_t p, uint64_t v) {
    if (p < versions_.size()) versions_[p] = v;
    Renew(p);  // (a fill: the rows are another copy's)
  }
  // Which copy of partition p this table holds: changes whenever the
  // partition is made, emptied or filled from another copy (a snapshot of
  // what changed is taken only against the same copy).
  uint64_t Generation(uint32_t p) const { return p < generations_.size() ? generations_[p] : 0; }
  uint64_t RoundingState(uint32_t p) const;
  void SetRoundingState(uint32_t p, uint64_t s);
  // Whether `row` (a dense row or a sparse id) belongs in partition p: what
  // a restored or filled row is checked against before it is written.
  bool RowInPartition(uint64_t row, uint32_t p) const {
    return spec_.kind == TableKind::kDense ? row < spec_.rows && PartitionOfRow(row, spec_.rows, partitions_) == p
                                           : PartitionOfId(row, partitions_) == p;
  }
  bool Holds(uint32_t partition) const {
    return partition < partitions_ && (spec_.kind == TableKind::kDense ? dense_[partition] != nullptr
                                                                       : sparse_[partition] != nullptr);
  }

 private:
  // The parameters of a run of consecutive held partitions, in one array of
  // at most kExtentBytes (a larger partition gets one of its own), so that a
  // pull of the run goes out as one frame pointing into it. Shared with pull
  // replies still being sent (zero-copy frames hold a reference); a write to
  // a shared extent copies it first.
  struct Extent {
    std::shared_ptr<FloatArray> w;
  };
  static constexpr size_t kExtentBytes = 4 << 20;
  struct DensePart {
    uint64_t begin = 0, end = 0;  // rows
    Extent* ext = nullptr;        // owned by extents_
    size_t off = 0;               // first float of this partition in ext->w
    float* w() const { return ext->w->data() + off; }
    FloatArray state;
    FloatArray acc;                // lazily allocated, synchronous mode
    std::vector<uint8_t> touched;  // per row: acc holds a sum
  };
  struct SparsePart {
    SparsePart(const TableSpec& spec, uint32_t state_width);
    SparseRows rows;
    std::unique_ptr<AdmissionSketch> admission;  // admit_after > 1
    uint32_t sweep = 0;                          // eviction: the next slot to look at
    // Tiered: rows in the cold tier, the CLOCK's use bits (by slot) and
    // hand, and the next id the cold tier's eviction sweep looks at.
    uint64_t cold_rows = 0;
    std::vector<uint8_t> used;
    uint32_t hand = 0;
    uint64_t cold_sweep = 0;
    void Use(uint32_t slot) {
      if (slot >= used.size()) used.resize(std::max<size_t>(slot + 1, used.size() * 2), 0);
      used[slot] = 1;
    }
  };
  struct Tier {
    ColdStore* cold = nullptr;
    uint64_t hot_limit = UINT64_MAX;     // SetHotLimit
    uint64_t part_rows = UINT64_MAX;     // rows a held partition may keep in memory
    uint32_t sweep_partition = 0;        // the cold tier's eviction sweep
    uint32_t swept_at = ~0u;             // ... done at this stamp: not again before the next
    TierCounts counts;
    mutable std::vector<uint8_t> raw;    // scratch: a raw record read
    std::string error;                   // the last cold-tier failure (logged once)
  };

  // Segments of [begin, end) by dense partition: fn(part, first_row, rows, offset_in_request).
  template <typename Fn>
  void ForEachSegment(uint64_t begin, uint64_t end, Fn&& fn) const;
  DensePart& DenseOf(uint64_t row) const;
  SparsePart& SparseOf(uint64_t id) const { return *sparse_[PartitionOfKey(id)]; }
  // At key i of a run over keys[0, n): the index entries of the key
  // kPrefetchIndex ahead and the records of the key kPrefetchRecord ahead
  // (SparseRows::PrefetchIndex, PrefetchRecord).
  void PrefetchAhead(const uint64_t* keys, size_t n, size_t i) const {
    if (i + kPrefetchIndex < n) SparseOf(keys[i + kPrefetchIndex]).rows.PrefetchIndex(keys[i + kPrefetchIndex]);
    if (i + kPrefetchRecord < n) SparseOf(keys[i + kPrefetchRecord]).rows.PrefetchRecord(keys[i + kPrefetchRecord]);
  }
  static constexpr size_t kPrefetchIndex = 16, kPrefetchRecord = 8;
  // The row of `id` for an update: made if absent and admitted (its
  // initial values and state); kNone when not admitted (counted).
  uint32_t SparseRowForUpdate(SparsePart& part, uint64_t id);
  uint32_t SparseRowInsert(SparsePart& part, uint64_t id);  // a new row, initialised
  uint32_t Stamp() const;  // what an update stamps a sparse row with now
  void InitialValues(uint64_t id, float* out) const;  // rounded to the dtype
  void ApplySparseKeys(const uint64_t* keys, size_t n, const float* g, float scale, float lr_scale);
  void ExportSparse(uint32_t p, PartitionData* d) const;
  void EncodeSparseRow(const SparsePart& part, uint32_t slot, float* row) const;
  void EncodeRawRow(const SparsePart& part, const uint8_t* raw, float* row) const;  // a cold row, as Export writes it
  // A row of the cold tier (false: not there), its raw record into `raw`.
  bool ColdRow(uint64_t id, uint8_t* raw) const;
  uint64_t MoveDownPartition(uint32_t p, uint64_t rows);  // CLOCK victims, sorted, written, erased
  uint64_t EvictCold(uint64_t max_rows, uint32_t limit, uint32_t now);
  void CollectColdIds(uint32_t p, std::vector<uint64_t>* out) const;
  void TierFailed(const std::string& what);
  void ImportSparse(uint64_t id, const float* values);
  float* DenseRow(uint64_t row, float** state, bool write) const;
  static void Own(DensePart& part);  // before writing: unshare the parameters (its whole extent)

  TableSpec spec_;
  uint32_t partitions_;
  size_t state_width_;
  std::vector<std::unique_ptr<DensePart>> dense_;    // by partition id; null if not held
  std::vector<std::unique_ptr<Extent>> extents_;
  std::vector<std::unique_ptr<SparsePart>> sparse_;  // by partition id; null if not held
  uint64_t sparse_rows_ = 0;
  uint64_t bytes_ = 0;  // dense rows held + sparse records and indexes, with their state
  SparseCounts counts_;
  int64_t clock_ = 0;               // SetClock
  uint32_t sweep_partition_ = 0;    // EvictSome: the partition it goes on with
  std::vector<float> row_scratch_;  // a sparse row's values as float32 while it is updated
  // Sparse accumulator: key -> slot in acc_, in first-touch order.
  std::unordered_map<uint64_t, uint32_t> acc_index_;
  std::vector<uint64_t> acc_keys_;
  std::vector<float> acc_;
  bool dense_acc_dirty_ = false;
  // Updates per partition (RangeVersion); for ApplyKeys, the call in which
  // each partition was last counted, so a call counts a partition once.
  std::vector<uint64_t> versions_;
  std::vector<uint64_t> counted_in_;
  uint64_t calls_ = 0;
  Tier tier_;
  std::vector<uint64_t> generations_;  // Generation()
  uint64_t next_generation_ = 1;
  void Renew(uint32_t p) {
    if (generations_.size() < partitions_) generations_.resize(partitions_, 0);
    if (p < partitions_) generations_[p] = next_generation_++;
  }
  void CountKeys(const uint64_t* keys, size_t n);
  uint32_t PartitionOfKey(uint64_t key) const;
  std::pair<uint32_t, uint32_t> PartitionSpan(uint64_t begin, uint64_t end) const;  // first, last
};

}  // namespace shardps
