// WorkerClocks: the consistency model of one server (docs/consistency.md),
// with no sockets. It is fed decoded events — the live workers changed, a
// worker ticked, joined, sent a synchronous push to hold or a pull that may
// have to wait — and returns decisions: whether a request is refused (and
// the reply's status), which synchronous clocks are complete, which parked
// pulls may go. The server's event loop acts on them (applies the clock's
// pushes to its tables, answers the pulls).
//
// The model, per consistency:
//  - sync (BSP): clock c is complete when every live worker that is not
//    joining ticked c (MinClock() > c); its held pushes are then applied as
//    one averaged step. With no live worker, every clock a push is held for
//    completes. A pull at clock c waits until MinClock() >= c.
//  - bounded staleness s: a pull at clock c waits until MinClock() >= c - s.
//  - async: nothing waits.
// A worker that dies stops being waited for, and its held pushes for clocks
// it never finished are dropped. A worker that (re)joins a running job is
// waited for by nobody until it Joins, when it starts at the fastest live
// worker's clock (under sync: at least the clock being applied).
//
// Messages (the frames of held pushes and parked pulls) are moved in and
// out, never copied.
//
// Thread: the server's event loop owns all of it; no locks.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <zmq.hpp>

#include "common/base/clock.h"
#include "common/cluster/cluster.h"
#include "shardps/status.h"
#include "shardps/types.h"

namespace shardps {

// Bytes of a message's frames (what a held request costs).
uint64_t FramesBytes(const std::vector<zmq::message_t>& frames);

class WorkerClocks {
 public:
  struct HeldPush {  // a synchronous push waiting for the end of its clock
    uint32_t rank;
    uint64_t arrival;
    uint32_t table;
    std::vector<zmq::message_t> frames;
  };
  struct Parked {  // a pull waiting for slower workers
    int64_t need_clock;
    int rank;
    std::vector<zmq::message_t> frames;
    Clock::time_point arrived;
    uint64_t bytes;
  };
  // A synchronous clock every live worker finished, taken out to be applied.
  struct CompleteClock {
    int64_t clock = 0;
    std::vector<HeldPush> pushes;       // sorted by worker, then arrival
    uint32_t trained = 0;               // workers whose tick of the clock said they trained a batch
    std::vector<uint32_t> contributors; // by table id: workers with a push to that table
    // The step of `table` is the mean over this many workers: those that
    // trained a batch at this clock (a worker without a batch — the epoch's
    // last clock — ticks idle; a dead worker never ticked, and its pushes
    // were dropped), the same count on every server, also for a sparse
    // table whose keys reach only some. Without such ticks (none counted),
    // the workers that pushed to the table.
    uint32_t Divisor(uint32_t table) const {
      const uint32_t n = trained ? trained : contributors[table];
      return n > 0 ? n : 1;
    }
  };

  // `held_bytes`: the most pulls parked, and sync pushes held for clocks
  // after the one being applied, may take (each).
  explicit WorkerClocks(uint64_t held_bytes) : held_limit_(held_bytes) {}

  // A backup copy holds what its primary held, whatever its own limit
  // (set back to the server's when it becomes the primary).
  void set_held_limit(uint64_t bytes) { held_limit_ = bytes; }
  // The job's model (from every cluster view).
  void SetModel(Consistency consistency, uint32_t staleness) {
    consistency_ = consistency;
    staleness_ = staleness;
  }
  Consistency consistency() const { return consistency_; }
  bool sync() const { return consistency_ == Consistency::kSync; }

  // Membership: ranks [0, worker_ranks) exist, `live` (ascending) are live.
  // A worker gone has its held pushes for clocks it never finished dropped;
  // one live again after the first membership is joining (waited for by
  // nobody until it Joins; its push sequence starts again). Logs both.
  //
  // Sync, a worker declared dead (docs/fault-tolerance.md, "A worker dies
  // between its ticks"): first `retiring` (still live: waited for, but its
  // requests refused from now on, so its clock here is final), then gone
  // with its last clock decided over every server in `retired`: a worker
  // that was retiring here takes the ticks it is missing up to that clock
  // (their pushes are here: a synchronous tick leaves only once every push
  // of its clock was answered) before its unfinished pushes are dropped.
  // Returns who left (their clock here, the pushes dropped) and who joins,
  // for the server to log once over all its groups.
  struct Changes {
    struct Left {
      uint32_t rank;
      int64_t clock;
      size_t dropped;
    };
    std::vector<Left> left;
    std::vector<uint32_t> joining;
  };
  Changes SetMembership(uint32_t worker_ranks, const std::vector<uint32_t>& live,
                        const std::vector<uint32_t>& retiring = {}, const std::vector<WorkerFinal>& retired = {});

  // Live and not retiring: its requests are taken.
  bool IsLive(int rank) const {
    return rank >= 0 && static_cast<size_t>(rank) < live_.size() && live_[rank] && !retiring_[rank];
  }
  bool IsRetiring(int rank) const { return rank >= 0 && static_cast<size_t>(rank) < live_.size() && retiring_[rank]; }
  // Where worker `rank` is here: the clock after its last tick, and whether
  // that tick said it trained a batch (REQUIRES rank < ranks()).
  // A worker that has not joined here yet (a new process) reports clock
  // -1: it never pushed here.
  // The most ticks a retired worker may be missing here: one (a worker
  // ticks clock c + 1 only after its pulls of c + 1, which wait for its
  // tick of c everywhere); a decision further away is not taken.
  static constexpr int64_t kMaxRetireGap = 1;
  WorkerFinal Final(uint32_t rank, uint32_t group) const {
    return {rank, group, joining_[rank] ? -1 : clocks_[rank], last_trained_[rank] != 0};
  }
  bool any_live() const;
  size_t ranks() const { return clocks_.size(); }
  int64_t clock(int rank) const { return clocks_[rank]; }  // REQUIRES rank < ranks()
  const std::vector<int64_t>& clocks() const { return clocks_; }
  // The slowest / fastest live worker's clock, joining workers not counted;
  // with none, the largest clock any worker reached.
  int64_t MinClock() const;
  int64_t MaxClock() const;
  // Sync: the clocks below this one are applied.
  int64_t applied_clock() const { return applied_clock_; }

  // A live worker's push with sequence number `seq` (REQUIRES seq > 0): true
  // when it is a retry of one already taken; else records it.
  bool IsRetry(int rank, uint64_t seq) {
    if (seq <= last_seq_[rank]) return true;
    last_seq_[rank] = seq;
    return false;
  }

  // A tick of `clock` from `rank` (`worker`: sent by a worker; `idle`: it
  // trained no batch at that clock). InvalidArgument / Unavailable when
  // refused; a repeated tick is accepted and changes nothing.
  Status Tick(bool worker, int rank, int64_t clock, bool idle);
  // A worker (re)joining a running job at `clock` (the clock another server
  // started it at, or 0). On OK, *at is its clock now.
  Status Join(bool worker, int rank, int64_t clock, int64_t* at);

  // Sync: may the push of a live worker for `clock`, `steps` gradients and
  // `bytes` in all, be held? InvalidArgument, TooLarge (past the held-bytes
  // limit; pushes for the clock being applied are always taken: BSP holds
  // workers x the model by design) or StaleClock when not.
  Status CheckHold(int rank, int64_t clock, uint32_t steps, uint64_t bytes) const;
  // Holds it (REQUIRES CheckHold OK).
  void Hold(uint32_t rank, int64_t clock, uint32_t table, std::vector<zmq::message_t>&& frames, uint64_t bytes);
  // Synchronous pushes held now, and the bytes of those for clocks after
  // applied_clock() (RecountAhead recounts them from the pushes held).
  size_t held_pushes() const;
  uint64_t ahead_bytes() const { return ahead_bytes_; }
  void RecountAhead();

  // Sync: every clock below this one is complete (and may be applied).
  int64_t CompleteBelow() const;
  // Sync: takes clock applied_clock() out (REQUIRES applied_clock() <
  // CompleteBelow()) and advances applied_clock(). `tables`: how many table
  // ids exist (out->contributors' size).
  void TakeClock(size_t tables, CompleteClock* out);

  // A worker's pull at `clock` (sync and bounded, from a live worker): OK
  // with *park false to serve it now, or true when it must wait until every
  // live worker reached *need. InvalidArgument for a clock the worker cannot
  // be at (its own or the next one's prefetch: one far ahead would wait for ever).
  Status GatePull(int rank, int64_t clock, bool* park, int64_t* need) const;
  // Parks a pull (TooLarge past the held-bytes limit). Pulls are kept in
  // arrival order.
  Status Park(int64_t need, int rank, std::vector<zmq::message_t>&& frames, Clock::time_point arrived);
  // Moves the parked pulls every live worker now caught up with to *go
  // (appended, in arrival order).
  void TakeReleasable(std::deque<Parked>* go);
  // Pops the oldest parked pull if it arrived more than `max_hold` before
  // `now`; false when there is none.
  bool TakeExpired(Clock::time_point now, Millis max_hold, Parked* out);
  const std::deque<Parked>& parked() const { return parked_; }

  // A fill (re-replication): the whole state — clocks, membership, push
  // numbering, held sync pushes, and the parked pulls `keep_parked` keeps —
  // appended to *out; Load replaces this state with one Save wrote
  // (BadMessage, and nothing changed, when it is not one).
  template <typename Keep>
  void Save(std::string* out, Keep&& keep_parked) const {
    std::vector<const Parked*> parked;
    for (const auto& p : parked_)
      if (keep_parked(p)) parked.push_back(&p);
    SaveImpl(out, parked);
  }
  Status Load(std::string_view in);
  uint64_t parked_bytes() const { return parked_bytes_; }

 private:
  void SaveImpl(std::string* out, const std::vector<const Parked*>& parked) const;
  uint64_t held_limit_;
  Consistency consistency_ = Consistency::kAsync;
  uint32_t staleness_ = 0;
  std::vector<int64_t> clocks_;   // per worker rank
  std::vector<uint8_t> live_;     // per worker rank
  // Live again after the first membership (a restarted or new worker) and
  // not yet Joined: its clock is unknown, so it is waited for by nobody.
  std::vector<uint8_t> joining_;  // per worker rank
  std::vector<uint8_t> retiring_;  // per worker rank: declared dead, its last clock not decided yet
  std::vector<uint8_t> last_trained_;  // per worker rank: its last tick said it trained a batch
  bool membership_known_ = false; // a first live set was applied
  std::vector<uint64_t> last_seq_;  // per worker rank: push dedup
  int64_t applied_clock_ = 0;                          // sync: clocks < this are applied
  std::map<int64_t, std::vector<HeldPush>> buffered_;  // sync: by clock
  std::map<int64_t, uint32_t> trained_;  // sync: workers whose tick of a clock said they trained a batch
  uint64_t arrivals_ = 0;
  uint64_t ahead_bytes_ = 0;  // sync pushes held for clocks after applied_clock_
  std::deque<Parked> parked_;
  uint64_t parked_bytes_ = 0;
};

}  // namespace shardps
