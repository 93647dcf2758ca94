// The job's shared work pools (ClaimWork; docs/worker.md): every unit of a
// pool is handed to one worker, per clock (sync trainers: one batch per
// worker and clock, cut in rank order) or pooled (bounded staleness and
// async: a few batches at a time); a dead worker's unfinished grant goes to
// the next claimer; where the pools stood at the clocks a snapshot may cut
// at is recorded for its manifest (where a restored job resumes).
//
// Decisions only: the coordinator decodes a claim, asks Claim() and sends
// the grant; it reads no clock and owns no socket.
//
// Thread: not thread-safe; the coordinator's Run() thread owns its
// WorkPools.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <utility>
#include <vector>

#include "shardps/status.h"

namespace shardps {

// One pool. Units [next, total) were never handed out; `returned` holds
// the last grants of workers that died (a worker claims again only when it
// finished its grant, so only the last one can be unfinished), handed out
// again first.
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
  bool per_clock = false;   // claimed per clock (else pooled), as its first claim said

  bool used_up() const { return next >= total && returned.empty(); }
  uint64_t handed() const;  // units handed out and not handed back
  // The first unit not known to be done: before it, every unit was handed
  // out and no grant of it is outstanding or handed back.
  uint64_t FirstUndone() const;
  // Up to `max` units handed back by a dead worker (empty: none).
  std::pair<uint64_t, uint64_t> TakeReturned(uint64_t max);
  // Slot `i` of block `b`: its `per` units, cut short at the block's end.
  static std::pair<uint64_t, uint64_t> Slot(const Block& b, size_t i);
};

// A per-clock grant whose gradient is not known to be applied yet.
struct ClockGrant {
  uint64_t pool;
  int64_t clock;
  uint64_t begin, end;
};

// A worker's last pooled (not per-clock) claim, by its sequence number: a
// claim sent again (the coordinator restarted before answering) gets the
// same grant.
struct LastClaim {
  uint64_t seq = 0, pool = 0, begin = 0, end = 0;
};

// Where a pool stood: pool id and a unit position in it.
struct WorkPosition {
  uint64_t pool = 0, position = 0;
};

// Everything WorkPools holds (what the coordinator's durable state saves).
struct WorkPoolsData {
  std::map<uint64_t, WorkPool> pools;                        // by pool id
  std::map<uint32_t, std::deque<ClockGrant>> clock_grants;   // worker rank -> its recent per-clock grants
  // Where the pools stood (a job taking snapshots): clock -> (pool,
  // position). Per-clock pools record each clock's block: the units handed
  // out before that clock. Pooled claims record, at each claim's clock,
  // the first unit not known to be done then: every unit before it was
  // trained at an earlier clock. The newest 64, and of older ones those a
  // cut may ask for (RecordWorkAt); at most 1024.
  std::map<int64_t, WorkPosition> work_at;
  std::map<uint32_t, LastClaim> last_claims;  // worker rank -> its last pooled claim
  // A restored job resumes there: pools before `resume.pool` are finished,
  // that one starts at `resume.position`.
  WorkPosition resume;
};

// The clocks a snapshot may cut at (SnapshotScheduler::Cuts()): where the
// pools stand is recorded only in a job that takes snapshots.
struct CutClocks {
  bool enabled = false;         // the job takes snapshots
  uint32_t every = 0;           // every `every` clocks (0: not by clock)
  std::vector<int64_t> chosen;  // the cut clocks of snapshots under way (-1: not chosen yet)
};

// A decoded ClaimWork.
struct WorkClaim {
  int rank = -1;        // the claiming worker's rank; -1: not a worker (its header's role and rank)
  int said_rank = -1;   // the rank its header gives (for messages)
  bool alive = false;   // the claiming worker is alive
  int64_t clock = 0;    // the worker's clock
  uint64_t seq = 0;     // pooled claims: the worker's claim number (0: none)
  uint64_t pool = 0;
  uint64_t total = 0;   // units in the pool
  uint32_t max = 0;     // at most this many units
  uint32_t granule = 0; // pooled: grants are whole granules (but the last)
  bool per_clock = false;
};

// The answer to a claim. The states are wire::GrantState's numbers.
struct Grant {
  enum State : uint8_t { kGranted = 0, kWaitNextClock = 1, kFinished = 2 };
  uint64_t pool = 0, begin = 0, end = 0;
  State state = kGranted;
  uint64_t handed = 0;  // the pool's units handed out and not handed back (0 in a per-clock grant)
};

class WorkPools {
 public:
  // Answers claim `c` (`live`: the live workers, ascending; `cuts`: where
  // snapshots may cut). OK: `*out` is the grant (or Finished, or
  // WaitNextClock); else the error to refuse the claim with (no units, a
  // per-clock claim of a worker not alive or at a negative clock, a pool
  // of another size, too many unfinished pools).
  //
  // Pooled claims hand out consecutive units, each unit once; near the end
  // the grants shrink (at most a 1/(2 x live workers) share of what is
  // left, in whole granules), so the last units spread over every worker.
  // Per-clock claims: one grant per worker and clock (a clock's gradients
  // are averaged into one step); clock c's units are cut as one block at
  // the first claim for c and handed out in rank order, `max` each, over
  // the workers live then; a worker that joined after the cut takes fresh
  // units; units a dead worker never saw counted come first, from this pool
  // or an earlier one; a claim repeated at the same clock gets the same
  // grant.
  Status Claim(const WorkClaim& c, const std::vector<uint32_t>& live, const CutClocks& cuts, Grant* out);
  // A worker died (dead = true): its last pooled grant of every pool and
  // its slots in cut blocks go back, and its per-clock grants of clocks the
  // servers never counted (clock >= `counted`, the lowest clock the servers
  // last counted for it) go back too. Or it left (dead = false): its grants
  // are done. Either way its resent-claim record is forgotten.
  void ForgetWorkOf(uint32_t rank, bool dead, int64_t counted);
  // A new process took `rank`: it numbers its claims from 1.
  void ForgetClaim(uint32_t rank) { d_.last_claims.erase(rank); }
  // A restored job (or a rollback) resumes at `at`.
  void SetResume(WorkPosition at) { d_.resume = at; }
  // A rollback: every pool, grant, position and claim record forgotten
  // (the resume point kept).
  void Clear();
  // Where a snapshot cut at `clock` restarts the work (*recorded = true):
  // the position recorded at that clock; for a pooled pool, also the last
  // one recorded before it (its units were all trained before the cut;
  // some trained between the two are trained again after a restore, none
  // is skipped); for a per-clock pool with no block at that clock (the
  // workers were idle, or the pool used up), the first block after it, or
  // with none, the pool now (used up: the next one from its start). With
  // no record at or before it (*recorded = false), with pools, the first
  // pool not used up from its first unit not known to be done now (or,
  // every pool used up, the next pool from its start). False: no pools.
  bool PositionAt(int64_t clock, WorkPosition* out, bool* recorded) const;

  size_t size() const { return d_.pools.size(); }
  const WorkPoolsData& data() const { return d_; }
  void Restore(WorkPoolsData d) { d_ = std::move(d); }

 private:
  // The claim's pool, created at its first claim (a restored job's pools
  // before the resume point start used up).
  Status FindOrCreate(const WorkClaim& c, WorkPool** out);
  void ClaimPooled(const WorkClaim& c, WorkPool& p, size_t live, const CutClocks& cuts, Grant* out);
  void ClaimPerClock(const WorkClaim& c, WorkPool& p, const std::vector<uint32_t>& live, const CutClocks& cuts,
                     Grant* out);
  // Cuts clock `clock`'s block of pool `p` over the live workers not yet
  // served at that clock.
  WorkPool::Block CutBlock(const WorkClaim& c, WorkPool& p, const std::vector<uint32_t>& live, const CutClocks& cuts);
  // Blocks of clocks before `before_clock` are dropped: every slot never
  // claimed in them goes back, and (with `rank` >= 0) so does every
  // unclaimed slot of that rank in the blocks kept.
  static void ReturnSlots(WorkPool& p, int64_t before_clock, int rank);
  // A block of `p` holds an untaken slot that only a wait can hand out:
  // `rank`'s own (taken at its clock, or back once the block is dropped),
  // or one of a worker granted units at a later clock (it never claims at
  // that clock again: back once the block is dropped).
  bool SlotsWaitedFor(const WorkPool& p, uint32_t rank) const;
  // `rank` holds a recent per-clock grant of a clock after `clock`.
  bool GrantedAfter(uint32_t rank, int64_t clock) const;
  void RecordWorkAt(int64_t clock, WorkPosition at, const CutClocks& cuts);

  // Run()'s thread owns it.
  WorkPoolsData d_;
};

}  // namespace shardps
