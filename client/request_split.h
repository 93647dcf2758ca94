// How a push or pull becomes one message per server part: a dense row range
// split at partition boundaries, a key list grouped by server; the one
// header every part's message starts with, and the frames that follow it.
// Pure functions of the request, the table and the shard map: no sockets,
// no shared state.
//
// Threads: the calling thread. The frames a part borrows from the caller's
// arrays (Borrow, call.h) stay the caller's until the request's Call lets
// go of them.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include <zmq.hpp>

#include "client/call.h"
#include "common/cluster/partition.h"
#include "common/codec/wire.h"
#include "shardps/client.h"

namespace shardps::detail {

// One replica group's part of a push or pull, for the server serving it.
struct Part {
  uint32_t server = 0;
  uint32_t group = 0;  // the replica group (docs/fault-tolerance.md, "Replicas"); the server is its primary
  bool keyed = false;  // a part of a key list (else of a row range)
  // Row range parts: rows [row_begin, row_end).
  uint64_t row_begin = 0, row_end = 0;
  // The part's values: `floats` floats from `offset` into the caller's
  // array (row range parts, and the key part that holds every key).
  uint64_t offset = 0, floats = 0;
  // Key parts: key_count keys; `positions` are their places in the key
  // list, ascending, or empty when the part holds every key in order (one
  // server: keys and values go from the caller's arrays as they are).
  uint64_t key_count = 0;
  std::vector<uint32_t> positions;
};

// Checks a push or pull of rows `r` of dense table `t` into or from an
// array of `floats` floats, and splits it by partition, merging neighbours
// of the same replica group up to `max_message_bytes` (a single partition is never
// split), so a server applies one part while the next is still on the wire
// (and each part is still in cache when applied). Parts are in row order.
// InvalidArgument (a sparse table), OutOfRange (rows), SizeMismatch.
Status SplitRange(const TableSpec& t, const ShardMap& map, RowRange r, uint64_t floats, bool push,
                  uint64_t max_message_bytes, std::vector<Part>* parts);

// Checks a push or pull of `keys` (dense row ids or sparse ids) of table `t`
// into or from an array of `floats` floats, and groups the keys by the
// replica group that holds them: one part holding every key when a single
// group holds them all, else one per group, ascending. No keys: no parts.
// SizeMismatch; OutOfRange for a dense row id past the table.
Status SplitKeys(const TableSpec& t, const ShardMap& map, std::span<const uint64_t> keys, uint64_t floats, bool push,
                 std::vector<Part>* parts);

// A key list's distinct keys in the order first seen, and where each one
// sits: the places of unique[u] in the list are positions[offsets[u] ..
// offsets[u + 1]), ascending. A key list request sends each key once (a
// pull fills every place of a repeated key; a push sums its gradients).
struct KeyPlan {
  std::vector<uint64_t> unique;
  std::vector<uint32_t> offsets;    // unique.size() + 1
  std::vector<uint32_t> positions;  // keys.size()
  bool repeats() const { return unique.size() < positions.size(); }
};
KeyPlan PlanKeys(std::span<const uint64_t> keys);
// Each unique key's rows summed, in the order of its places: `rows` holds
// one row of `cols` floats per place, `out` one per unique key.
void SumRows(const KeyPlan& plan, const float* rows, uint32_t cols, float* out);
// The places of the unique keys `uniques` (all of them, in order, when
// empty), for a pull's Dest: their positions concatenated and offsets.
void PlacesOf(const KeyPlan& plan, const std::vector<uint32_t>& uniques, std::vector<uint32_t>* positions,
              std::vector<uint32_t>* offsets);

// What every part of one request says in its header.
struct DataHeader {
  bool push = false;
  wire::Role role = wire::Role::Observer;
  int rank = -1;
  uint32_t table = 0;
  int64_t clock = 0;
  uint32_t steps = 0;  // PushSteps: how many gradients each part carries
  // A dense table's values on the wire (the handle's wire_dtype); sparse: f32
  // (their values travel in the table's dtype, which the header does not name).
  DType dtype = DType::kF32;
  Compression compress = Compression::kNone;  // a compressed push (float32 then)
  bool assign = false;                        // a push of rows to write, not gradients
};
// The number type a request of table `t` carries its values in: a sparse
// table's dtype, a dense table's wire_dtype.
inline DType WireType(const TableSpec& t) { return t.kind == TableKind::kDense ? t.wire.dtype : t.dtype; }
// A part's header: `h`, the part's rows or key count, and (a push) the
// versions its gradients were computed on at the part's server (`bases`,
// which must outlive the Fields).
wire::Fields PartFields(const DataHeader& h, const Part& p, std::span<const uint64_t> bases);

// The clock a data request is tagged with, for this worker's clock `now`:
// now + `ahead` (Prefetch: 1), or kPreviousClock: the clock before, at
// least 0 (PullCurrent).
constexpr int64_t kPreviousClock = INT64_MIN;
int64_t RequestClock(int64_t now, int64_t ahead);

// The versions each step's gradient was computed on (null: not known), and
// server `server`'s version of each: empty when one step's is not known.
using StepBases = std::vector<std::shared_ptr<const std::vector<uint64_t>>>;
std::vector<uint64_t> BasesFor(const StepBases& bases, uint32_t server);

// The caller's arrays of one push or pull.
struct Payload {
  bool push = false;
  uint32_t cols = 0;
  DType dtype = DType::kF32;           // the table's values on the wire (a push's frames are converted to it)
  const KeyPlan* plan = nullptr;       // a key list sent once per key: `keys` are plan->unique
  float* values = nullptr;             // the gradients (push) or the output (pull); null for a PullView
  std::span<const uint64_t> keys;      // a key list request
  std::span<const PushStep> steps;     // PushSteps: one gradient array per step
  std::shared_ptr<PulledFrames> view;  // PullView: where the frames are kept
  // A compressed push of a row range (docs/compression.md): each part's
  // gradient is encoded with error feedback against `residual` (aligned
  // with `values`: the residual of the request's first row), which the
  // caller holds locked until the frames are made.
  Compression compress = Compression::kNone;
  float topk_fraction = 0;
  float* residual = nullptr;
  bool assign = false;                 // a push of the rows themselves (Client::Assign)
  RowCache* cache = nullptr;           // a pull whose rows the row cache keeps (row_cache.h) ...
  uint32_t cache_table = 0;            // ... as rows of this table
  int64_t cache_clock = 0;             // ... read at this clock
};
// The frames that follow a part's header: its keys (borrowed when the part
// holds every key, else gathered), then for a push its gradients (borrowed
// slices of the caller's array, one per step; gathered for the key part of
// one of several servers).
std::vector<zmq::message_t> PartFrames(const Payload& pl, const Part& p, const std::shared_ptr<Call>& call);
// Where a pull part's reply values go (moves p.positions).
Dest PullDest(const Payload& pl, Part& p);

// The keys at `positions`, and their rows of `cols` floats (in `dtype`), in
// one frame each; `positions` empty: all `n` rows in order.
zmq::message_t GatherKeys(std::span<const uint64_t> keys, const std::vector<uint32_t>& positions);
zmq::message_t GatherRows(const float* rows, uint32_t cols, const std::vector<uint32_t>& positions);
zmq::message_t GatherRowsAs(const float* rows, uint32_t cols, const std::vector<uint32_t>& positions, uint64_t n,
                            DType dtype);

}  // namespace shardps::detail
