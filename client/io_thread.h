// The client's I/O thread: the one thread that owns its sockets (the
// coordinator's and every server's), their handshake monitors and the book
// of requests in flight. Caller threads hand it requests through its queue;
// it sends them, routes each reply to its request's Call (a pull's values
// to where its Dest says), fails the requests of a peer that refused the
// handshake and those that timed out, and sends a worker's heartbeats.
//
// Threads: Start and Stop are called by the client's owner (Connect,
// Close); every other method by any thread. What the I/O thread alone
// touches is one struct, IoLoop (io_thread.cc), made by Start before the
// thread runs; what the callers share with it is under queue_mu_ or atomic.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "client/call.h"
#include "common/cluster/cluster.h"
#include "common/codec/wire.h"
#include "common/net/net.h"
#include "common/net/security.h"
#include "shardps/client.h"

namespace shardps::detail {

// Who this client is, as every message it sends says. `rank` is written
// once by Register, `clock` by Clock/Join (any caller thread); both are
// read by every thread, the I/O thread's heartbeats included.
class RowCache;

struct Sender {
  explicit Sender(ClientRole r) : role(r) {}
  const ClientRole role;
  std::atomic<int> rank{-1};
  std::atomic<int64_t> clock{0};
  // Training examples done (Client::AddSamples, any thread), sent with each
  // heartbeat.
  std::atomic<uint64_t> samples{0};
  // The row cache whose counts go with each heartbeat (null: none). Set
  // before the I/O thread starts; its stats() are thread-safe.
  const RowCache* row_cache = nullptr;

  bool worker() const { return role == ClientRole::kWorker; }
  wire::Role wire_role() const { return worker() ? wire::Role::Worker : wire::Role::Observer; }
};

// One item of the I/O thread's queue: a request part to send, a new server
// list to connect to, or the order to stop. Built by a caller, then owned
// by the I/O thread.
struct Outgoing {
  enum Kind { kSend, kConnect, kMap, kStop } kind = kSend;
  int target = -1;  // server rank, or -1 for the coordinator
  int group = -1;   // a data request's replica group: sent to the server serving it when it goes out
  bool resendable = true;  // may be sent again to a group's new server (not an observer's unnumbered push)
  bool push = false;       // a worker's numbered push
  // Sent only once every push sent before it was answered (a synchronous
  // tick: each server then holds the clock's pushes before any has the tick).
  bool after_pushes = false;
  uint64_t request_id = 0;
  std::vector<zmq::message_t> frames;
  std::shared_ptr<Call> call;
  Dest dest;
  Millis timeout{0};
  std::vector<std::string> endpoints;  // kConnect
  std::shared_ptr<const ShardMap> map;  // kMap
};

struct IoLoop;

class IoThread {
 public:
  // `opts` and `self` outlive this.
  IoThread(const ClientOptions& opts, const Sender& self);
  ~IoThread();  // Stop()s
  IoThread(const IoThread&) = delete;
  IoThread& operator=(const IoThread&) = delete;

  // Connects the coordinator socket (a CURVE client with `key`, if any) and
  // starts the thread. Once, before anything is queued. InvalidArgument
  // when the coordinator's endpoint is not one.
  Status Start(std::optional<KeyFile> key);
  // Stops the thread: what is in flight fails with Unavailable ("client is
  // closed"), and so does whatever is queued later. Idempotent.
  void Stop();

  // A new request id (unique within this client).
  uint64_t NextRequestId() { return next_id_.fetch_add(1); }
  // Queues `o`, its frames complete. Fails o.call if the client is closed.
  void Enqueue(Outgoing&& o);
  // Queues a request to server o.target: gives it a request id, and builds
  // its header from `f` (in `fbb`) under the queue lock, where a worker's
  // `numbered` request (a push) takes its next sequence number for that
  // server: the servers see a worker's pushes numbered in the order they
  // are sent, whichever thread issued them. `extra` follow the header.
  void EnqueueRequest(Outgoing&& o, wire::Fields f, std::vector<zmq::message_t> extra, bool numbered,
                      flatbuffers::FlatBufferBuilder& fbb);
  // Client::HoldRequests: while held (Hold more often than Release), what
  // is queued from then on stays queued (but a stop and requests to the
  // coordinator; what was queued before the first Hold goes as usual); the
  // last Release wakes the I/O thread, which sends it all in one pass: one
  // message per server.
  void Hold();
  void Release();
  // (Re)connects to `endpoints` (server rank -> data endpoint), dropping
  // the old server sockets; push numbering continues per rank.
  void ConnectServers(std::vector<std::string> endpoints);
  // The shard map to route data requests by (each to the server serving
  // its replica group). A newer one than the I/O thread has moves the
  // requests in flight to a group's new server: each is sent again as it
  // was (its push sequence number makes it apply once), in the order they
  // were first sent. An older one is ignored.
  void SetMap(std::shared_ptr<const ShardMap> map);
  // Called on the I/O thread with the view a heartbeat's answer brought (a
  // fail-over's new map), after the requests in flight were moved. Set
  // before Start.
  void SetOnCluster(std::function<void(ClusterView)> fn) { on_cluster_ = std::move(fn); }

  // How often the coordinator connection came back after a first handshake
  // (the coordinator restarted). Written by the I/O thread.
  uint64_t coordinator_reconnects() const { return coord_reconnects_.load(); }
  // A heartbeat reply said the job is stopping. Written by the I/O thread.
  bool stop_requested() const { return stop_requested_.load(std::memory_order_relaxed); }
  // Replies the I/O thread found only when it had slept its full 50 ms
  // with no socket signalling: each one a missed wake-up (a send that took
  // in the command announcing a reply, its socket not read after it), late
  // by up to 50 ms. Zero when the loop keeps its rule (IoLoop::Run), but
  // for a reply that lands between the poll's timeout and the read.
  uint64_t late_replies() const { return late_replies_.load(std::memory_order_relaxed); }

 private:
  friend struct IoLoop;
  // Queues `o`; `finish(o)` runs under queue_mu_ (so what it numbers is
  // numbered in send order).
  template <typename Finish>
  void Enqueue(Outgoing&& o, Finish&& finish);
  // The I/O thread: moves everything queued into *batch.
  void TakeQueued(std::deque<Outgoing>* batch);
  // A request to the coordinator (never held).
  static bool ToCoordinator(const Outgoing& o) { return o.kind == Outgoing::kSend && o.target < 0; }
  // The I/O thread, before it polls: false when something is queued (poll
  // without waiting); else it is asleep until TakeQueued, and the next
  // Enqueue wakes it.
  bool PrepareToSleep();

  const ClientOptions& opts_;
  const Sender& self_;
  std::atomic<uint64_t> next_id_{1};
  std::atomic<uint64_t> coord_reconnects_{0};
  std::atomic<bool> stop_requested_{false};
  std::atomic<uint64_t> late_replies_{0};
  int efd_ = -1;  // wakes the I/O thread; set by Start, then constant

  std::mutex queue_mu_;  // guards queue_, stopping_, seq_, asleep_, holds_, unheld_, bypass_
  std::deque<Outgoing> queue_;
  bool stopping_ = false;
  // The I/O thread polls (or is about to) with nothing queued: only then
  // does an Enqueue write efd_ (a system call; the thread awake takes the
  // queue before it polls again).
  bool asleep_ = false;
  int holds_ = 0;      // Hold()s not Release()d yet
  size_t unheld_ = 0;  // while held: the queue's first items, queued before the hold began (not held)
  size_t bypass_ = 0;  // while held: requests to the coordinator queued (not held either)
  std::vector<uint64_t> seq_;  // replica group -> this worker's last push sequence number
  std::function<void(ClusterView)> on_cluster_;  // set before Start, then called by the I/O thread

  std::unique_ptr<IoLoop> loop_;  // the I/O thread's state (made by Start)
  std::thread thread_;
};

}  // namespace shardps::detail
