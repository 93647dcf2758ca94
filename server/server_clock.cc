// The server's clock handlers: ticks and joins fed to the consistency model
// (WorkerClocks), and acting on its decisions: applying each complete
// synchronous clock to the tables (cutting snapshots between clocks), and
// answering the parked pulls that may go.
#include <deque>

#include "common/codec/wire.h"
#include "server/server.h"

namespace shardps {

void Server::Tick(Shard& sh, const wire::Header& h, std::vector<zmq::message_t>& frames) {
  Status s = sh.clocks.Tick(h.role() == wire::Role::Worker, h.rank(), h.clock(), h.idle());
  if (!s.ok()) return ReplyError(frames[0], h.request_id(), s);
  m_.ticks.SingleWriterInc();
  input_.changed = true;
  wire::Fields ok;
  ok.request_id = h.request_id();
  Reply(frames[0], wire::EncodeSimple(fbb_, ok));
  Advance(sh);
}

void Server::Join(Shard& sh, const wire::Header& h, std::vector<zmq::message_t>& frames) {
  int64_t at = 0;
  Status s = sh.clocks.Join(h.role() == wire::Role::Worker, h.rank(), h.clock(), &at);
  if (!s.ok()) return ReplyError(frames[0], h.request_id(), s);
  wire::Fields ok;
  ok.request_id = h.request_id();
  ok.min_clock = ok.max_clock = at;
  input_.changed = true;
  Reply(frames[0], wire::EncodeSimple(fbb_, ok));
  Advance(sh);
}

void Server::ApplyClock(Shard& sh, WorkerClocks::CompleteClock& c) {
  if (c.pushes.empty()) return;
  std::vector<uint8_t> touched(tables_.size(), 0);
  for (auto& b : c.pushes) {
    const wire::Header* h = nullptr;
    if (!wire::ParseHeader(b.frames[1], header_scratch_, &h).ok()) continue;  // verified on arrival
    ServerTable* t = tables_.get(b.table);
    const float* values = RequestCheck::PushValues(*t, *h, b.frames.back(), &held_scratch_.values);
    if (h->key_count() > 0) {
      const uint64_t* keys = wire::ArrayView<uint64_t>(b.frames[2], held_scratch_.keys);
      t->AccumulateKeys(keys, h->key_count(), values);  // (a tiered table's rows come up first)
      sh.cut.EnsureCopiedKeys(b.table, keys, h->key_count());  // as at the cut: the sum is applied below
    } else {
      sh.cut.EnsureCopiedRange(b.table, h->row_begin(), h->row_end());
      t->AccumulateRange(h->row_begin(), h->row_end(), values);
    }
    touched[b.table] = 1;
  }
  for (uint32_t i = 0; i < touched.size(); ++i)
    if (touched[i]) tables_.get(i)->ApplyAccumulated(1.0f / static_cast<float>(c.Divisor(i)));
}

void Server::Advance(Shard& sh) {
  // Sparse rows updated from now on are stamped with the job's clock as
  // this server knows it (eviction by clocks).
  tables_.SetClock(sh.clocks.sync() ? sh.clocks.applied_clock() : sh.clocks.MinClock());
  if (sh.clocks.sync()) {
    const int64_t target = sh.clocks.CompleteBelow();
    WorkerClocks::CompleteClock complete;
    while (sh.clocks.applied_clock() < target) {
      CutIfDue(sh, sh.clocks.applied_clock());  // the state holds exactly the clocks < applied_clock()
      sh.clocks.TakeClock(tables_.size(), &complete);
      ApplyClock(sh, complete);
    }
    sh.clocks.RecountAhead();
    CutIfDue(sh, sh.clocks.applied_clock());
  }
  MaybeCut(sh);
  // A cold tier that failed may have left a clock half applied: no pull
  // is answered from it (the server stops, docs/embeddings.md).
  if (sh.clocks.parked().empty() || !tables_.ColdTierFailure().ok()) return;
  std::deque<WorkerClocks::Parked> go;
  sh.clocks.TakeReleasable(&go);
  for (auto& p : go) {
    const wire::Header* h = nullptr;
    std::vector<uint64_t> scratch;
    if (!wire::ParseHeader(p.frames[1], scratch, &h).ok()) continue;
    Pull(sh, *h, p.frames, p.arrived, true);
  }
}

}  // namespace shardps
