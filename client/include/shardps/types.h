// shardps/types.h: what a table is and how a job keeps its workers in step.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "shardps/export.h"
#include "shardps/status.h"

namespace shardps {

enum class TableKind : uint8_t { kDense = 0, kSparse };
enum class InitKind : uint8_t { kZeros = 0, kConstant, kUniform, kNormal };
enum class OptimizerKind : uint8_t { kSGD = 0, kMomentum, kAdagrad, kAdam };
// kSync: bulk-synchronous (BSP); kBounded: stale synchronous (SSP, staleness
// s); kAsync: never waits. See docs/consistency.md.
enum class Consistency : uint8_t { kSync = 0, kBounded, kAsync };
// How a server weighs a stale gradient under bounded staleness and async
// (docs/consistency.md, "Stale gradients"); sync gradients are never stale.
//  kDefault: the rule measured best (today kScaleLr);
//  kNone:    every gradient at the table's lr;
//  kScaleLr: lr / max(1, staleness), staleness = updates the rows took
//            between the pull a gradient was computed on and its push
//            (Zhang et al., "Staleness-aware Async-SGD", IJCAI 2016);
//  kDelayCompensation: g + dc_lambda * g * g * (w_now - w_then) (Zheng et
//            al., "Asynchronous SGD with Delay Compensation", ICML 2017),
//            w_then kept by the server from the worker's pull (dense row
//            ranges; costs a copy of what each worker pulled, see
//            docs/consistency.md).
enum class StalenessRule : uint8_t { kDefault = 0, kNone, kScaleLr, kDelayCompensation };
// The number type of a table's values where they are stored and sent:
// float32, bfloat16 (float32's range, 8 bits of mantissa) or IEEE half
// (11 bits of mantissa, at most 65504). Optimizer state stays float32.
enum class DType : uint8_t { kF32 = 0, kBF16, kF16 };
// How a dense table's pushed gradients are compressed (docs/compression.md):
// not at all, the top fraction of entries by magnitude, or one bit each
// (sign and a scale), each with error feedback (what was not sent is added
// to the next gradient).
enum class Compression : uint8_t { kNone = 0, kTopK, kSign };
// How a dense table's values travel between clients and servers
// (docs/compression.md). The table's default for every client: a Table
// handle's own spec.wire decides the requests made with it (set it on a
// copy of the handle to read exact float32 values, say). Not part of the
// table's shape (SameShape). Sparse tables: the defaults (their values
// travel in their dtype, uncompressed).
struct WireOptions {
  // The number type of pulled values and pushed gradients on the wire
  // (docs/performance.md, "Bytes per step"): the servers keep float32
  // values and optimizer state, a push in bf16/f16 applies its gradient
  // rounded to that type (to nearest even), a pull reads the values
  // rounded so.
  DType dtype = DType::kF32;
  // The compression of pushed gradients, with error feedback. kTopK sends
  // ceil(topk_fraction x n) entries of each part of n values. A compressed
  // push goes in float32 whatever `dtype` (pulls still use it).
  Compression compress = Compression::kNone;
  float topk_fraction = 0.01f;
};
// Bytes of one value of `d`.
constexpr uint32_t DTypeBytes(DType d) { return d == DType::kF32 ? 4 : 2; }

// The most gradients (optimizer steps) one push may carry (Client::PushSteps).
inline constexpr uint32_t kMaxPushSteps = 64;

// A model table, `cols` values per row.
//  - dense: `rows` x `cols` float32, rows split into contiguous ranges;
//  - sparse: rows keyed by any uint64 id, created by the first push of an
//    id (a pull of an unknown id reads its initial values, creating
//    nothing); values in `dtype`.
// Initial values are a pure function of (table name, seed, row id, column)
// and the init kind and its parameters: the same model comes out whatever
// the number of servers (tables of other names but the same seed start from
// other values).
struct SHARDPS_EXPORT TableSpec {
  uint32_t id = 0;  // assigned by the coordinator
  std::string name;
  TableKind kind = TableKind::kDense;
  uint64_t rows = 0;  // dense only
  uint32_t cols = 1;

  InitKind init = InitKind::kZeros;
  float init_a = 0.0f;  // constant: value; uniform: low; normal: mean
  float init_b = 0.0f;  // uniform: high; normal: stddev
  uint64_t seed = 0;

  OptimizerKind optimizer = OptimizerKind::kSGD;
  float lr = 0.01f;
  float momentum = 0.9f;            // momentum
  float beta1 = 0.9f;               // adam
  float beta2 = 0.999f;             // adam
  float eps = 1e-8f;                // adagrad, adam
  float initial_accumulator = 0.0f; // adagrad
  // Sparse tables: at most this many rows (each server enforces its share,
  // by its share of the partitions); 0: only the servers' memory budgets
  // limit it. A request that would create more gets TooLarge.
  uint64_t max_rows = 0;
  StalenessRule staleness_rule = StalenessRule::kDefault;
  float dc_lambda = 0.04f;  // kDelayCompensation's lambda

  // Embedding tables (sparse; docs/embeddings.md).
  // The values' type where they are stored and on the wire (pulls and
  // pushes); optimizer state stays float32.
  DType dtype = DType::kF32;
  // An id gets a row only at its admit_after-th push (0 or 1: at its
  // first); before that its gradients are dropped (and counted).
  uint32_t admit_after = 0;
  // Rows not updated for this many clocks, or seconds, are removed (0:
  // never); at most one of the two.
  uint32_t evict_after_clocks = 0;
  uint32_t evict_after_sec = 0;
  // Rows past the servers' memory budgets live on their disks (a RocksDB
  // per server, docs/embeddings.md "Tables larger than memory"); the rows
  // in use are in memory. Placement only: no value depends on it.
  bool cold_tier = false;

  // Dense tables: how pulled values and pushed gradients travel
  // (WireOptions, docs/compression.md).
  WireOptions wire;

  // OK, or InvalidArgument naming the first field that is wrong.
  Status Validate() const;
  // OK, or InvalidArgument naming what is wrong with `wire` for this table
  // (part of Validate; the client checks a handle's own at each request).
  Status ValidateWire() const;
  // True when both describe the same table (ids aside).
  bool SameShape(const TableSpec& other) const;
};

SHARDPS_EXPORT std::string_view ToString(TableKind k);
SHARDPS_EXPORT std::string_view ToString(InitKind k);
SHARDPS_EXPORT std::string_view ToString(OptimizerKind k);
SHARDPS_EXPORT std::string_view ToString(Consistency c);
SHARDPS_EXPORT std::string_view ToString(StalenessRule r);
SHARDPS_EXPORT std::string_view ToString(DType d);
SHARDPS_EXPORT std::string_view ToString(Compression c);
// Parse the names above ("dense", "sgd", "adam", "sync", "bounded", ...).
SHARDPS_EXPORT Status Parse(std::string_view s, TableKind* out);
SHARDPS_EXPORT Status Parse(std::string_view s, InitKind* out);
SHARDPS_EXPORT Status Parse(std::string_view s, OptimizerKind* out);
SHARDPS_EXPORT Status Parse(std::string_view s, Consistency* out);
SHARDPS_EXPORT Status Parse(std::string_view s, StalenessRule* out);
SHARDPS_EXPORT Status Parse(std::string_view s, DType* out);  // "f32", "bf16", "f16"
SHARDPS_EXPORT Status Parse(std::string_view s, Compression* out);  // "none", "topk", "sign"
// A compression as "none", "sign" or "topk:F" (F the fraction kept, in
// (0, 1]); "topk" alone keeps *fraction as it is. InvalidArgument naming
// what is wrong.
SHARDPS_EXPORT Status ParseCompression(std::string_view s, Compression* out, float* fraction);

}  // namespace shardps
