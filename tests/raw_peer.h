// RawPeer: one DEALER that speaks shardps's wire by hand, for the tests that
// send what the client library never would (malformed frames, far-future
// clocks, a resent push, a worker that vanishes between two messages) or
// need a reply's raw header fields.
//
//   testing::RawPeer peer(cluster.ServerEndpoint(0));
//   wire::Fields f;
//   f.type = wire::MsgType::Pull; f.table = t.id; f.row_begin = 0; f.row_end = 1;
//   Status s = peer.Exchange(testing::Frames(peer.Header(f)));
//   ... peer.reply()->table_version() ...
//
// Every exchange is bounded by a timeout, and a handshake the peer refuses
// fails it at once (PermissionDenied) instead of letting it time out.
// Not thread-safe: one thread per RawPeer.
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include <zmq.hpp>

#include "common/codec/wire.h"
#include "common/net/security.h"
#include "shardps/client.h"
#include "shardps/status.h"

namespace shardps::testing {

class RawPeer {
 public:
  // Connects to `endpoint`; with `key`, as a CURVE client holding it.
  explicit RawPeer(const std::string& endpoint, const KeyFile* key = nullptr);
  RawPeer(const RawPeer&) = delete;
  RawPeer& operator=(const RawPeer&) = delete;

  // Sends `frames` as one message and waits up to `timeout` for the reply.
  // Returns the status the reply carries; Timeout when none came;
  // PermissionDenied when the handshake was refused; BadMessage when the
  // reply does not parse.
  Status Exchange(std::vector<zmq::message_t> frames, std::chrono::milliseconds timeout = std::chrono::seconds(30));

  // A header frame for `f`; with a body built in builder() first.
  zmq::message_t Header(const wire::Fields& f);
  zmq::message_t Header(const wire::Fields& f, wire::Body type, flatbuffers::Offset<void> body);
  // Where a body is built before Header(f, type, body); clear it first.
  flatbuffers::FlatBufferBuilder& builder() { return fbb_; }

  // The last reply: its header (null before one arrived) and every frame.
  const wire::Header* reply() const { return h_; }
  std::vector<zmq::message_t>& reply_frames() { return reply_; }

 private:
  zmq::context_t ctx_{1};
  zmq::socket_t sock_;
  zmq::socket_t monitor_;
  std::string endpoint_;
  const KeyFile* key_ = nullptr;
  flatbuffers::FlatBufferBuilder fbb_;
  std::vector<zmq::message_t> reply_;
  std::vector<uint64_t> scratch_;
  const wire::Header* h_ = nullptr;
};

// A worker reduced to its messages (no heartbeats, no Leave), so that it
// can vanish at any point between two of them. Each message carries this
// worker's role, rank and `clock`, and a request id of its own.
class RawWorker {
 public:
  explicit RawWorker(int rank) : rank_(rank) {}
  // `f` as this worker, then the frames `after`; the reply's status.
  Status Send(RawPeer& to, wire::Fields f, std::vector<zmq::message_t> after = {});
  // `f` with a body built in to.builder().
  Status Send(RawPeer& to, wire::Fields f, wire::Body type, flatbuffers::Offset<void> body);
  Status Register(RawPeer& coordinator);
  // A per-clock claim of up to `per` units of pool `pool` (of `total`).
  Status Claim(RawPeer& coordinator, uint64_t pool, uint64_t total, uint32_t per, WorkRange* grant);
  // Gradients for rows [0, rows) of a one-column `table`; `seq` 0: the next
  // push number.
  Status Push(RawPeer& server, uint32_t table, uint64_t rows, const float* grads, uint64_t seq = 0);
  Status Tick(RawPeer& server);

  int64_t clock = 0;

 private:
  int rank_;
  uint64_t id_ = 0, seq_ = 0;
};

// Frames of a message, in order: Frames(peer.Header(f), Floats(n)).
template <typename... M>
std::vector<zmq::message_t> Frames(M&&... m) {
  std::vector<zmq::message_t> v;
  (v.push_back(std::forward<M>(m)), ...);
  return v;
}
// A frame of `n` floats, all `value`.
zmq::message_t Floats(size_t n, float value = 0.0f);
// A frame holding a copy of `values` / of `keys`.
zmq::message_t FloatsOf(const std::vector<float>& values);
zmq::message_t Keys(const std::vector<uint64_t>& keys);

}  // namespace shardps::testing
