// The job's processes as the coordinator knows them: one slot per server
// rank and per worker rank, who holds it (its connection and identity),
// when it was last heard from, what its heartbeats reported, and the
// membership version that counts the changes of the live workers.
//
// It decides who takes which rank (RegisterServer, RegisterWorker), who is
// declared dead (ExpireWorker, ExpireServers) and who left; the coordinator
// tells the servers (a ClusterUpdate) and hands back a dead worker's work.
// No sockets: a connection is its ROUTER routing id, an opaque string.
//
// Thread: not thread-safe; the coordinator's Run() thread owns its
// Membership.
#pragma once

#include <chrono>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "server/coordinator/logic/waits.h"
#include "shardps/status.h"

namespace shardps {

// A worker rank's state. Saved as its number (DurableWorker.state in
// schema/shardps.fbs): append new states at the end only.
// kVacant: a rank past num_workers no worker has taken yet (elastic).
enum class WorkerState : uint8_t { kPending, kAlive, kLeft, kDead, kVacant };
const char* WorkerStateName(WorkerState s);  // "pending", "alive", ...

// Who a process is, from its Register (for status).
struct Identity {
  std::string host, metrics_url;
  uint32_t pid = 0;
};

// A server's request and byte totals at one heartbeat.
struct StatsSample {
  int64_t at_ms = 0;  // the server's monotonic clock
  uint64_t pushes = 0, pulls = 0, push_bytes = 0, pull_bytes = 0;
};

// A server's tiered tables (schema ColdTierStats).
struct ColdTierSample {
  bool tiered = false;
  uint64_t hot_rows = 0, cold_rows = 0, hits = 0, reads = 0, moved_down = 0, bytes_read = 0, bytes_written = 0;
};

struct ServerSlot {
  bool registered = false;
  bool alive = false;
  std::string routing_id, endpoint;
  std::chrono::steady_clock::time_point last_seen;
  Identity id;
  uint64_t budget = 0;  // bytes of tables it may hold (0: unknown)
  // The two newest heartbeats' totals: their difference is the rate.
  StatsSample prev, last;
  uint32_t parked_pulls = 0;
  ColdTierSample cold;
  ServerWaitView waits;  // its worker clocks and held pulls, newest heartbeat
  bool adopt = false;    // resumed: taken back on its first heartbeat (its endpoint is known)
  // Declared dead (replicas: its groups are served by others): never
  // registered or heard again in this job; `routing_id` kept to tell it so.
  bool dead = false;
  bool drained = false;  // dead because drained (shardps-ctl drain-server): left on purpose
};

struct WorkerSlot {
  WorkerState state = WorkerState::kPending;
  std::chrono::steady_clock::time_point last_seen;
  Identity id;
  std::string routing_id;  // its connection, for a Register sent again
  int64_t clock = -1;      // from its heartbeats
};

// A decoded Register of a server or a worker.
struct Registration {
  int requested_rank = -1;  // < 0: any rank
  Identity id;
  std::string endpoint;        // a server's data endpoint
  uint64_t memory_budget = 0;  // a server's (0: unknown)
};

// What a heartbeat of a server reports (its ServerStats body).
struct ServerReport {
  StatsSample sample;
  uint32_t parked_pulls = 0;
  ColdTierSample cold;
  ServerWaitView waits;
};

// What the durable state keeps of a slot (schema DurableServer and
// DurableWorker).
struct SavedServer {
  std::string endpoint;  // "" = never registered
  uint64_t budget = 0;
  std::string host;
  bool dead = false;     // failed over (replicas): not taken back
};
struct SavedWorker {
  WorkerState state = WorkerState::kPending;
  std::string host;
  uint32_t pid = 0;
};

class Membership {
 public:
  using Clock = std::chrono::steady_clock;
  using Millis = std::chrono::milliseconds;

  struct Options {
    uint32_t num_servers = 1;
    uint32_t num_workers = 1;
    uint32_t max_workers = 0;  // ranks [num_workers, max_workers) start vacant (elastic)
    Millis heartbeat_timeout{5000};
    Millis join_timeout{120000};
    // Replicas: a server may take the rank of one declared dead (a
    // replacement, filled with copies while the job runs); the dead one's
    // connection stays fenced off.
    bool replace_dead = false;
  };
  // How a worker's Register was taken.
  enum class Join {
    kAgain,          // the same process sent it again: the same answer, nothing changed
    kJoined,         // a pending rank: the job's start
    kJoinedRunning,  // a dead or vacant rank joins the running job (the live workers changed)
  };
  // Who a message says it comes from (its header's role).
  enum class Speaker { kOther, kServer, kWorker };
  // What a message told about its sender (Heard).
  struct Heard {
    int server = -1;       // the sender's server rank, -1: not a server
    bool adopted = false;  // a server of the resumed job came back with it
  };

  explicit Membership(const Options& o);

  // A server's Register from connection `from`. OK: it holds `*rank` now
  // (registered, alive; a re-registration keeps its rank); else the error
  // to answer with (no endpoint, every rank taken, a rank outside the job,
  // one held by a live server).
  // With Options::replace_dead, a dead rank is taken too (*replaced true).
  Status RegisterServer(const std::string& from, const Registration& r, Clock::time_point now, int* rank,
                        bool* replaced = nullptr);
  // A worker's Register: a rank of its own choosing, else the first one not
  // started, else the first dead one (a restarted worker), else a vacant
  // elastic rank. OK: it holds `*rank` (`*how` says how it came to);
  // else the error to answer with (the job is `stopping`, every rank taken,
  // a rank outside the job, one held by a live worker, one that left).
  Status RegisterWorker(const std::string& from, const Registration& r, bool stopping, Clock::time_point now,
                        int* rank, Join* how);

  // Any message from a known peer counts as its heartbeat: a server's (by
  // its connection) and a worker's (by the rank it gives). A message other
  // than a Register from a server of the resumed job (its rank, its slot
  // waiting to be adopted) brings that server back.
  Heard Hear(const std::string& from, Speaker speaker, int rank, bool is_register, Clock::time_point now);
  // A worker's heartbeat at `clock` (REQUIRES: `rank` is a worker rank):
  // Unavailable when the rank is not alive.
  Status WorkerHeartbeat(int rank, int64_t clock);
  // A server's heartbeat report (REQUIRES: `server` is a registered rank).
  void ServerHeartbeat(int server, const ServerReport& r);
  // A worker's Leave: true when it was live (it is kLeft now).
  bool Leave(int rank);
  // Declares worker `rank` dead when it is alive and silent for more than
  // the heartbeat timeout, or pending and `now - start` past the join
  // timeout; true when it did (logged).
  bool ExpireWorker(uint32_t rank, Clock::time_point now, Clock::time_point start);
  // Marks every registered server silent for more than the heartbeat
  // timeout not alive (logged; it is alive again on its next message).
  // Returns the ranks newly found silent.
  std::vector<uint32_t> ExpireServers(Clock::time_point now);
  // Server `rank` is dead for the rest of the job (its partitions are
  // failed over): no longer registered, alive or waited for; a message
  // from it is recognised (IsDeadServer) and a Register for its rank
  // refused. False when it is not a registered server (or one of a
  // resumed job not back yet).
  bool DeclareServerDead(uint32_t rank);
  // After a drain: the dead server shows as "drained" (status).
  void MarkDrained(uint32_t rank);
  bool IsDeadServer(const std::string& routing_id) const;
  std::vector<uint32_t> DeadServers() const;
  // A Stop waits for this: false while a worker is alive (finishing its
  // step). Every pending worker is marked kLeft (a stopping job takes no
  // worker: under sync a live worker's step would wait for its clock).
  // *changed (optional): whether a pending worker became kLeft (the live
  // workers changed: the servers must stop waiting for it).
  bool NoWorkerAlive(bool* changed = nullptr);
  // The live workers changed: the next membership version (logged).
  void Changed();
  // A rollback: every server and worker slot as at the job's start (the
  // identities kept; ranks added by AddServer gone), the next membership
  // version.
  void RollBack();
  // A resumed job: each server of the saved job with an endpoint is taken
  // back on its first message.
  void AdoptServers();

  int ServerRankOf(const std::string& routing_id) const;  // registered servers only; -1: none
  // Every server rank registered, dead, or added and never taken.
  bool AllServersRegistered() const;
  // shardps-ctl add-server: one more server rank (returned), open to the
  // next server that registers; the job's own `num_servers` stay as they
  // are (the map's groups do not change).
  uint32_t AddServer();
  std::vector<uint32_t> RegisteredServers() const;
  std::set<uint32_t> AnsweringServers() const;  // registered and alive
  // Each server's memory budget in bytes; 0 when unknown or not registered.
  std::vector<uint64_t> Budgets() const;
  std::vector<uint32_t> LiveWorkers() const;  // pending or alive, ascending
  // The clock every registered server last counted for worker `rank` (the
  // lowest; -1 when none did or there is no server).
  int64_t CountedClock(uint32_t rank) const;
  // The furthest clock a worker's heartbeat reported (-1: none).
  int64_t FurthestClock() const;

  const std::vector<ServerSlot>& servers() const { return servers_; }
  const std::vector<WorkerSlot>& workers() const { return workers_; }
  uint32_t worker_ranks() const { return static_cast<uint32_t>(workers_.size()); }
  uint64_t version() const { return version_; }

  // The durable state's view of the slots.
  std::vector<SavedServer> SavedServers() const;
  std::vector<SavedWorker> SavedWorkers() const;
  // A resumed job: the saved slots (REQUIRES: `servers` empty or at least
  // one per server rank of the job — more when ranks were added —, `workers`
  // at most one per worker rank) and the version
  // after the saved one (at least the next of this one's). A restored live
  // worker has a heartbeat timeout from `now` to show up in.
  void Restore(const std::vector<SavedServer>& servers, const std::vector<SavedWorker>& workers,
               uint64_t saved_version, Clock::time_point now);

 private:
  // Run()'s thread owns all of these.
  Options opts_;
  std::vector<ServerSlot> servers_;
  std::vector<std::string> fenced_;  // connections of dead servers whose ranks were taken again
  std::vector<WorkerSlot> workers_;
  uint64_t version_ = 1;
};

}  // namespace shardps
