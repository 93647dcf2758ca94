// The coordinator of one job: the socket every process registers on, and a
// thin dispatcher that feeds each decoded message to the part it concerns
// and sends back what that part decided. It is never on the push/pull data
// path: clients fetch the cluster view once and then talk to the servers
// directly.
//
// Its parts (each a plain class with its own header and unit test):
//   Membership        server/coordinator/logic/membership.h: server and worker ranks,
//                     registering, heartbeats, failure detection, leaving
//   TableDirectory    server/coordinator/logic/table_directory.h: tables, the shard map,
//                     memory budgets, who has still to confirm them
//   Barrier           server/coordinator/logic/barrier.h: worker barriers
//   WorkPools         server/coordinator/logic/work_pools.h: ClaimWork, per-clock and pooled
//   SnapshotScheduler server/coordinator/logic/snapshot_scheduler.h: snapshots, their cut
//                     clocks and timers, history, the restore point
//   StateStore        server/coordinator/store/coordinator_state.h: the durable state
//                     (--state-dir), saved before the replies it promises
//   CoordinatorMetrics server/coordinator/coordinator_metrics.h: the /metrics series
// and here: the dispatch table, replies, cluster updates to the servers,
// status (GetStatus), Stop, Rollback and Shutdown.
//
// Files: coordinator.cc (socket, dispatch, membership, tables, barriers,
// work, durable state), coordinator_snapshot.cc (snapshots, restore,
// rollback), coordinator_status.cc (heartbeats, status, stop, shutdown),
// coordinator_failover.cc (replicas: a dead server's groups to their
// backups, DeclareDead, fencing).
//
// Threads: Run()'s thread owns the object and every part (Bind() runs
// before it, on the thread that then calls Run()). The one thing another
// thread reads is the metrics registry (`opts.metrics`), scraped by its
// HTTP thread: the coordinator's series are relaxed atomics it sets
// (CoordinatorMetrics). The ZAP handler (zap_, with security on) serves on
// a thread of its own and reaches this object's socket only through ZeroMQ
// (ZAP requests, the socket's monitor); its state is its own (common/net/zap.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <flatbuffers/flatbuffers.h>
#include <zmq.hpp>

#include "common/cluster/cluster.h"
#include "common/net/net.h"
#include "server/coordinator/coordinator_metrics.h"
#include "server/coordinator/coordinator_options.h"
#include "server/coordinator/logic/barrier.h"
#include "server/coordinator/logic/membership.h"
#include "server/coordinator/logic/snapshot_scheduler.h"
#include "server/coordinator/logic/table_directory.h"
#include "server/coordinator/logic/waiter.h"
#include "server/coordinator/logic/work_pools.h"
#include "server/coordinator/store/coordinator_state.h"
#include "shardps/status.h"

namespace shardps {

class ZapHandler;
namespace wire {
struct Header;
enum class MsgType : uint8_t;
}  // namespace wire

class Coordinator {
 public:
  Coordinator(zmq::context_t& ctx, CoordinatorOptions opts);
  ~Coordinator();
  // Binds the socket (and writes the endpoint file); with `state_dir`,
  // opens the durable state and resumes the job saved there; else, with
  // `restore`, picks the snapshot to start from and takes its tables.
  // With a state store, takes it first (etcd: waits to lead the job, while
  // `stop` allows, as long as --standby says) and resumes what it holds.
  Status Bind(const std::atomic<bool>* stop = nullptr);
  // Bind failed because this standby led a job that had already ended.
  bool ended_before() const { return opened_.ended_before; }
  const std::string& endpoint() const { return endpoint_; }
  // Serves until a Shutdown request, the end of a Stop, or `stop` becomes
  // true. Returns why the job could not run (OK when it could).
  Status Run(const std::atomic<bool>& stop);

 private:
  friend class CoordinatorFuzzAccess;  // tests/fuzz: drives Handle (and PrepareRestore) directly

  using Handler = void (Coordinator::*)(const std::string& from, const wire::Header& h);
  // One row of the dispatch table: the messages the coordinator serves.
  // Who may send each type (with security on) is common/net/zap.h's Authorize,
  // the one per-type role table of the protocol, checked before dispatch;
  // types for workers only (Leave, Barrier, per-clock ClaimWork) check the
  // header's rank in their handler.
  struct Route {
    wire::MsgType type;
    Handler handle;
    bool changes_state;  // the durable state is saved after it (Commit)
  };
  static const Route kRoutes[];
  static const Route* RouteOf(wire::MsgType type);

  // One received message: [routing id, header]. Parses, authorizes, counts
  // it as its sender's heartbeat, dispatches.
  void Handle(std::vector<zmq::message_t>& frames);
  Status Admit(const zmq::message_t& header_frame, const wire::Header& h) const;  // security: may it send this?
  void Hear(const std::string& from, const wire::Header& h);

  // Handlers (kRoutes).
  void HandleRegister(const std::string& from, const wire::Header& h);
  void HandleHeartbeat(const std::string& from, const wire::Header& h);
  void HandleStatus(const std::string& from, const wire::Header& h);
  void HandleStop(const std::string& from, const wire::Header& h);
  void HandleGetCluster(const std::string& from, const wire::Header& h);
  void HandleCreateTable(const std::string& from, const wire::Header& h);
  void HandleBarrier(const std::string& from, const wire::Header& h);
  void HandleClaimWork(const std::string& from, const wire::Header& h);
  void HandleLeave(const std::string& from, const wire::Header& h);
  // A Reply: to a snapshot request, else an acknowledgement of an update.
  void HandleReply(const std::string& from, const wire::Header& h);
  void HandleSnapshotDone(const std::string& from, const wire::Header& h);
  void HandleSnapshotNow(const std::string& from, const wire::Header& h);
  // A server died: every server reloads the newest complete snapshot and
  // every worker starts again from it (docs/fault-tolerance.md).
  void HandleRollback(const std::string& from, const wire::Header& h);
  // Server h.rank() is dead (shardps-ctl declare-dead: the launcher saw its
  // process end): FailOver now rather than at the heartbeat deadline.
  void HandleDeclareDead(const std::string& from, const wire::Header& h);
  // (HandleFilled, HandleDrainServer, HandleAddServer, HandleRebalance:
  // below, with re-replication and moves.)
  void HandleShutdown(const std::string& from, const wire::Header& h);

  void RegisterServer(const std::string& from, const wire::Header& h, const Registration& r);
  void RegisterWorker(const std::string& from, const wire::Header& h, const Registration& r);
  void HandleAck(const std::string& from, const wire::Header& h);

  // The periodic checks (every 100 ms): silent processes, unconfirmed
  // tables, gauges, a Stop's progress; snapshot deadlines and timed ones.
  void CheckTimeouts();
  void CheckSnapshotTimers();

  // Sync, with more than one replica group (coordinator_retire.cc): a
  // worker declared dead is retired in two cluster updates. The first
  // names it retiring (still waited for; the servers refuse its requests
  // from then on and report, in their acks, the clock it reached on each
  // group); once every answering server reported (or the ack timeout
  // passed), the second says it is gone at the furthest clock reported, and
  // a server that saw fewer of its ticks takes the missing ones (their
  // pushes are there: a synchronous tick leaves the client only once every
  // push of its clock was answered). So a worker that dies between its
  // ticks to two servers counts for the same clocks on every server, and
  // its work from that clock on goes to the others.
  bool RetiresWorkers() const;
  void StartRetirement(uint32_t rank, uint64_t update);
  void OnRetireAck(uint32_t server, const wire::Header& h);
  void FinishRetirements(Clock::time_point now);
  // A fail-over under way of a retirement: the groups moved are reported
  // by their new primaries (every answering server is asked again, from
  // cluster update `update` on).
  void RetireAgain(uint64_t update);

  // The live workers changed: a new membership version to every server,
  // and a barrier they were all that was missing for is released.
  void MembershipChanged();
  void ReleaseBarrier();
  // Once every server registered: the shard map, the tables' budgets
  // checked against the servers', the map sent out for acknowledgement.
  void MaybeCompleteMap();
  // The job's first map: its partitions in [job] groups on its own servers
  // (their hosts as registered), [job] replicas copies of each.
  ShardMap JobMap() const;
  // Replicas (coordinator_failover.cc): server `rank` is dead; each group
  // it served is served by its first backup from a new map version, sent
  // to every live server and told to clients once they all hold it. OK
  // (or OK with nothing to do: not a registered server), or why the job
  // cannot go on without a rollback (one copy per group; a group lost
  // every copy), in which case nothing changes.
  Status FailOver(uint32_t rank, const std::string& why);
  // Re-replication and drains (coordinator_fill.cc). A new map sent to
  // every live server, told to clients once they all hold it.
  // Returns the cluster update that carries it.
  uint64_t ChangeMapTo(ShardMap next);
  // The refusal of a drain or a move (`command`) in a job with one copy.
  static Status OneCopyRefusal(const std::string& command);
  // Names in *m a server to be filled with each group that has fewer
  // copies than [job] replicas (not counting servers being drained) and
  // no fill under way; true (and m's version the next) when it named any.
  bool PlanFills(ShardMap* m);
  // The live server to fill with a copy of group g (kNone: none can take
  // it): not holding it, not draining, within its memory budget, on another
  // host than its copies first, then the one holding the fewest groups.
  uint32_t FillTarget(const ShardMap& m, uint32_t g) const;
  bool FitsBudget(const ShardMap& m, uint32_t server, uint32_t g) const;
  uint32_t CopiesKept(const ShardMap& m, uint32_t g) const;  // full copies not on a draining server
  void HandleFilled(const std::string& from, const wire::Header& h);
  void HandleDrainServer(const std::string& from, const wire::Header& h);
  // Each draining server whose groups all have their copies elsewhere is
  // told to take no more requests; on its acknowledgement (OnDrainAck: true
  // when `request_id` was that) its groups fail over and it exits.
  void MaybeDrain();
  bool OnDrainAck(uint32_t server, uint64_t request_id);
  // Moves (coordinator_moves.cc, docs/fault-tolerance.md "Moves"). A rank
  // opened for a server to join the running job (shardps-ctl add-server),
  // and the copies of groups moved onto it once it registers; a rebalance
  // asked for (shardps-ctl rebalance).
  void HandleAddServer(const std::string& from, const wire::Header& h);
  void HandleRebalance(const std::string& from, const wire::Header& h);
  // shardps-ctl move-group: one move asked for by name (the same fill, then
  // leave, as a rebalance's).
  void HandleMoveGroup(const std::string& from, const wire::Header& h);
  // Plans in *m moves of copies from the most to the least loaded live
  // servers (not draining) until their loads (groups held, minus those
  // leaving) differ by at most one: each a fill of the group into the
  // lighter server, its copy on the heavier one leaving once that fill is
  // done. One move per group at a time. Returns the moves planned (m's
  // version the next when any), each described in *said.
  uint32_t PlanRebalance(ShardMap* m, std::string* said = nullptr);
  // Group g's fill is done: the copy that leaves is told to take no more
  // of its requests (a Drain for that group); on its acknowledgement
  // (OnLeaveAck: true when it was that) the map goes on without it.
  void StartLeave(uint32_t g);
  bool OnLeaveAck(uint32_t server, const wire::Header& h);
  // A move of group g called off (its fill failed or its target died); a
  // copy told to leave already takes the group's requests again (Resume).
  void CancelMove(uint32_t g);
  void SendResume(uint32_t server, int32_t group);  // group -1: every group
  // A message from a server declared dead: told to shut down (it is fenced
  // off; its partitions are served by others). True when it was one.
  bool FenceDeadServer(const std::string& from, const wire::Header& h);
  // A newly published map goes to every live worker at once (unasked;
  // each would get it with its next heartbeat's answer anyway).
  void TellWorkersTheMap();
  void BroadcastUpdate(uint64_t update_id);
  // The job as the servers see it; `published`: with the map clients are
  // told (the newest every live server holds), for clients.
  ClusterView View(bool published = false) const;

  // Snapshots (coordinator_snapshot.cc).
  SnapshotScheduler::Servers SnapshotTargets();
  // Sends what the scheduler decided: the ended snapshots completed, then
  // its requests to the servers.
  void Apply(SnapshotScheduler::Effects& e);
  // Writes an ended snapshot's manifest (when it is complete), records it,
  // answers its waiters; the final one of a Stop shuts the job down.
  void FinishSnapshot(SnapshotScheduler::Ended& e);
  Status WriteManifest(const SnapshotScheduler::Ended& e, int64_t label, const std::string& dir);
  Status PrepareRestore();
  // A snapshot's manifest becomes where the job restarts from (--restore,
  // a rollback).
  void AdoptRestorePoint(const std::string& dir, const snapshot::Manifest& m);
  void RollBackTo(const std::string& dir, const snapshot::Manifest& m);

  // Stop: once no worker is live, a final snapshot (if configured), then
  // every server and the coordinator exit.
  void MaybeFinishStop();
  void ShutdownJob();

  // Replies go out through Commit() when there is a durable state.
  void Reply(const std::string& to, zmq::message_t header);
  void ReplyError(const std::string& to, uint64_t request_id, const Status& s);
  void ReplyCluster(const std::string& to, uint64_t request_id, uint32_t rank);
  // The answer to a CreateTable: the table's spec (and id).
  void ReplyTableSpec(const Waiter& to, uint32_t table);
  void ReplyGrant(const std::string& to, uint64_t request_id, const Grant& g);

  // Durable state. Replies wait in outbox_ until Commit() saved what the
  // message changed (dirty_).
  Status OpenState(bool* resumed, const std::atomic<bool>* stop);
  // The store's upkeep (etcd: the leader's lease); an error: this
  // coordinator no longer leads the job and must stop acting at once.
  Status KeepLead();
  DurableState Durable() const;
  void Resume(DurableState d);
  void Commit();

  // Everything below is owned by Run()'s thread.
  zmq::context_t& ctx_;
  CoordinatorOptions opts_;  // partitions change with a restore, a resumed state, a rollback
  std::unique_ptr<ZapHandler> zap_;  // before the socket: it outlives it
  zmq::socket_t sock_;
  std::string endpoint_;
  flatbuffers::FlatBufferBuilder fbb_;
  Clock::time_point start_;  // Run()'s start, or the last rollback: join timeouts and uptime count from it
  bool shutdown_ = false;
  Status fatal_;  // why the job could not run (Run returns it)
  // Request ids of the coordinator's own requests to servers (cluster
  // updates, snapshot requests): one sequence, so a reply names one.
  uint64_t next_update_id_ = 1;
  uint64_t map_told_ = 1;  // the newest map version sent to the workers unasked

  Membership members_;
  TableDirectory tables_;
  Barrier barrier_;
  WorkPools work_;
  SnapshotScheduler snaps_;
  CoordinatorMetrics metrics_;

  // Stop (shardps-ctl stop).
  struct StopState {
    bool stopping = false;  // saved
    bool final_snapshot_started = false;
    Status final_snapshot;  // how the final snapshot ended
    std::vector<Waiter> waiters;
  };
  StopState stop_;

  // Workers being retired, and the last clock decided for each retired one.
  struct Retirement {
    // Servers that have not reported yet, each with the first cluster
    // update whose ack counts (one that names the worker retiring).
    std::map<uint32_t, uint64_t> awaiting;
    Clock::time_point deadline;
    WorkerFinal last;             // the furthest clock reported (clock -1: none yet)
  };
  std::map<uint32_t, Retirement> retiring_;  // by worker rank
  std::map<uint32_t, WorkerFinal> retired_;  // by worker rank: the last clock decided for its last process

  // Drains under way (not saved: a resumed coordinator forgets them), the
  // Drain message each drained server is to acknowledge, and the fills that
  // failed (group, server), not tried again.
  // Moves (rebalance): group -> the server whose copy leaves once the copy
  // being filled is full, and the Drain of that copy to be acknowledged
  // (group -> request id).
  struct Moves {
    std::set<uint32_t> draining;
    std::map<uint32_t, uint64_t> drain_acks;
    std::set<std::pair<uint32_t, uint32_t>> fill_failed;
    std::map<uint32_t, uint32_t> leaving;
    std::map<uint32_t, uint64_t> leave_acks;
  } moves_;

  std::unique_ptr<StateStore> store_;  // null: no --state-dir
  bool dirty_ = false;
  // What opening the state store found: a job to resume; a job that had
  // ended (a standby that led it: Bind failed).
  struct {
    bool resumed = false;
    bool ended_before = false;
  } opened_;
  std::vector<std::vector<zmq::message_t>> outbox_;
};

}  // namespace shardps
