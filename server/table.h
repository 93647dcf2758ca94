// ServerTable: the rows of one table that this server holds (the partitions
// the shard map assigns to it), their optimizer state, and the accumulator
// synchronous mode sums gradients into.
//
// Dense partitions are contiguous arrays (parameters, then optimizer state
// in a parallel array), so a row range is one pointer offset. Sparse rows
// are created on first touch, parameters and state side by side in chunks
// that never move.
//
// Every mutating call is preceded by a Check*() that validates the whole
// request, so a bad request leaves the table unchanged.
//
// Thread-safety: none; a server's event loop owns its tables.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include <zmq.hpp>

#include "server/snapshot.h"
#include "shardps/status.h"
#include "shardps/types.h"

namespace shardps {

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

  // out: (end - begin) x cols / n x cols. Sparse rows are created if absent.
  void ReadRange(uint64_t begin, uint64_t end, float* out) const;
  // The same rows as frames that point into the table (no copy): one frame
  // per extent the range touches (runs under 256 KiB are copied into one
  // frame instead), each holding a reference that keeps the rows as they
  // were until ZeroMQ has sent them (a push meanwhile copies first).
  void ReadRangeFrames(uint64_t begin, uint64_t end, std::vector<zmq::message_t>* frames) const;
  // create = false (an observer's read): absent sparse rows are not
  // created; their initial values (a function of the id) are returned.
  void ReadKeys(const uint64_t* keys, size_t n, float* out, bool create = true);
  // Of `keys` (a sparse table), how many distinct ids hold no row yet.
  uint64_t CountAbsent(const uint64_t* keys, size_t n) const;
  // Sparse rows held, and the bytes the table holds (parameters, optimizer
  // state, sparse chunks allocated): what counts against a memory budget.
  uint64_t sparse_rows() const { return sparse_rows_; }
  uint64_t bytes() const { return bytes_; }
  // Bytes of one sparse row (parameters and state).
  uint64_t row_bytes() const { return (spec_.cols + state_width_) * sizeof(float); }
  // Dense bytes a server holding `owned` partitions needs for `spec`.
  static uint64_t DenseBytes(const TableSpec& spec, uint32_t partitions, const std::vector<uint32_t>& owned);

  // Applies the optimizer to the rows, gradient scaled by `scale`, this
  // step's learning rate by `lr_scale` (server/optimizer.h). A key repeated
  // within one call is applied once per occurrence. Each call is one update
  // of every partition it touches (see RangeVersion).
  void ApplyRange(uint64_t begin, uint64_t end, const float* g, float scale, float lr_scale = 1.0f);
  void ApplyKeys(const uint64_t* keys, size_t n, const float* g, float scale, float lr_scale = 1.0f);

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

  // Snapshots: copies every held partition, rows ascending, parameters then
  // optimizer state per row (`table_id` labels the copies).
  void Export(uint32_t table_id, std::vector<snapshot::PartitionData>* out) const;
  // The same for one held partition.
  void ExportPartition(uint32_t table_id, uint32_t partition, std::vector<snapshot::PartitionData>* out) const;
  uint32_t partitions() const { return partitions_; }
  // Restore: sets row `row` (a dense row or sparse id of a held partition)
  // to `values` (cols + state_width floats).
  void Import(uint64_t row, const float* values);
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
  // Sparse rows are allocated a chunk at a time: up to 1024 rows, at most
  // 1 MiB (at least one row), so a wide table does not allocate much ahead.
  uint32_t chunk_rows_ = 1024;
  struct SparsePart {
    std::unordered_map<uint64_t, uint32_t> index;  // id -> slot
    std::vector<std::unique_ptr<float[]>> chunks;  // chunk_rows_ slots each
    uint32_t count = 0;
  };

  // Segments of [begin, end) by dense partition: fn(part, first_row, rows, offset_in_request).
  template <typename Fn>
  void ForEachSegment(uint64_t begin, uint64_t end, Fn&& fn) const;
  DensePart& DenseOf(uint64_t row) const;
  float* SparseRow(uint64_t id);  // [w | state], created on first touch
  float* DenseRow(uint64_t row, float** state, bool write) const;
  static void Own(DensePart& part);  // before writing: unshare the parameters (its whole extent)

  TableSpec spec_;
  uint32_t partitions_;
  size_t state_width_;
  std::vector<std::unique_ptr<DensePart>> dense_;    // by partition id; null if not held
  std::vector<std::unique_ptr<Extent>> extents_;
  std::vector<std::unique_ptr<SparsePart>> sparse_;  // by partition id; null if not held
  uint64_t sparse_rows_ = 0;
  uint64_t bytes_ = 0;  // dense rows held + sparse chunks allocated, with their state
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
  void CountKeys(const uint64_t* keys, size_t n);
  uint32_t PartitionOfKey(uint64_t key) const;
  std::pair<uint32_t, uint32_t> PartitionSpan(uint64_t begin, uint64_t end) const;  // first, last
};

}  // namespace shardps
