// IoLoop: everything the client's I/O thread owns (client/io_thread.h), shared
// by the files that implement it: io_thread.cc (the loop, requests and
// replies) and io_loop_coordinator.cc (the coordinator's connection).
// Private to client/.
#pragma once

#include <poll.h>

#include <algorithm>
#include <deque>
#include <map>
#include <unordered_map>

#include "client/io_thread.h"
#include "client/row_cache.h"
#include "common/codec/envelope.h"

namespace shardps::detail {

// Everything the I/O thread owns. Touched only by that thread, and by
// IoThread::Start before the thread runs.
struct IoLoop {
  // With a key, every socket is a CURVE client. Every socket is watched by a
  // monitor for a failed handshake: a refused key (or a missing one) fails
  // the requests to that peer at once with the reason (PermissionDenied)
  // instead of letting them time out.
  struct Monitor {
    zmq::socket_t pair;
    int target;
    int drops = 0;      // handshakes dropped in a row
    int connected = 0;  // handshakes that succeeded
  };
  // A request part sent and not answered yet.
  struct Pending {
    std::shared_ptr<Call> call;
    Dest dest;
    int target;
    Clock::time_point deadline;
    int group = -1;       // a data request's replica group
    uint64_t order = 0;   // when it was first sent, among all (resent in this order)
    std::vector<zmq::message_t> frames;  // with replicas: the message, to send again after a fail-over
    bool push = false;    // a worker's numbered push (a sync tick sent after it waits for its answer)
  };
  // A request waiting behind a synchronous tick, or that tick waiting for
  // the answers of the pushes sent before it (Outgoing::after_pushes):
  // those with Pending::order <= after, `after` taken once everything
  // queued before it was sent (armed).
  struct Deferred {
    Outgoing o;
    bool armed = false;
    uint64_t after = 0;
  };

  IoLoop(IoThread& t, std::optional<KeyFile> k) : io(t), opts(t.opts_), self(t.self_), key(std::move(k)) {}

  Status ConnectCoordinator();
  void Run();
  void RunQueued(std::deque<Outgoing>& batch, bool* stop);
  // Every socket that may hold replies (check) read until empty, a server's
  // at most 1024 a pass; true: one may still hold some.
  bool ReceiveAll(uint64_t* read = nullptr);  // (read: how many replies it read)
  // Socket `target` (-1: the coordinator) may hold replies its ZMQ_FD will
  // not announce: an operation on it may have taken in the command that did.
  void Check(int target) {
    check.resize(std::max(check.size(), servers.size() + 1), 1);
    check[static_cast<size_t>(target + 1)] = 1;
  }
  void CheckAll() { check.assign(servers.size() + 1, 1); }
  void Secure(zmq::socket_t& s, int target);
  void OnMonitor(Monitor& m);
  void FailPending(int target, const Status& s);
  void ConnectServers(const std::vector<std::string>& endpoints);
  zmq::socket_t ServerSocket(int rank, const std::string& ep);  // a DEALER to server `rank`, connected to `ep` if any
  // A newer shard map: the requests in flight to a group that moved go to
  // its new server (true when it was newer).
  bool ApplyMap(std::shared_ptr<const ShardMap> m);
  // A heartbeat's answer carrying the cluster view (a fail-over).
  void OnClusterView(const wire::Header& h);
  void Send(Outgoing& o);
  // Sends what Send gathered for each server: one message each (an
  // envelope of its requests when it has several). Called at the end of
  // every pass that may have sent, and before the server list or the map
  // changes.
  void FlushOut();
  // A message to `target` that ZeroMQ would not take: its requests fail.
  void SendFailed(int target, const Status& st, const std::vector<uint64_t>& ids);
  // Sends the deferred requests no earlier push is unanswered for, in order.
  void SendDeferred();
  void OnReply(std::vector<zmq::message_t>& frames, int from);
  void Heartbeat();
  void ExpireRequests(Clock::time_point now);
  void Close();
  std::string PeerName(int target) const;

  IoThread& io;
  const ClientOptions& opts;
  const Sender& self;
  const std::optional<KeyFile> key;
  zmq::context_t ctx{1};  // before the sockets: destroyed after them
  zmq::socket_t coord;
  std::vector<zmq::socket_t> servers;
  std::vector<Monitor> monitors;
  std::map<int, std::string> refused;  // target -> why its handshake failed, until one succeeds
  uint64_t monitor_seq = 0;
  std::vector<std::string> endpoints;
  std::shared_ptr<const ShardMap> map;  // routes data requests by replica group
  // Some map had a group with two or more copies, or one being filled: the
  // job fails over, so requests are kept to be sent again from then on,
  // also while a dead server's groups are down to one copy (re-replication).
  bool replicated = false;
  uint64_t sends = 0;                   // requests sent so far (Pending::order)
  std::unordered_map<uint64_t, Pending> pending;
  std::deque<Deferred> deferred;
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<uint64_t> scratch;
  std::vector<zmq::message_t> frames;  // the message being received
  std::vector<uint8_t> check;  // per socket (0: the coordinator, 1 + r: server r): read it before sleeping
  // Requests to the coordinator held while no coordinator of several leads
  // (HoldForCoordinator), sent in order once one does.
  std::deque<std::vector<zmq::message_t>> coord_waiting;
  bool HoldForCoordinator(std::vector<zmq::message_t>& frames);
  void SendHeldForCoordinator();
  // Requests gathered per server rank until FlushOut: their frames, their
  // ids (failed together when the send fails), the ranks holding some.
  struct Out {
    wire::EnvelopeBuilder env;
    std::vector<uint64_t> ids;
  };
  std::vector<Out> out;
  std::vector<int> out_queued;
  flatbuffers::FlatBufferBuilder env_fbb;
  std::vector<zmq::message_t> out_frames;  // scratch: the message being sent
};

}  // namespace shardps::detail
