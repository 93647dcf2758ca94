// RequestCheck: validates a push or a pull completely before anything is
// applied, so that a bad request changes nothing: the table is held, the
// frames are the ones the header announces and of the sizes it implies, the
// rows are the table's and held here, the request is within the request
// limit, and a sparse request creates no rows past the table's share or the
// memory budget (TableSet::CheckSparseGrowth).
//
// Thread: the server's event loop owns it; no locks. Its scratch buffers
// hold the copies of a request's misaligned frames until the next Check.
#pragma once

#include <cstdint>
#include <vector>

#include <zmq.hpp>

#include "shardps/status.h"
#include "shardps/types.h"

namespace shardps {

class ServerTable;
class TableSet;
namespace wire {
struct Header;
}

class RequestCheck {
 public:
  RequestCheck(const TableSet& tables, uint64_t max_request_bytes)
      : tables_(tables), max_request_bytes_(max_request_bytes) {}

  // Validates push (`push`) or pull `h` with its frames (identity, header,
  // keys if by keys, values: one frame per step of a push). On OK, *t is its
  // table, *keys its keys (null for a row range) and, for a push, values[j]
  // step j's gradients (`values`: kMaxPushSteps slots; unused for a pull;
  // null for a push that is only checked now — one held for its clock —
  // and read later with PushValues).
  // The pointers point into `frames` or this object's scratch.
  // `group`: the replica group addressed: every row or id must be of it
  // (WrongServer). `trusted`: a backup applying what its primary took —
  // nothing is refused for this server's memory budget (the primary
  // decided; refusing here would make the copies differ).
  Status Check(const wire::Header& h, std::vector<zmq::message_t>& frames, bool push, ServerTable** t,
               const uint64_t** keys, const float** values, uint32_t group = 0, bool trusted = false);
  // The shard map's partition -> group (outlives this, or until the next call).
  void SetGroups(const std::vector<uint32_t>* groups) { groups_ = groups; }
  // The number type of the values a request of `t` carries or asks for: a
  // sparse table's dtype; for a dense table, the header's (wire_dtype).
  static DType ValueType(const ServerTable& t, const wire::Header& h);
  // A checked push's values frame of `t` as float32, whatever its type or
  // compression (the header's): in place when it is float32 and aligned,
  // else converted or decoded into *scratch.
  static const float* PushValues(const ServerTable& t, const wire::Header& h, zmq::message_t& frame,
                                 std::vector<float>* scratch);

 private:
  // The values' type and compression the header names, checked against
  // the table and the request's kind.
  static Status CheckValueKind(const wire::Header& h, const TableSpec& spec, bool push, bool by_keys);
  // A checked frame of n values, in `type` or compressed as `comp`, as
  // float32 (PushValues).
  static const float* AsFloat(DType type, Compression comp, zmq::message_t& frame, uint64_t n,
                              std::vector<float>* scratch);
  // A push's `steps` value frames (the last ones), each of `n` values of
  // `type` or compressed as `comp`: checked, and as float32 into `values`
  // unless it is null.
  Status ReadPushValues(std::vector<zmq::message_t>& frames, uint32_t steps, uint64_t n, DType type,
                        Compression comp, const float** values);
  // Whether every row of [begin, end) (dense) or every key is of `group`.
  Status CheckGroup(const ServerTable& t, const wire::Header& h, const uint64_t* keys, uint32_t group) const;

  const TableSet& tables_;
  const uint64_t max_request_bytes_;
  const std::vector<uint32_t>* groups_ = nullptr;
  std::vector<uint64_t> key_scratch_;
  std::vector<std::vector<float>> step_scratch_;  // a push's gradients, when a frame is misaligned
};

}  // namespace shardps
