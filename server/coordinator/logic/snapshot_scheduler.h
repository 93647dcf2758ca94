// The coordinator's side of snapshots (docs/snapshots.md): the snapshots
// under way and their deadlines; choosing each one's cut clock with the
// servers (ClockQuery, then SnapshotAt a few clocks ahead of the furthest
// one, SnapshotCancel and further ahead when a server is already past it);
// collecting the servers' reports (SnapshotDone); starting them on demand
// (SnapshotNow), every `every_sec` seconds and for a Stop; the history of
// completed ones (keeping the newest K on disk); the restore point (the
// snapshot a restored or rolled-back job started from, whose clock labels
// the job's snapshots). Also choosing the snapshot a restore starts from.
//
// It sends nothing: each call adds to an Effects the requests to send to
// servers and the snapshots that ended, which the coordinator completes
// (writing the manifest of a complete one) and answers. It reads the
// snapshot directory (a cut clock never names a complete snapshot) and
// removes snapshots past the newest K.
//
// Thread: not thread-safe; the coordinator's Run() thread owns its
// SnapshotScheduler.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "server/coordinator/logic/waiter.h"
#include "server/coordinator/logic/work_pools.h"
#include "server/snapshot/snapshot.h"
#include "shardps/status.h"

namespace shardps {

namespace wire {
enum class MsgType : uint8_t;
}

class SnapshotScheduler {
 public:
  using Clock = std::chrono::steady_clock;

  struct Options {
    std::string dir;                 // "" = the job takes no snapshots
    uint32_t every_clocks = 0;       // 0 = not by clock
    uint32_t every_sec = 0;          // 0 = not by time
    uint32_t keep = 3;               // newest complete ones kept
    std::chrono::milliseconds timeout{600000};  // a snapshot not complete by then fails
  };
  // A request to one server.
  struct Ask {
    uint32_t server;
    wire::MsgType type;  // ClockQuery, SnapshotAt or SnapshotCancel
    uint64_t request_id;
    int64_t clock;
  };
  // A snapshot that ended: every server reported (status OK: its manifest
  // is to be written) or it failed. A snapshot failing again (a second
  // server's error) ends again, with no waiters.
  struct Ended {
    int64_t clock = -1;  // the job's clock it was cut at (label: clock_base() + clock)
    Status status;
    std::vector<snapshot::PartEntry> parts;
    std::vector<snapshot::FileEntry> files;
    std::vector<Waiter> waiters;  // SnapshotNow requests
    bool final = false;           // the snapshot a Stop takes before the job exits
    bool existing = false;        // an on-demand one answered by the complete snapshot at its clock
    Clock::time_point started;
  };
  struct Effects {
    std::vector<Ask> asks;  // to send, in order
    std::vector<Ended> ended;
  };
  // Whom requests go to: the registered servers, and the coordinator's
  // request id counter (shared with its cluster updates, so that a reply
  // names one request).
  struct Servers {
    std::vector<uint32_t> ranks;
    uint64_t* next_id;
    bool workers_live = false;  // a worker is alive (else nothing ticks: any clock may be cut at once)
  };
  // A server's SnapshotDone report.
  struct Report {
    int64_t clock = 0;
    std::optional<std::string> error;  // the server failed its part
    std::vector<snapshot::PartEntry> parts;
    std::vector<snapshot::FileEntry> files;
  };
  struct History {
    uint32_t taken = 0;
    int64_t latest_clock = -1;  // label
    std::string latest_dir;
    double latest_ms = 0;
  };

  explicit SnapshotScheduler(Options o) : opts_(std::move(o)) {}

  // An on-demand snapshot (SnapshotNow; `requester` null: a timed one):
  // joins the one under way, else starts one by asking the servers their
  // clocks.
  void StartOnDemand(const Waiter* requester, const Servers& to, Clock::time_point now, Effects* out);
  // The final snapshot of a Stop: an on-demand one, marked final.
  void StartFinal(const Servers& to, Clock::time_point now, Effects* out);
  // A server's reply to request `request_id` (its status, and for a
  // ClockQuery its `min_clock`): false when no snapshot asked it.
  bool OnReply(uint64_t request_id, const Status& s, int64_t min_clock, const Servers& to, Effects* out);
  // Server `server` wrote its part (or failed) of the snapshot at
  // `r.clock`; a report of no snapshot under way is a periodic cut (every
  // k clocks) the servers took on their own. Complete once all
  // `num_servers` reported.
  void OnReport(uint32_t server, const Report& r, size_t num_servers, Clock::time_point now, Effects* out);
  // Fails the snapshots past their deadline; starts a timed one when due
  // (once there is a shard map: `map_complete`).
  void CheckTimers(Clock::time_point now, bool map_complete, const Servers& to, Effects* out);
  // A rollback: every snapshot under way fails with `why`, and is forgotten.
  void AbortAll(const Status& why, Effects* out);

  // Where snapshots may cut now (for the work pools' positions).
  CutClocks Cuts() const;

  // The restore point: the snapshot directory the job started from ("":
  // none) and its clock, the base of the job's snapshot labels.
  void SetRestorePoint(std::string dir, int64_t clock_base);
  const std::string& restore_dir() const { return restore_dir_; }
  int64_t clock_base() const { return clock_base_; }
  // The directory of the snapshot cut at the job's clock `clock`.
  std::string DirOf(int64_t clock) const;

  // A snapshot's manifest was written: counted as the latest (logged);
  // complete snapshots past the newest `keep` are removed, and so are
  // incomplete ones older than it that no snapshot under way writes (a
  // failed cut a late server still wrote into).
  void Completed(int64_t label, const std::string& dir, double ms);
  // The snapshot cut at the job's clock `clock` failed: what its servers
  // wrote is removed (never a complete snapshot's).
  void Failed(int64_t clock);
  // A snapshot every server wrote whose manifest must wait (the restarted
  // coordinator's shard map is not complete yet); taken back, in order,
  // once it is.
  void Defer(Ended e) { deferred_.push_back(std::move(e)); }
  std::vector<Ended> TakeDeferred() { return std::exchange(deferred_, {}); }
  const History& history() const { return history_; }
  // A resumed job's history (its duration not saved).
  void RestoreHistory(const History& h) { history_ = h; }

 private:
  // One snapshot under way.
  struct SnapOp {
    int64_t clock = -1;           // -1 while still choosing it
    bool on_demand = false;
    int phase = 0;                // 0 query clocks, 1 scheduling, 2 writing, 3 cancelled: query again
    int64_t margin = 0;           // first at the furthest server's clock (idle workers reach no later one)
    int tries = 0;
    std::map<uint64_t, uint32_t> asked;  // request id -> server rank
    int64_t max_clock = 0;
    bool missed = false;
    std::set<uint32_t> reported;
    std::vector<snapshot::PartEntry> parts;
    std::vector<snapshot::FileEntry> files;
    std::vector<Waiter> waiters;  // SnapshotNow requests
    Clock::time_point started;
    Clock::time_point deadline;
    bool done = false;
    bool final = false;
  };

  void AskServers(SnapOp& op, wire::MsgType type, int64_t clock, const Servers& to, Effects* out);
  // The op ended (done), handing its waiters and reports to `out`.
  void Finish(SnapOp& op, const Status& s, Effects* out);
  // Every server answered the op's last requests: its next step.
  void Advance(SnapOp& op, const Servers& to, Effects* out);
  // A cut at the servers' own clock (margin 0) that is already taken: the
  // periodic one under way there takes the op's waiters; with live workers
  // (their clocks are where the model changes) the complete snapshot there
  // answers the op. False: neither.
  bool AlreadyTaken(SnapOp& op, bool workers_live, Effects* out);
  void DropDone();

  // Run()'s thread owns all of these.
  Options opts_;
  std::vector<SnapOp> ops_;  // done ones stay until DropDone (their late replies are theirs)
  Clock::time_point next_timed_;
  std::string restore_dir_;
  int64_t clock_base_ = 0;  // a restored job's snapshots continue the restored clock
  History history_;
  std::vector<Ended> deferred_;
  std::set<int64_t> cancelled_;  // cut clocks offered and cancelled (the newest 64)
};

// The snapshot a restore starts from (--restore): the newest good one in
// `root`, or the one at `clock` (>= 0), and the job's tables: the
// snapshot's, then those of `job_tables` it lacks (ids after its own); a
// table of both must have the same shape. The job takes the snapshot's
// partitions (logged when not `partitions`), at least `num_servers` of
// them. Refused snapshots are logged.
struct RestoreChoice {
  std::string dir;
  snapshot::Manifest manifest;
  std::vector<TableSpec> tables;
};
Status ChooseRestore(const std::string& root, int64_t clock, uint32_t num_servers, uint32_t partitions,
                     const std::vector<TableSpec>& job_tables, RestoreChoice* out);

}  // namespace shardps
