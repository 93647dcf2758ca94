// The coordinator: membership (ranks, heartbeats, failure detection), the
// table definitions, the versioned shard map, barriers. It is never on the
// push/pull data path: clients fetch the cluster view once and then talk to
// the servers directly.
//
// Thread-safety: Run() is the only thread that touches the object.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <flatbuffers/flatbuffers.h>
#include <zmq.hpp>

#include "common/cluster.h"
#include "common/net.h"
#include "common/security.h"
#include "server/snapshot.h"
#include "server/waits.h"
#include "shardps/status.h"
#include "shardps/types.h"

namespace shardps {

class ZapHandler;
namespace wire {
struct Header;
enum class MsgType : uint8_t;
}
namespace metrics {
class Registry;
class Gauge;
class Counter;
class Histogram;
}

struct CoordinatorOptions {
  std::string bind = "tcp://127.0.0.1:0";  // port 0: any free port
  std::string endpoint_file;               // if set, the bound endpoint is written here
  std::string advertise;                   // host put in the endpoint for a wildcard bind
  std::string metrics_url;                 // where its /metrics is served, for status
  metrics::Registry* metrics = nullptr;    // publishes the job's gauges there (not owned)
  uint32_t num_servers = 1;
  uint32_t num_workers = 1;
  uint32_t max_workers = 0;                 // ranks [num_workers, max_workers) may join later (elastic); 0 = none
  uint32_t partitions = 64;                 // virtual partitions
  Consistency consistency = Consistency::kSync;
  uint32_t staleness = 0;                   // bounded only
  std::vector<TableSpec> tables;            // defined at start
  uint64_t server_memory_mb = 0;            // job file: each server's budget (the launcher passes it; 0: theirs)
  Millis heartbeat_timeout{5000};           // silent this long = dead
  Millis join_timeout{120000};              // a worker rank never seen this long = dead
  Millis ack_timeout{30000};                // servers must ack a table definition
  // Snapshots (docs/snapshots.md).
  std::string snapshot_dir;                 // "" = no snapshots
  uint32_t snapshot_every_clocks = 0;       // 0 = not by clock
  uint32_t snapshot_every_sec = 0;          // 0 = not by time
  uint32_t keep_snapshots = 3;              // newest complete ones kept
  bool restore = false;                     // start from a snapshot in snapshot_dir
  int64_t restore_clock = -1;               // -1: the newest good one
  Millis snapshot_timeout{600000};          // a snapshot not complete by then fails
  // Durable state (docs/fault-tolerance.md): "" = none. A coordinator
  // started on a directory that holds a running job's state resumes it.
  std::string state_dir;
  SecurityOptions security;                 // CURVE + roles (docs/security.md)

  Status Validate() const;
};

class Coordinator {
 public:
  Coordinator(zmq::context_t& ctx, CoordinatorOptions opts);
  ~Coordinator();
  // Binds the socket (and writes the endpoint file); with `restore`, picks
  // the snapshot to start from and takes its tables.
  Status Bind();
  const std::string& endpoint() const { return endpoint_; }
  // Serves until a Shutdown request or `stop` becomes true.
  Status Run(const std::atomic<bool>& stop);

 private:
  friend class CoordinatorFuzzAccess;  // tests/fuzz/fuzz_coordinator.cc: drives Handle directly
  // kVacant: a rank past num_workers no worker has taken yet (elastic).
  enum class WorkerState { kPending, kAlive, kLeft, kDead, kVacant };
  // Who a process is, from its Register (for status).
  struct Identity {
    std::string host, metrics_url;
    uint32_t pid = 0;
  };
  struct StatsSample {
    int64_t at_ms = 0;  // the server's monotonic clock
    uint64_t pushes = 0, pulls = 0, push_bytes = 0, pull_bytes = 0;
  };
  struct ServerSlot {
    bool registered = false;
    bool alive = false;
    std::string routing_id, endpoint;
    Clock::time_point last_seen;
    Identity id;
    uint64_t budget = 0;  // bytes of tables it may hold (0: unknown)
    // The two newest heartbeats' totals: their difference is the rate.
    StatsSample prev, last;
    uint32_t parked_pulls = 0;
    ServerWaitView waits;  // its worker clocks and held pulls, newest heartbeat
    bool adopt = false;    // resumed: taken back on its first heartbeat (its endpoint is known)
  };
  struct WorkerSlot {
    WorkerState state = WorkerState::kPending;
    Clock::time_point last_seen;
    Identity id;
    std::string routing_id;  // its connection, for a Register sent again
    int64_t clock = -1;  // from its heartbeats
    metrics::Gauge* clock_gauge = nullptr;
  };
  struct Waiter {
    std::string routing_id;
    uint64_t request_id;
  };
  struct PendingTable {
    uint32_t table_id;
    Waiter creator;
    std::set<uint32_t> waiting_for;  // server ranks yet to ack
    uint64_t update_id;
    Clock::time_point deadline;
  };

  void Handle(std::vector<zmq::message_t>& frames);
  void HandleRegister(const std::string& from, const wire::Header& h);
  void HandleCreateTable(const std::string& from, const wire::Header& h);
  void HandleBarrier(const std::string& from, const wire::Header& h);
  void HandleClaimWork(const std::string& from, const wire::Header& h);
  void HandleAck(const std::string& from, const wire::Header& h);
  void HandleHeartbeat(const std::string& from, const wire::Header& h);
  void HandleStatus(const std::string& from, const wire::Header& h);
  void HandleStop(const std::string& from, const wire::Header& h);
  // A server died: every server reloads the newest complete snapshot and
  // every worker starts again from it (docs/fault-tolerance.md).
  void HandleRollback(const std::string& from, const wire::Header& h);
  // Stop: once no worker is live, a final snapshot (if configured), then
  // every server and the coordinator exit.
  void MaybeFinishStop();
  void ShutdownJob();
  void PublishGauges();
  int ServerRankOf(const std::string& routing_id) const;

  // Snapshots (coordinator_snapshot.cc).
  struct SnapOp {
    int64_t clock = -1;           // -1 while still choosing it
    bool on_demand = false;
    int phase = 0;                // 0 query clocks, 1 scheduling, 2 writing
    int64_t margin = 4;
    int tries = 0;
    std::map<uint64_t, uint32_t> asked;  // request id -> server rank
    int64_t max_clock = 0;
    bool missed = false;
    std::set<uint32_t> reported;
    std::vector<snapshot::PartEntry> parts;
    std::vector<snapshot::FileEntry> files;
    std::vector<Waiter> waiters;  // SnapshotNow requests
    Clock::time_point started = Clock::now();
    Clock::time_point deadline;
    bool done = false;
    bool final = false;           // the snapshot a Stop takes before the job exits
  };
  uint32_t snapshots_taken_ = 0;
  int64_t latest_snapshot_clock_ = -1;
  std::string latest_snapshot_dir_;
  double latest_snapshot_ms_ = 0;
  Status PrepareRestore();
  void StartOnDemandSnapshot(const Waiter* requester);
  void AskServers(SnapOp& op, wire::MsgType type, int64_t clock);
  bool HandleSnapshotReply(const std::string& from, const wire::Header& h);
  void HandleSnapshotDone(const std::string& from, const wire::Header& h);
  void FinishSnapshot(SnapOp& op, const Status& failure);
  void CheckSnapshotTimers();
  std::vector<SnapOp> snap_ops_;
  Clock::time_point next_timed_snapshot_;
  std::string restore_dir_;
  int64_t clock_base_ = 0;  // a restored job's snapshots continue the restored clock
  void Reply(const std::string& to, zmq::message_t header);
  // Durable state (coordinator_state.cc). Replies wait in outbox_ until
  // Commit() saved what the message changed (dirty_).
  struct StateStore;
  struct StateStoreDeleter {
    void operator()(StateStore* s) const;
  };
  std::unique_ptr<StateStore, StateStoreDeleter> state_;
  bool dirty_ = false, resumed_ = false;
  std::vector<std::vector<zmq::message_t>> outbox_;
  Status OpenState(bool* resumed);
  Status LoadState(const std::string& value);
  bool SaveState();
  void ForgetState();  // the job ended: nothing to resume
  void Commit();
  // Each worker's last pooled (not per-clock) claim, by its sequence
  // number: a claim sent again (the coordinator restarted before
  // answering) gets the same grant.
  struct LastClaim {
    uint64_t seq = 0, pool = 0, begin = 0, end = 0;
  };
  std::map<uint32_t, LastClaim> last_claims_;
  void ReplyError(const std::string& to, uint64_t request_id, const Status& s);
  void ReplyCluster(const std::string& to, uint64_t request_id, uint32_t rank);
  void BroadcastUpdate(uint64_t update_id);
  void MembershipChanged();
  void CheckTimeouts();
  void MaybeCompleteMap();
  void MaybeReleaseBarrier();
  // OK when `spec` fits every registered server's memory budget next to the
  // tables already defined (`defined` of tables_), else TooLarge naming the
  // table, the bytes it needs and the bytes left.
  Status CheckBudget(const TableSpec& spec, size_t defined) const;
  Status fatal_;  // why the job could not run (Run returns it)
  ClusterView View() const;
  std::vector<uint32_t> LiveWorkers() const;

  zmq::context_t& ctx_;
  CoordinatorOptions opts_;
  std::unique_ptr<ZapHandler> zap_;  // before the socket: it outlives it
  zmq::socket_t sock_;
  std::string endpoint_;
  flatbuffers::FlatBufferBuilder fbb_;
  bool shutdown_ = false;
  Clock::time_point start_;

  std::vector<ServerSlot> servers_;
  std::vector<WorkerSlot> workers_;
  std::vector<TableSpec> tables_;
  ShardMap map_;
  uint64_t membership_version_ = 1;
  uint64_t next_update_id_ = 1;

  std::vector<Waiter> cluster_waiters_;  // GetCluster before every server holds the map
  bool cluster_ready_ = false;           // every server acknowledged the first map
  uint64_t map_update_id_ = 0;
  std::set<uint32_t> map_waiting_;       // servers yet to acknowledge it
  uint64_t barrier_generation_ = 0;
  std::map<uint32_t, Waiter> barrier_arrived_;  // worker rank -> its request
  // Shared work pools (ClaimWork), by pool id. Units [next, total) were never
  // handed out; `returned` holds the last grants of workers that died (a
  // worker claims again only when it finished its grant, so only the last
  // one can be unfinished), handed out again first.
  struct WorkPool {
    uint64_t total = 0;
    uint64_t next = 0;
    std::map<uint32_t, std::pair<uint64_t, uint64_t>> last;  // worker rank -> its last grant
    std::deque<std::pair<uint64_t, uint64_t>> returned;
    // Per-clock claims (sync trainers): each clock's block of units, cut at
    // its first claim, one slot of `per` units per worker live then, in rank
    // order — the batches of one clock are one single-process batch.
    struct Block {
      uint64_t begin = 0, end = 0;
      uint32_t per = 0;
      std::vector<uint32_t> ranks;
      std::vector<uint8_t> taken;
    };
    std::map<int64_t, Block> blocks;
    int64_t last_clock = -1;  // the clock whose block handed out the last never-granted unit
    bool used_up() const { return next >= total && returned.empty(); }
    uint64_t handed() const;  // units handed out and not handed back
    // The first unit not known to be done: before it, every unit was handed
    // out and no grant of it is outstanding or handed back.
    uint64_t FirstUndone() const;
    // Up to `max` units handed back by a dead worker (empty: none).
    std::pair<uint64_t, uint64_t> TakeReturned(uint64_t max);
    static std::pair<uint64_t, uint64_t> Slot(const Block& b, size_t i);
  };
  std::map<uint64_t, WorkPool> work_pools_;
  // A per-clock grant whose gradient is not known to be applied yet.
  struct ClockGrant {
    uint64_t pool;
    int64_t clock;
    uint64_t begin, end;
  };
  std::map<uint32_t, std::deque<ClockGrant>> clock_grants_;  // worker rank -> its recent grants
  // Where the per-clock pools stood at clocks a snapshot may cut at: clock
  // -> (pool, units handed out before that clock). Recorded in the
  // snapshot's manifest.
  std::map<int64_t, std::pair<uint64_t, uint64_t>> work_at_;
  bool MayCutAt(int64_t clock) const;
  // Pooled (bounded, async) claims: the first claim made at or after a
  // clock a snapshot may cut at records where the pool stood (every unit
  // before the first one not known to be done).
  void RecordPooledWorkAt(int64_t clock, uint64_t pool_id, const WorkPool& p);
  void RecordWorkAt(int64_t clock, uint64_t pool_id, uint64_t position);
  // A snapshot's manifest becomes where the job restarts from (--restore,
  // a rollback).
  void AdoptRestorePoint(const std::string& dir, const snapshot::Manifest& m);
  // CreateTable of a known table while a resumed cluster is not ready: the
  // asker and the table.
  std::vector<std::pair<Waiter, uint32_t>> table_waiters_;
  // The answer to a CreateTable: the table's spec (and id).
  void ReplyTableSpec(const Waiter& to, uint32_t table);
  // A restored job resumes there: pools before `resume_pool_` are finished,
  // that one starts at `resume_position_`.
  uint64_t resume_pool_ = 0, resume_position_ = 0;
  void ClaimPerClock(const std::string& from, const wire::Header& h, uint64_t pool_id, WorkPool& p, uint32_t max);
  void ReplyGrant(const std::string& from, uint64_t request_id, uint64_t pool, uint64_t begin, uint64_t end,
                  uint8_t state, uint64_t handed);
  // A worker died: its last grant of every pool goes back (dead = true), or
  // it left: its grants are done (dead = false). Per-clock grants go back
  // when the servers never counted their clock (the worker's final clock
  // as the servers' heartbeats report it).
  void ForgetWorkOf(uint32_t rank, bool dead);
  // Per-clock blocks older than `clock` - 4 are dropped; a slot never
  // claimed in them (or, with `rank` >= 0, any slot of that rank) goes back.
  void ReturnSlots(WorkPool& p, int64_t before_clock, int rank);
  std::vector<PendingTable> pending_tables_;

  // Stop (shardps-ctl stop).
  bool stopping_ = false;
  bool final_snapshot_started_ = false;
  Status final_snapshot_;  // how the final snapshot ended
  std::vector<Waiter> stop_waiters_;

  // Metrics (null when the process serves none).
  metrics::Gauge* live_workers_gauge_ = nullptr;
  metrics::Gauge* live_servers_gauge_ = nullptr;
  metrics::Gauge* min_clock_gauge_ = nullptr;
  metrics::Gauge* max_clock_gauge_ = nullptr;
  metrics::Counter* snapshots_counter_ = nullptr;
  metrics::Counter* snapshot_failures_counter_ = nullptr;
  metrics::Histogram* snapshot_seconds_ = nullptr;
};

}  // namespace shardps
