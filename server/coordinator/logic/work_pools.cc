#include "server/coordinator/logic/work_pools.h"

#include <algorithm>
#include <climits>
#include <string>
#include <tuple>

#include "common/base/log.h"

namespace shardps {

uint64_t WorkPool::handed() const {
  uint64_t back = 0;
  for (const auto& [b, e] : returned) back += e - b;
  return next > back ? next - back : 0;
}

uint64_t WorkPool::FirstUndone() const {
  uint64_t pos = next;
  for (const auto& [rank, g] : last) pos = std::min(pos, g.first);
  for (const auto& r : returned) pos = std::min(pos, r.first);
  return pos;
}

std::pair<uint64_t, uint64_t> WorkPool::TakeReturned(uint64_t max) {
  if (returned.empty()) return {0, 0};
  auto& r = returned.front();
  const std::pair<uint64_t, uint64_t> g{r.first, std::min<uint64_t>(r.second, r.first + max)};
  r.first = g.second;
  if (r.first >= r.second) returned.pop_front();
  return g;
}

std::pair<uint64_t, uint64_t> WorkPool::Slot(const Block& b, size_t i) {
  const uint64_t begin = std::min<uint64_t>(b.begin + static_cast<uint64_t>(b.per) * i, b.end);
  return {begin, std::min<uint64_t>(begin + b.per, b.end)};
}

Status WorkPools::Claim(const WorkClaim& c, const std::vector<uint32_t>& live, const CutClocks& cuts, Grant* out) {
  if (c.total == 0 || c.max == 0 || c.granule == 0)
    return Status::InvalidArgument("ClaimWork: a pool needs total > 0 units, max > 0 and granule > 0 per "
                                   "claim (got total " + std::to_string(c.total) + ", max " + std::to_string(c.max) +
                                   ", granule " + std::to_string(c.granule) + ")");
  if (c.per_clock && (c.rank < 0 || !c.alive))
    return Status::InvalidArgument("ClaimWork: per-clock claims are for live workers (rank " +
                                   std::to_string(c.said_rank) + ")");
  if (c.per_clock && c.clock < 0)
    return Status::InvalidArgument("ClaimWork: a per-clock claim at a negative clock");
  WorkPool* p = nullptr;
  SHARDPS_RETURN_IF_ERROR(FindOrCreate(c, &p));
  if (c.per_clock)
    ClaimPerClock(c, *p, live, cuts, out);
  else
    ClaimPooled(c, *p, live.size(), cuts, out);
  return Status::OK();
}

Status WorkPools::FindOrCreate(const WorkClaim& c, WorkPool** out) {
  auto it = d_.pools.find(c.pool);
  if (it != d_.pools.end()) {
    if (it->second.total != c.total)
      return Status::Conflict("ClaimWork: pool " + std::to_string(c.pool) + " has " +
                              std::to_string(it->second.total) + " units, this claim says " + std::to_string(c.total));
    *out = &it->second;
    return Status::OK();
  }
  constexpr size_t kMaxPools = 4096;
  if (d_.pools.size() >= kMaxPools) {
    // Forget the oldest finished pool; a job that keeps more open is refused.
    auto done = std::find_if(d_.pools.begin(), d_.pools.end(),
                             [](const auto& p) { return p.second.used_up() && p.second.blocks.empty(); });
    if (done == d_.pools.end())
      return Status::InvalidArgument("ClaimWork: more than " + std::to_string(kMaxPools) + " unfinished work pools");
    d_.pools.erase(done);
  }
  WorkPool fresh;
  fresh.total = c.total;
  fresh.per_clock = c.per_clock;
  if (c.pool < d_.resume.pool)  // a restored job: trained before the snapshot
    fresh.next = fresh.total;
  else if (c.pool == d_.resume.pool)
    fresh.next = std::min(d_.resume.position, fresh.total);
  *out = &d_.pools.emplace(c.pool, std::move(fresh)).first->second;
  return Status::OK();
}

void WorkPools::ClaimPooled(const WorkClaim& c, WorkPool& p, size_t live, const CutClocks& cuts, Grant* out) {
  // Every unit before the first one not known to be done was trained at a
  // clock before this claim's (a worker claims again once its grant is
  // trained): where a cut at this clock, or a later one, resumes at least.
  if (c.rank >= 0 && cuts.enabled && c.clock >= 0) RecordWorkAt(c.clock, {c.pool, p.FirstUndone()}, cuts);
  if (c.rank >= 0 && c.seq != 0) {
    auto last = d_.last_claims.find(static_cast<uint32_t>(c.rank));
    if (last != d_.last_claims.end() && last->second.seq == c.seq && last->second.pool == c.pool) {
      const LastClaim& lc = last->second;  // sent again: the same answer
      *out = {lc.pool, lc.begin, lc.end, lc.begin < lc.end ? Grant::kGranted : Grant::kFinished, p.handed()};
      return;
    }
  }
  uint64_t begin, end;
  if (!p.returned.empty()) {
    std::tie(begin, end) = p.TakeReturned(c.max);  // a dead worker's last grant first, at most `max` of it
  } else {
    const uint64_t left = p.total - p.next;
    const uint64_t workers = std::max<uint64_t>(1, live);
    const uint64_t g = c.granule;
    const uint64_t share = std::max<uint64_t>(1, (left / (2 * workers) + g - 1) / g) * g;
    begin = p.next;
    end = p.next + std::min<uint64_t>({left, c.max, share});
    p.next = end;
  }
  if (c.rank >= 0) {
    const auto rank = static_cast<uint32_t>(c.rank);
    if (begin < end)
      p.last[rank] = {begin, end};
    else
      p.last.erase(rank);
    if (c.seq != 0) d_.last_claims[rank] = {c.seq, c.pool, begin, end};
  }
  *out = {c.pool, begin, end, begin < end ? Grant::kGranted : Grant::kFinished, p.handed()};
}

void WorkPools::ClaimPerClock(const WorkClaim& c, WorkPool& p, const std::vector<uint32_t>& live,
                              const CutClocks& cuts, Grant* out) {
  const auto rank = static_cast<uint32_t>(c.rank);
  const int64_t clock = c.clock;
  auto& mine = d_.clock_grants[rank];
  // The worker waited for every server to answer its tick of clock - 2
  // before it ticked clock - 1: grants up to clock - 2 were counted.
  while (!mine.empty() && mine.front().clock + 2 <= clock) mine.pop_front();
  for (const auto& g : mine)
    if (g.clock == clock) {
      *out = {g.pool, g.begin, g.end, Grant::kGranted, 0};
      return;
    }
  auto grant = [&](uint64_t pool, uint64_t begin, uint64_t end) {
    mine.push_back({pool, clock, begin, end});
    *out = {pool, begin, end, Grant::kGranted, 0};
  };
  // Blocks of clocks before clock - 4, of this pool and earlier ones, are
  // done with: a slot nobody took there goes back.
  for (auto& [id, q] : d_.pools) {
    if (id > c.pool) break;
    if (!q.blocks.empty()) ReturnSlots(q, clock - 4, -1);
  }
  for (auto& [id, q] : d_.pools) {
    if (id > c.pool) break;
    if (q.returned.empty()) continue;
    const auto [begin, end] = q.TakeReturned(c.max);
    // Served with these: its slot in this clock's block (if cut with it)
    // goes back for another worker.
    if (auto b = p.blocks.find(clock); b != p.blocks.end())
      for (size_t i = 0; i < b->second.ranks.size(); ++i)
        if (b->second.ranks[i] == rank && !b->second.taken[i]) {
          b->second.taken[i] = 1;
          const auto slot = WorkPool::Slot(b->second, i);
          if (slot.first < slot.second) p.returned.push_back(slot);
        }
    return grant(id, begin, end);
  }
  auto b = p.blocks.find(clock);
  if (b == p.blocks.end() && p.next < p.total) b = p.blocks.emplace(clock, CutBlock(c, p, live, cuts)).first;
  if (b != p.blocks.end()) {
    WorkPool::Block& blk = b->second;
    const auto at = std::find(blk.ranks.begin(), blk.ranks.end(), rank);
    const size_t i = static_cast<size_t>(at - blk.ranks.begin());
    if (at != blk.ranks.end() && !blk.taken[i]) {
      const auto [begin, end] = WorkPool::Slot(blk, i);
      blk.taken[i] = 1;
      if (begin < end) return grant(c.pool, begin, end);
    } else if (p.next < p.total) {  // joined after the cut (or its slot went back when it died)
      const uint64_t begin = p.next, end = std::min<uint64_t>(p.total, p.next + c.max);
      p.next = end;
      if (p.next >= p.total) p.last_clock = std::max(p.last_clock, clock);
      return grant(c.pool, begin, end);
    }
  }
  // Not finished while a block holds a slot that comes out only by waiting
  // (this worker's own, or one its worker went past): a worker told to
  // wait ticks on until the block is dropped (at its clock + 4) and the
  // slot goes back. A slot whose worker is still to reach its clock is
  // left to it.
  const bool finished = p.last_clock < clock && p.next >= p.total && !SlotsWaitedFor(p, rank);
  *out = {c.pool, 0, 0, finished ? Grant::kFinished : Grant::kWaitNextClock, p.handed()};
}

WorkPool::Block WorkPools::CutBlock(const WorkClaim& c, WorkPool& p, const std::vector<uint32_t>& live,
                                    const CutClocks& cuts) {
  const int64_t clock = c.clock;
  WorkPool::Block blk;
  // Every live worker but those already served at this clock (a dead
  // worker's units) or past it: a worker granted units at a later clock
  // never claims at this one again (its slot would wait for the block to
  // be dropped, and be lost if the pool were finished first).
  for (uint32_t r : live)
    if (!GrantedAfter(r, clock - 1)) blk.ranks.push_back(r);
  blk.taken.assign(blk.ranks.size(), 0);
  blk.per = c.max;
  blk.begin = p.next;
  blk.end = std::min<uint64_t>(p.total, p.next + static_cast<uint64_t>(c.max) * blk.ranks.size());
  // Every clock's (not only those a cut is known at: an on-demand cut may
  // be chosen at a clock already under way).
  if (cuts.enabled) RecordWorkAt(clock, {c.pool, blk.begin}, cuts);
  p.next = blk.end;
  if (p.next >= p.total) p.last_clock = clock;
  return blk;
}

bool WorkPools::SlotsWaitedFor(const WorkPool& p, uint32_t rank) const {
  for (const auto& [at, b] : p.blocks)
    for (size_t i = 0; i < b.ranks.size(); ++i) {
      const auto slot = WorkPool::Slot(b, i);
      if (b.taken[i] || slot.first >= slot.second) continue;
      if (b.ranks[i] == rank || GrantedAfter(b.ranks[i], at)) return true;
    }
  return false;
}

bool WorkPools::GrantedAfter(uint32_t rank, int64_t clock) const {
  const auto held = d_.clock_grants.find(rank);
  return held != d_.clock_grants.end() &&
         std::any_of(held->second.begin(), held->second.end(), [&](const ClockGrant& g) { return g.clock > clock; });
}

void WorkPools::RecordWorkAt(int64_t clock, WorkPosition at, const CutClocks& cuts) {
  auto& w = d_.work_at;
  w[clock] = at;
  // The newest 64 records stay, and of the older ones those a cut may
  // still ask for (a big model's cut is written over many clocks): around
  // each periodic cut clock and each chosen one C, the record at or last
  // before C and the first after it. At most 1024 in all.
  constexpr size_t kRecent = 64, kMax = 1024;
  if (w.size() <= kRecent) return;
  auto cut_in = [&](int64_t k, int64_t k2) {  // a cut clock in [k, k2)
    if (cuts.every > 0 && (k2 - 1) / cuts.every * cuts.every >= k) return true;
    for (int64_t c : cuts.chosen)
      if (c >= k && c < k2) return true;
    return false;
  };
  const auto old_end = std::prev(w.end(), kRecent);
  bool keep_next = false;
  for (auto it = w.begin(); it != old_end;) {
    const bool around = cut_in(it->first, std::next(it)->first);
    const bool keep = around || keep_next;
    keep_next = around;
    it = keep ? std::next(it) : w.erase(it);
  }
  while (w.size() > kMax) w.erase(w.begin());
}

void WorkPools::ReturnSlots(WorkPool& p, int64_t before_clock, int rank) {
  for (auto it = p.blocks.begin(); it != p.blocks.end();) {
    WorkPool::Block& blk = it->second;
    const bool drop = it->first < before_clock;
    for (size_t i = 0; i < blk.ranks.size(); ++i) {
      if (blk.taken[i] || !(drop || static_cast<int>(blk.ranks[i]) == rank)) continue;
      const auto slot = WorkPool::Slot(blk, i);
      blk.taken[i] = 1;
      if (slot.first < slot.second) p.returned.push_back(slot);
    }
    it = drop ? p.blocks.erase(it) : std::next(it);
  }
}

void WorkPools::ForgetWorkOf(uint32_t rank, bool dead, int64_t counted) {
  for (auto& [id, pool] : d_.pools) {
    if (dead) ReturnSlots(pool, INT64_MIN, static_cast<int>(rank));
    auto it = pool.last.find(rank);
    if (it == pool.last.end()) continue;
    if (dead) {
      LOG_INFO << "work pool " << id << ": units [" << it->second.first << ", " << it->second.second
               << ") of dead worker " << rank << " go to the others";
      pool.returned.push_back(it->second);
    }
    pool.last.erase(it);
  }
  d_.last_claims.erase(rank);  // a new process for this rank numbers its claims from 1
  auto cg = d_.clock_grants.find(rank);
  if (cg == d_.clock_grants.end()) return;
  if (dead) {
    // `counted`: the clock the servers last counted for it (their
    // heartbeats are fresher than its silence): its grants of that clock
    // and later were dropped with its pushes, and go to the others.
    for (const auto& g : cg->second) {
      if (g.clock < counted) continue;
      auto p = d_.pools.find(g.pool);
      if (p == d_.pools.end()) continue;
      LOG_INFO << "work pool " << g.pool << ": units [" << g.begin << ", " << g.end << ") of dead worker " << rank
               << " (clock " << g.clock << ", not counted) go to the others";
      p->second.returned.emplace_back(g.begin, g.end);
    }
  }
  d_.clock_grants.erase(cg);
}

void WorkPools::Clear() {
  d_.pools.clear();
  d_.clock_grants.clear();
  d_.work_at.clear();
  d_.last_claims.clear();
}

bool WorkPools::PositionAt(int64_t clock, WorkPosition* out, bool* recorded) const {
  const auto after = d_.work_at.upper_bound(clock);
  if (auto w = after; w != d_.work_at.begin()) {
    --w;  // the last record at or before the cut
    const auto p = d_.pools.find(w->second.pool);
    *recorded = true;
    if (w->first == clock || (p != d_.pools.end() && !p->second.per_clock)) {
      *out = w->second;
      return true;
    }
    if (p != d_.pools.end()) {
      // Per-clock, no block at the cut's clock: every block before it was
      // trained before the cut. The first block after it begins where the
      // work stood then; with none, the pool stands where it is now (the
      // workers are idle), or, used up, the next one starts.
      if (after != d_.work_at.end())
        *out = after->second;
      else if (p->second.used_up())
        *out = {p->first + 1, 0};
      else
        *out = {p->first, p->second.FirstUndone()};
      return true;
    }
  }
  *recorded = false;
  if (d_.pools.empty()) return false;
  *out = {d_.pools.rbegin()->first + 1, 0};  // every pool used up: the next one, from its start
  for (const auto& [id, p] : d_.pools) {
    if (p.used_up() && p.last.empty()) continue;
    *out = {id, p.FirstUndone()};
    break;
  }
  return true;
}

}  // namespace shardps
