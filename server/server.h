// The parameter server: holds its partitions of every table, applies pushed
// gradients with the table's optimizer and answers pulls under the job's
// consistency model (docs/consistency.md).
//
// Threads. One event-loop thread (the one that calls Start and then Run)
// owns the tables and both sockets: a ROUTER for the data path (push, pull,
// tick) and a DEALER to the coordinator (register, heartbeats, cluster
// updates). Requests are applied in arrival order, so concurrent pushes and
// pulls from many workers are serialised without locks; pulls that must
// wait for slower workers are parked, never block the loop. A second
// thread, the snapshot writer, writes finished cuts to disk; it shares
// nothing with the loop but the queues of SnapshotCut's CutWriter (under
// its mutex). The metrics registry is rendered by the metrics HTTP thread.
// Scale out by running more servers (one per core).
//
// Server is the front end: it decodes each message and hands each concern
// to a part (LevelDB's DBImpl is the model):
//   server_start.h   start-up: sockets, CURVE, registration
//   table_set.h      the tables held, within the memory budget; restore
//   request_check.h  a push or pull validated before anything changes
//   reply_outbox.h   replies gathered per client into envelopes
//   shard.h          one replica group held here: its consistency model
//                    (worker_clocks.h: clocks, membership, held sync
//                    pushes, parked pulls; no sockets), delay
//                    compensation's kept pulls (dc_kept.h), its snapshot
//                    cuts (snapshot_cut.h), its replication stream
//   server_metrics.h the series it counts
// and its own request handlers live in server_push.cc, server_pull.cc,
// server_clock.cc (tick, join, applying complete clocks),
// server_snapshot.cc (when to cut, reports, the coordinator's snapshot
// control) and server_replica.cc (replica groups: the stream to the
// backups, applying it on a backup, taking a group over).
//
// Every data request names a replica group (docs/fault-tolerance.md,
// "Replicas"); the server handles it with that group's Shard if it is the
// group's primary. With one copy per group, a server's only group is its
// own.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <flatbuffers/flatbuffers.h>
#include <zmq.hpp>

#include "common/cluster/cluster.h"
#include "common/metrics/metrics.h"
#include "common/net/net.h"
#include "server/reply_outbox.h"
#include "server/request_check.h"
#include "server/server_metrics.h"
#include "server/server_options.h"
#include "server/shard.h"
#include "server/tables/table_set.h"
#include "shardps/status.h"

namespace shardps {

class ZapHandler;
namespace wire {
struct Header;
enum class RepKind : uint8_t;
enum class MsgType : uint8_t;
}

class Server {
 public:
  Server(zmq::context_t& ctx, ServerOptions opts);
  ~Server();
  // Binds the data socket and registers with the coordinator (waits for its
  // reply, up to register_timeout).
  Status Start(const std::atomic<bool>* stop = nullptr);  // gives up when *stop is set
  // Serves until the coordinator says Shutdown or `stop` becomes true.
  Status Run(const std::atomic<bool>& stop);

  uint32_t rank() const { return rank_; }
  const std::string& endpoint() const { return endpoint_; }
  // The server's metrics (updated by Run's thread; render from any thread).
  metrics::Registry& registry() { return registry_; }
  void set_metrics_url(std::string url) { opts_.metrics_url = std::move(url); }

 private:
  friend class ServerFuzzAccess;  // tests/fuzz/fuzz_{server,snapshot}.cc: drive the handlers directly

  // Every member function runs on the event loop.
  uint64_t TableBytes() const { return tables_.Bytes(); }  // (the fuzz targets check it against the budget)
  // A message on the data socket: a request, a stream message, or an
  // envelope of requests (each handled as if it came alone, in order).
  // `enveloped`: it came in one (an envelope in it is refused).
  void HandleData(std::vector<zmq::message_t>& frames, bool enveloped = false);
  void HandleEnvelope(const wire::Header& h, std::vector<zmq::message_t>& frames);
  // Reads the data socket (up to 256 messages a pass, into `frames`; true:
  // more may wait), handling each message and sending the replies it made.
  bool ReadData(std::vector<zmq::message_t>& frames);
  void HandleCoordinator(std::vector<zmq::message_t>& frames);
  void ApplyCluster(const ClusterView& v);
  // Every reply to a data request goes out here: at once, held by its
  // shard until the backups have what it follows from, or dropped on a
  // backup (server_replica.cc).
  void Send(std::vector<zmq::message_t>&& frames);
  // A reply leaving: to a client that sends envelopes, gathered with its
  // other replies until FlushReplies; else sent now.
  void SendReply(std::vector<zmq::message_t>&& frames);
  // Sends the gathered replies: one message per client. Called after each
  // message read and before the loop sleeps (nothing waits in the outbox
  // while the loop does).
  void FlushReplies();
  void SendOut(std::vector<zmq::message_t>& frames);  // a reply (or an envelope of them) to the data socket
  void Reply(const zmq::message_t& to, zmq::message_t header);
  void ReplyError(const zmq::message_t& to, uint64_t request_id, const Status& s);
  void UpdateGauges();
  void SendHeartbeat();
  // The event loop's work after each pass over the sockets: cuts copied,
  // held pulls expired, idle rows evicted, tiered tables' rows moved down
  // (*moving: more to move). False: the cold tier failed (fatal_ set).
  bool BetweenRequests(bool* moving);
  void LogStopped() const;  // what the server held, as it stops
  // The shard of request `h`'s group when this server is its primary; else
  // null, after answering WrongServer.
  Shard* ServingShard(const wire::Header& h, const zmq::message_t& from);
  // The shards this server is the primary of (those it serves).
  std::vector<Shard*> Primaries();

  // server_push.cc
  void Push(Shard& sh, const wire::Header& h, std::vector<zmq::message_t>& frames);
  // A push applied now (bounded staleness, async, observers): each of its
  // steps one optimizer step, weighed by its staleness.
  void ApplyPush(Shard& sh, const wire::Header& h, std::vector<zmq::message_t>& frames, ServerTable* t,
                 const uint64_t* keys, const float* const* values);
  // server_pull.cc. `arrived`: when the request was received; `resumed`: it was parked.
  void Pull(Shard& sh, const wire::Header& h, std::vector<zmq::message_t>& frames, Clock::time_point arrived,
            bool resumed = false);
  void ExpireParked(Shard& sh);  // answers the pulls parked past max_hold with Timeout
  // server_clock.cc
  void Tick(Shard& sh, const wire::Header& h, std::vector<zmq::message_t>& frames);
  // A worker (re)joining a running job: where its clock starts (Join).
  void Join(Shard& sh, const wire::Header& h, std::vector<zmq::message_t>& frames);
  // Applies every synchronous clock all live workers finished, then answers
  // the parked pulls that may now go.
  void Advance(Shard& sh);
  void ApplyClock(Shard& sh, WorkerClocks::CompleteClock& c);  // its held pushes, one averaged step
  // server_snapshot.cc
  bool CutDue(const Shard& sh, int64_t clock) const;  // a cut at `clock` is scheduled or periodic
  void CutIfDue(Shard& sh, int64_t clock);            // sync: called with the applied clock
  void MaybeCut(Shard& sh);                           // bounded/async and quiescent cuts
  void TakeCut(Shard& sh, int64_t clock);
  void SendSnapshotReports();
  void HandleSnapshotControl(const wire::Header& h);
  // server_replica.cc
  // The shards for the map of view_: one per group held, each a primary or
  // a backup as the map says (a backup whose primary died takes over).
  void PlaceShards();
  // Group sh's place in its chain of copies as map `m` says: the copy it
  // feeds (returned; kNone: the last), what that one is sent again when it
  // changed, the primary's first message.
  uint32_t PlaceInChain(Shard& sh, const ShardMap& m);
  // A data request for shard `sh` (a primary's): handled, and when it
  // changed the group's state and the group has backups, forwarded to them
  // in the order taken (its replies held until they applied it).
  void HandleInput(Shard& sh, const wire::Header& h, std::vector<zmq::message_t>& frames);
  // The stream's first message (the version tag), then each next input to
  // every backup.
  void SendHello(Shard& sh);
  // Input `fseq` (its frames, header first) to the copy sh feeds, a share
  // of it kept while a copy after that one exists (Shard::keep).
  void Feed(Shard& sh, uint64_t fseq, std::vector<zmq::message_t> out);
  void SendToNext(Shard& sh, std::vector<zmq::message_t>& out);
  void Forward(Shard& sh, wire::RepKind kind, std::vector<zmq::message_t> payload,
               const ClusterView* membership = nullptr);
  // The live workers of view_ into a primary's clocks, forwarded.
  // The view's live workers in one group's clocks; what changed there
  // (ApplyCluster logs it once over the groups).
  WorkerClocks::Changes ApplyMembership(Shard& sh);
  // A Replicate from a primary: applied to the backup shard, acknowledged.
  void HandleReplicate(const wire::Header& h, std::vector<zmq::message_t>& frames);
  // Answers a stream message with WrongServer saying why (the sender stops,
  // or for a fill, ends it).
  void RefuseStream(const wire::Header& h, const zmq::message_t& from, const std::string& why);
  void ApplyReplicated(Shard& sh, const wire::Header& h, std::vector<zmq::message_t>& frames);
  // The coordinator's Drain (the whole server, or one group's copy: a
  // move) and Resume (a move called off).
  void HandleDrain(const wire::Header& h);
  // A stream message for a copy that left its group, or from a copy that
  // left it (a move): dropped (true), or a fill into it kept until the map
  // that makes it a copy again.
  bool MovedAway(Shard& sh, const wire::Header& h, int32_t sender, bool dead, std::vector<zmq::message_t>& frames);
  // A backup's acknowledgement upstream of what it and every copy after it
  // applied (when that moved).
  void AckUpstream(Shard& sh, bool fill = false);  // fill: also when only the parts installed moved
  // server_fill.cc: re-replication. The last copy of a group starts
  // filling the map's joining server (its state at this place in the
  // stream), sends the next parts while the copy keeps up.
  void StartFill(Shard& sh);
  void PumpFill(Shard& sh);
  // The copy being filled: a FillBegin / FillPart / FillEnd installed
  // (BadMessage etc. when it cannot be: nothing of it applied).
  Status ApplyFill(Shard& sh, const wire::Header& h, std::vector<zmq::message_t>& frames);
  Status InstallPart(Shard& sh, const wire::Header& h, std::vector<zmq::message_t>& frames);  // one FillPart's rows
  // Tells the coordinator this copy of sh's group is filled, or why not.
  void ReportFilled(Shard& sh, const Status& s);
  // Acknowledgements from the fed copies (the peer sockets): held replies
  // go; a backup acknowledges on upstream. True when a peer had more than
  // one call reads.
  bool ReceiveAcks();
  void ReleaseHeld(Shard& sh);
  zmq::socket_t& Peer(uint32_t server);

  // The versions this server hands out carry its incarnation in the top 16
  // bits (random per start, never 0), so a stamp from before a restart is
  // recognised as unknown rather than compared with new counts.
  static constexpr int kVersionBits = 48;  // wire::kVersionCountBits (asserted in server.cc)
  static uint64_t NewVersionTag();

  // State: the event loop's (registry_ is also read by the metrics thread;
  // cut_'s writer has its own thread).
  metrics::Registry registry_;
  ServerMetrics m_{registry_};
  zmq::context_t& ctx_;
  ServerOptions opts_;               // limits set at construction (0: defaults)
  std::unique_ptr<ZapHandler> zap_;  // before the sockets: it outlives them
  zmq::socket_t data_, coord_;
  // Sockets to be read before the loop sleeps (Run): an operation on a
  // socket may take in the command that announced a message, so every send
  // goes through Data() and Coord() (and Peer()).
  struct Unread {
    bool data = true, coord = true;
  } unread_;
  zmq::socket_t& Data() {
    unread_.data = true;
    return data_;
  }
  zmq::socket_t& Coord() {
    unread_.coord = true;
    return coord_;
  }
  std::string endpoint_;
  uint32_t rank_ = 0;
  flatbuffers::FlatBufferBuilder fbb_;
  std::vector<uint64_t> header_scratch_;
  struct HeldScratch {
    std::vector<uint64_t> keys;  // a held push's keys, when misaligned
    std::vector<float> values;   // a held push's values, when misaligned
  } held_scratch_;
  bool shutdown_ = false;
  // Drained (shardps-ctl drain-server): data requests are dropped (the
  // clients send them again to the copies that take over), the stream goes
  // on until the coordinator's map no longer has this server.
  bool draining_ = false;
  Status fatal_;  // why the server stopped on its own (restore failure)
  // The coordinator as this server hears it: the ids of its requests there,
  // and when it last heard from it (it answers every heartbeat): silence for
  // longer than opts_.coordinator_timeout ends the server (Run).
  struct CoordinatorLink {
    uint64_t next_request_id = 1;
    Clock::time_point heard{};
  } coord_link_;

  ClusterView view_;
  TableSet tables_{opts_.memory_budget};
  RequestCheck check_{tables_, opts_.max_request_bytes};
  std::vector<std::unique_ptr<Shard>> shards_;  // by group: the groups this server holds a copy of (else null)
  struct PeerLink {
    zmq::socket_t socket;  // a DEALER to its data endpoint (the stream)
    std::string endpoint;  // where it is connected (a replacement server has a new one)
    bool check = true;     // to be read before the loop sleeps (Run)
  };
  std::map<uint32_t, PeerLink> peers_;  // by server rank
  ReplyOutbox outbox_;  // replies gathered for the clients that send envelopes
  struct Early {
    std::deque<std::vector<zmq::message_t>> messages;  // came before the map that makes this a backup
    uint64_t bytes = 0;  // their bytes (kept at most the held-bytes limit, and 65536 of them)
  } early_;
  // Keeps a stream message until this server holds the map that explains
  // it; false (nothing kept) past the limits.
  bool KeepEarly(std::vector<zmq::message_t>& frames);
  // The input being handled (HandleInput, or a backup applying one): its
  // shard, whether it changed the group's state, and whether it was refused.
  struct Input {
    Shard* shard = nullptr;  // null: none being handled
    bool changed = false;
    uint64_t request = 0;
    bool refused = false;
    uint64_t fseq = 0;       // its place in the shard's stream: replies it makes wait for it
    std::string from;        // its sender's routing id (request ids are per sender)
    wire::MsgType type{};
  } input_;
};

}  // namespace shardps
