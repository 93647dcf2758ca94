// The wire codec: FlatBuffers headers (frame 0) plus raw little-endian key and
// value frames. See docs/protocol.md for every message.
//
// Receivers call VerifyHeader() before reading any field, and check every
// following frame's size against the header with the helpers below.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include <zmq.hpp>

#include "common/cluster/cluster.h"
#include "shardps/status.h"
#include "shardps/types.h"
#include "shardps_generated.h"

namespace shardps::wire {

static_assert(std::endian::native == std::endian::little,
              "the wire format is little-endian; big-endian hosts are not supported");

constexpr uint16_t kProtocolVersion = static_cast<uint16_t>(Protocol::Version);
// A header is small; anything larger is refused before verification.
constexpr size_t kMaxHeaderBytes = 1 << 20;
// A table version (Header.table_version, base_versions): the server's
// update count in the low bits, its incarnation (random per start, never 0)
// above them, so versions of two incarnations are never compared.
constexpr int kVersionCountBits = 48;

// Verifies `data` (8-byte aligned) as a Header of this protocol version.
// Returns BadMessage (not a valid FlatBuffer, not aligned, too large, bad enum values) or
// VersionMismatch; on OK, *out points into `data`.
Status VerifyHeader(const void* data, size_t size, const Header** out);
// VerifyHeader on a received frame; a frame whose data is not 8-byte aligned
// is first copied into `scratch` (FlatBuffers reads aligned scalars).
Status ParseHeader(const zmq::message_t& frame, std::vector<uint64_t>& scratch,
                   const Header** out);

// The scalar fields of a header; what is not set stays at its default.
struct Fields {
  MsgType type = MsgType::Reply;
  uint64_t request_id = 0;
  Role role = Role::Observer;
  int32_t rank = -1;
  uint32_t table = 0;
  int64_t clock = 0;
  uint64_t seq = 0;
  uint64_t map_version = 0;
  uint64_t key_count = 0;
  uint64_t row_begin = 0;
  uint64_t row_end = 0;
  ErrorCode error = ErrorCode::OK;
  std::string_view message;
  int64_t min_clock = 0;
  int64_t max_clock = 0;
  bool stopping = false;
  uint32_t steps = 0;
  std::span<const uint64_t> base_versions;
  uint64_t table_version = 0;
  uint64_t staleness = 0;
  bool idle = false;
  int32_t group = -1;  // -1: not sent (the receiving server's own group)
  uint64_t fseq = 0;
  RepKind rep = RepKind::Request;
  // Dense tables' values: their type (push, pull, pull reply) and a push's
  // compression; any push's: rows to write (assign), not gradients.
  struct Values {
    DType dtype = DType::F32;
    Compression compress = Compression::None;
    bool assign = false;  // a push's values are the rows to write, not gradients
  } values;
};

// Finishes `fbb` (which may already hold the body) into a header message.
// REQUIRES: `body` was built in `fbb` after its last Clear().
zmq::message_t Encode(flatbuffers::FlatBufferBuilder& fbb, const Fields& f,
                      Body body_type = Body::NONE,
                      flatbuffers::Offset<void> body = flatbuffers::Offset<void>());
// Shorthand for a header without a body (clears `fbb` first).
zmq::message_t EncodeSimple(flatbuffers::FlatBufferBuilder& fbb, const Fields& f);
// An error reply to request `request_id`.
zmq::message_t EncodeError(flatbuffers::FlatBufferBuilder& fbb, uint64_t request_id,
                           const Status& s);

// The status a reply header carries.
Status ReplyStatus(const Header* h);
ErrorCode ToWire(Code c);

flatbuffers::Offset<wire::TableSpec> BuildTableSpec(flatbuffers::FlatBufferBuilder& fbb,
                                                    const shardps::TableSpec& t);
flatbuffers::Offset<ClusterInfo> BuildCluster(flatbuffers::FlatBufferBuilder& fbb,
                                              const ClusterView& c);
// Decoders check what the verifier cannot: ranges, lengths, enum values.
Status DecodeTableSpec(const wire::TableSpec* in, shardps::TableSpec* out);
Status DecodeCluster(const ClusterInfo* in, ClusterView* out);
// Workers' last clocks (ClusterView::retired, RetireReport::finals); each
// rank below `worker_ranks`, each clock -1 (not joined there) or more.
flatbuffers::Offset<flatbuffers::Vector<const wire::WorkerFinal*>> BuildFinals(
    flatbuffers::FlatBufferBuilder& fbb, const std::vector<shardps::WorkerFinal>& finals);
Status DecodeFinals(const flatbuffers::Vector<const wire::WorkerFinal*>* in, uint32_t worker_ranks,
                    std::vector<shardps::WorkerFinal>* out);

// Expected byte sizes of the key and value frames a header announces.
// Returns SizeMismatch/OutOfRange/TooLarge naming the problem.
Status CheckFrameSize(std::string_view what, size_t actual, uint64_t expected);

// Unaligned-safe view of an array frame. ZeroMQ does not promise alignment
// of a received frame's data (small frames live inside zmq_msg_t, batched
// frames at any offset): aligned frames are used in place, others are copied
// once into `scratch`.
template <typename T, typename Scratch>
const T* ArrayView(const zmq::message_t& m, Scratch& scratch) {
  auto p = reinterpret_cast<uintptr_t>(m.data());
  if (p % alignof(T) == 0) return static_cast<const T*>(m.data());
  scratch.resize(m.size() / sizeof(T));
  std::memcpy(scratch.data(), m.data(), scratch.size() * sizeof(T));
  return scratch.data();
}

}  // namespace shardps::wire
