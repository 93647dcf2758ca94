#include "server/consistency/worker_clocks.h"

#include <algorithm>
#include <limits>
#include <string>

#include "common/base/log.h"
#include "server/consistency/byte_codec.h"

namespace shardps {

uint64_t FramesBytes(const std::vector<zmq::message_t>& frames) {
  uint64_t b = 0;
  for (const auto& f : frames) b += f.size();
  return b;
}

WorkerClocks::Changes WorkerClocks::SetMembership(uint32_t worker_ranks, const std::vector<uint32_t>& live,
                                                  const std::vector<uint32_t>& retiring,
                                                  const std::vector<WorkerFinal>& retired) {
  Changes changes;
  if (clocks_.size() < worker_ranks) {
    clocks_.resize(worker_ranks, 0);
    live_.resize(worker_ranks, 0);
    joining_.resize(worker_ranks, 0);
    retiring_.resize(worker_ranks, 0);
    last_trained_.resize(worker_ranks, 0);
    last_seq_.resize(worker_ranks, 0);
  }
  std::vector<uint8_t> now_live(clocks_.size(), 0);
  for (uint32_t r : live)
    if (r < now_live.size()) now_live[r] = 1;
  // A retiring worker gone with its last clock decided: the ticks other
  // servers took and this one did not, taken here too.
  for (const WorkerFinal& f : retired) {
    const uint32_t r = f.rank;
    if (r >= clocks_.size() || !retiring_[r] || joining_[r] || now_live[r]) continue;  // nothing to settle here
    if (f.clock > clocks_[r] + kMaxRetireGap) {
      // No trainer gets that far ahead of itself (its pulls wait for its
      // own ticks everywhere): not taken, it is dropped as gone.
      LOG_ERROR << "worker " << r << "'s last clock " << f.clock << " is decided past its clock here ("
                << clocks_[r] << ") by more than " << kMaxRetireGap << ": not taken; it is dropped as gone";
    } else if (f.clock > clocks_[r]) {
      LOG_WARN << "worker " << r << " died between its ticks: its ticks of clocks " << clocks_[r] << ".." << f.clock - 1
               << " reached other servers, so they count here too";
      for (int64_t c = clocks_[r]; c < f.clock; ++c)
        if (sync() && f.trained && c >= applied_clock_) ++trained_[c];
      clocks_[r] = f.clock;
      last_trained_[r] = f.trained;
    }
  }
  for (size_t r = 0; r < live_.size(); ++r) {
    if (live_[r] && !now_live[r]) {
      // Gone: its pushes for clocks it never finished do not count.
      size_t dropped = 0;
      for (auto& [clock, list] : buffered_) {
        if (clock < clocks_[r]) continue;
        auto it = std::remove_if(list.begin(), list.end(), [&](const HeldPush& b) { return b.rank == r; });
        dropped += static_cast<size_t>(list.end() - it);
        list.erase(it, list.end());
      }
      changes.left.push_back({static_cast<uint32_t>(r), clocks_[r], dropped});
      joining_[r] = 0;
    } else if (!live_[r] && now_live[r] && membership_known_) {
      // A worker (re)joining the running job: a new process, whose push
      // sequence starts again, at a clock it learns with Join.
      joining_[r] = 1;
      last_seq_[r] = 0;
      changes.joining.push_back(static_cast<uint32_t>(r));
    }
  }
  std::vector<uint8_t> now_retiring(clocks_.size(), 0);
  for (uint32_t r : retiring)
    if (r < now_retiring.size() && now_live[r]) now_retiring[r] = 1;
  for (size_t r = 0; r < retiring_.size(); ++r)
    if (now_retiring[r] && !retiring_[r])
      LOG_INFO << "worker " << r << " was declared dead: its requests are refused; at clock " << clocks_[r]
               << " here until its last clock is decided";
  retiring_ = std::move(now_retiring);
  live_ = std::move(now_live);
  membership_known_ = true;
  return changes;
}

bool WorkerClocks::any_live() const {
  return std::any_of(live_.begin(), live_.end(), [](uint8_t l) { return l != 0; });
}

int64_t WorkerClocks::MinClock() const {
  int64_t m = std::numeric_limits<int64_t>::max(), all = 0;
  for (size_t r = 0; r < clocks_.size(); ++r) {
    all = std::max(all, clocks_[r]);
    if (live_[r] && !joining_[r]) m = std::min(m, clocks_[r]);
  }
  return m == std::numeric_limits<int64_t>::max() ? all : m;
}

int64_t WorkerClocks::MaxClock() const {
  int64_t m = -1, all = 0;
  for (size_t r = 0; r < clocks_.size(); ++r) {
    all = std::max(all, clocks_[r]);
    if (live_[r] && !joining_[r]) m = std::max(m, clocks_[r]);
  }
  return m < 0 ? all : m;
}

Status WorkerClocks::Tick(bool worker, int rank, int64_t clock, bool idle) {
  if (!worker || rank < 0 || static_cast<size_t>(rank) >= clocks_.size())
    return Status::InvalidArgument("tick from a non-worker or an unknown rank " + std::to_string(rank));
  if (!IsLive(rank)) return Status::Unavailable("worker " + std::to_string(rank) + " is not live in this job");
  if (clock > clocks_[rank])
    return Status::InvalidArgument("tick for clock " + std::to_string(clock) + " but worker " + std::to_string(rank) +
                                   " is at clock " + std::to_string(clocks_[rank]) + ": a tick was lost");
  if (clock == clocks_[rank]) {
    clocks_[rank]++;
    last_trained_[rank] = !idle;
    if (sync() && !idle && clock >= applied_clock_) ++trained_[clock];
  }
  return Status::OK();
}

Status WorkerClocks::Join(bool worker, int rank, int64_t clock, int64_t* at) {
  if (!worker || rank < 0 || static_cast<size_t>(rank) >= clocks_.size())
    return Status::InvalidArgument("join from a non-worker or an unknown rank " + std::to_string(rank));
  if (!IsLive(rank))
    return Status::Unavailable("worker " + std::to_string(rank) + " is not live in this job (yet)");
  if (joining_[rank]) {
    // It starts with the fastest live worker (under sync: at least the
    // clock being applied), so nobody waits for it to catch up, and it
    // waits for the others as the model says.
    int64_t start = MaxClock();  // (it is still joining: not counted)
    joining_[rank] = 0;
    if (sync()) start = std::max(start, applied_clock_);
    clocks_[rank] = start;
    LOG_INFO << "worker " << rank << " joined at clock " << start;
  }
  if (clock > clocks_[rank]) {
    // Another server started it later: moved up before it pushed anything.
    for (const auto& [c, list] : buffered_)
      for (const auto& b : list)
        if (b.rank == static_cast<uint32_t>(rank))
          return Status::InvalidArgument("join at clock " + std::to_string(clock) + ": worker " +
                                         std::to_string(rank) + " already pushed for clock " + std::to_string(c));
    clocks_[rank] = clock;
  }
  *at = clocks_[rank];
  return Status::OK();
}

Status WorkerClocks::CheckHold(int rank, int64_t clock, uint32_t steps, uint64_t bytes) const {
  if (steps > 1)
    return Status::InvalidArgument("a push of " + std::to_string(steps) +
                                   " steps under sync: a synchronous clock is one step of the "
                                   "workers' averaged gradients (several steps per push are for "
                                   "bounded staleness and async)");
  if (clock < 0 || clock > clocks_[rank] + 2)
    return Status::InvalidArgument("push for clock " + std::to_string(clock) + " but worker " + std::to_string(rank) +
                                   " is at clock " + std::to_string(clocks_[rank]));
  if (clock > applied_clock_ && ahead_bytes_ + bytes > held_limit_)
    return Status::TooLarge("synchronous pushes held for clocks after " + std::to_string(applied_clock_) +
                            " would pass " + std::to_string(held_limit_) + " bytes (the held-bytes limit)");
  if (clock < applied_clock_)
    return Status::StaleClock("push for clock " + std::to_string(clock) + " arrived after that clock was applied (now " +
                              std::to_string(applied_clock_) + ")");
  return Status::OK();
}

void WorkerClocks::Hold(uint32_t rank, int64_t clock, uint32_t table, std::vector<zmq::message_t>&& frames,
                        uint64_t bytes) {
  if (clock > applied_clock_) ahead_bytes_ += bytes;
  buffered_[clock].push_back({rank, arrivals_++, table, std::move(frames)});
}

size_t WorkerClocks::held_pushes() const {
  size_t n = 0;
  for (const auto& [c, list] : buffered_) n += list.size();
  return n;
}

void WorkerClocks::RecountAhead() {
  ahead_bytes_ = 0;
  for (auto it = buffered_.upper_bound(applied_clock_); it != buffered_.end(); ++it)
    for (const auto& b : it->second) ahead_bytes_ += FramesBytes(b.frames);
}

int64_t WorkerClocks::CompleteBelow() const {
  if (!any_live()) return buffered_.empty() ? applied_clock_ : std::max(applied_clock_, buffered_.rbegin()->first + 1);
  return MinClock();
}

void WorkerClocks::TakeClock(size_t tables, CompleteClock* out) {
  const int64_t clock = applied_clock_++;
  out->clock = clock;
  out->trained = 0;
  out->pushes.clear();
  out->contributors.clear();
  if (auto tr = trained_.find(clock); tr != trained_.end()) {
    out->trained = tr->second;
    trained_.erase(tr);
  }
  auto it = buffered_.find(clock);
  if (it == buffered_.end()) return;
  out->pushes = std::move(it->second);
  buffered_.erase(it);
  auto& list = out->pushes;
  std::sort(list.begin(), list.end(), [](const HeldPush& a, const HeldPush& b) {
    return a.rank != b.rank ? a.rank < b.rank : a.arrival < b.arrival;
  });
  out->contributors.assign(tables, 0);
  std::vector<int> last_rank(tables, -1);
  for (const auto& b : list)
    if (b.table < tables && last_rank[b.table] != static_cast<int>(b.rank)) {
      last_rank[b.table] = static_cast<int>(b.rank);  // sorted by rank: one count per worker
      ++out->contributors[b.table];
    }
}

Status WorkerClocks::GatePull(int rank, int64_t clock, bool* park, int64_t* need) const {
  if (clock < 0 || clock > clocks_[rank] + 2)
    return Status::InvalidArgument("pull for clock " + std::to_string(clock) + " but worker " + std::to_string(rank) +
                                   " is at clock " + std::to_string(clocks_[rank]));
  *need = clock - static_cast<int64_t>(staleness_);
  *park = MinClock() < *need;
  return Status::OK();
}

Status WorkerClocks::Park(int64_t need, int rank, std::vector<zmq::message_t>&& frames, Clock::time_point arrived) {
  const uint64_t bytes = FramesBytes(frames);
  if (parked_bytes_ + bytes > held_limit_)
    return Status::TooLarge("pulls held for slower workers would pass " + std::to_string(held_limit_) +
                            " bytes (the held-bytes limit)");
  parked_bytes_ += bytes;
  parked_.push_back({need, rank, std::move(frames), arrived, bytes});
  return Status::OK();
}

void WorkerClocks::TakeReleasable(std::deque<Parked>* go) {
  if (parked_.empty()) return;
  const int64_t m = MinClock();
  std::deque<Parked> still;
  for (auto& p : parked_) {
    if (p.need_clock <= m) {
      parked_bytes_ -= p.bytes;
      go->push_back(std::move(p));
    } else {
      still.push_back(std::move(p));
    }
  }
  parked_ = std::move(still);
}

bool WorkerClocks::TakeExpired(Clock::time_point now, Millis max_hold, Parked* out) {
  if (parked_.empty() || now - parked_.front().arrived <= max_hold) return false;
  *out = std::move(parked_.front());
  parked_.pop_front();
  parked_bytes_ -= out->bytes;
  return true;
}

void WorkerClocks::SaveImpl(std::string* out, const std::vector<const Parked*>& parked) const {
  ByteWriter w(out);
  w.Put<uint32_t>(0x57434c4bu);  // "WCLK"
  w.PutArray(clocks_);
  w.PutArray(live_);
  w.PutArray(joining_);
  w.PutArray(retiring_);
  w.PutArray(last_trained_);
  w.PutArray(last_seq_);
  w.Put<uint8_t>(membership_known_);
  w.Put(applied_clock_);
  w.Put(arrivals_);
  w.Put<uint64_t>(buffered_.size());
  for (const auto& [clock, list] : buffered_) {
    w.Put(clock);
    w.Put<uint64_t>(list.size());
    for (const HeldPush& b : list) {
      w.Put(b.rank);
      w.Put(b.arrival);
      w.Put(b.table);
      w.PutFrames(b.frames);
    }
  }
  w.Put<uint64_t>(trained_.size());
  for (const auto& [clock, n] : trained_) {
    w.Put(clock);
    w.Put(n);
  }
  w.Put<uint64_t>(parked.size());
  for (const Parked* p : parked) {
    w.Put(p->need_clock);
    w.Put<int32_t>(p->rank);
    w.PutFrames(p->frames);
  }
}

Status WorkerClocks::Load(std::string_view in) {
  ByteReader r(in, "a group's worker clocks");
  constexpr uint64_t kRanks = 1u << 20, kMany = 1u << 24;
  uint32_t magic = 0;
  if (r.Get(&magic) && magic != 0x57434c4bu) r.Fail("not worker clocks");
  std::vector<int64_t> clocks;
  std::vector<uint8_t> live, joining, retiring, last_trained;
  std::vector<uint64_t> last_seq;
  uint8_t known = 0;
  int64_t applied = 0;
  uint64_t arrivals = 0, n = 0;
  r.GetArray(&clocks, kRanks) && r.GetArray(&live, kRanks) && r.GetArray(&joining, kRanks) &&
      r.GetArray(&retiring, kRanks) && r.GetArray(&last_trained, kRanks) && r.GetArray(&last_seq, kRanks) &&
      r.Get(&known) && r.Get(&applied) && r.Get(&arrivals) && r.Get(&n);
  const size_t ranks = clocks.size();
  // No clock a job reaches is near the ends of int64: one that is, is no state.
  constexpr int64_t kFar = int64_t{1} << 60;
  auto sane = [&](int64_t c) { return c >= -1 && c < kFar; };
  for (int64_t c : clocks)
    if (!sane(c)) r.Fail("worker clock " + std::to_string(c));
  if (!sane(applied)) r.Fail("applied clock " + std::to_string(applied));
  if (live.size() != ranks || joining.size() != ranks || retiring.size() != ranks || last_trained.size() != ranks ||
      last_seq.size() != ranks)
    r.Fail("per-rank arrays of different lengths");
  std::map<int64_t, std::vector<HeldPush>> buffered;
  for (uint64_t i = 0; i < n && i < kMany; ++i) {
    int64_t clock = 0;
    uint64_t count = 0;
    if (!r.Get(&clock) || !r.Get(&count)) break;
    if (!sane(clock)) r.Fail("held pushes for clock " + std::to_string(clock));
    auto& list = buffered[clock];
    for (uint64_t k = 0; k < count && k < kMany; ++k) {
      HeldPush b;
      if (!r.Get(&b.rank) || !r.Get(&b.arrival) || !r.Get(&b.table) || !r.GetFrames(&b.frames)) break;
      if (b.rank >= ranks) r.Fail("a held push of worker " + std::to_string(b.rank));
      list.push_back(std::move(b));
    }
  }
  std::map<int64_t, uint32_t> trained;
  if (r.Get(&n))
    for (uint64_t i = 0; i < n && i < kMany; ++i) {
      int64_t clock = 0;
      uint32_t t = 0;
      if (!r.Get(&clock) || !r.Get(&t)) break;
      if (!sane(clock)) r.Fail("trained workers of clock " + std::to_string(clock));
      trained[clock] = t;
    }
  std::deque<Parked> parked;
  uint64_t parked_bytes = 0;
  if (r.Get(&n))
    for (uint64_t i = 0; i < n && i < kMany; ++i) {
      Parked p;
      int32_t rank = 0;
      if (!r.Get(&p.need_clock) || !r.Get(&rank) || !r.GetFrames(&p.frames)) break;
      if (rank < 0 || static_cast<size_t>(rank) >= ranks) r.Fail("a parked pull of worker " + std::to_string(rank));
      if (!sane(p.need_clock)) r.Fail("a parked pull waiting for clock " + std::to_string(p.need_clock));
      p.rank = rank;
      p.arrived = Clock::now();
      p.bytes = FramesBytes(p.frames);
      parked_bytes += p.bytes;
      parked.push_back(std::move(p));
    }
  if (Status s = r.Finish(); !s.ok()) return s;
  clocks_ = std::move(clocks);
  live_ = std::move(live);
  joining_ = std::move(joining);
  retiring_ = std::move(retiring);
  last_trained_ = std::move(last_trained);
  last_seq_ = std::move(last_seq);
  membership_known_ = known != 0;
  applied_clock_ = applied;
  arrivals_ = arrivals;
  buffered_ = std::move(buffered);
  trained_ = std::move(trained);
  parked_ = std::move(parked);
  parked_bytes_ = parked_bytes;
  RecountAhead();
  return Status::OK();
}

}  // namespace shardps
