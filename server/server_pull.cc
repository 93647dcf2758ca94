// The server's pull handler: a pull validated, parked while the consistency
// model says it must wait (WorkerClocks), then answered from the table —
// a row range as frames pointing into the table, no copy.
#include "common/base/log.h"
#include "common/codec/wire.h"
#include "server/request_check.h"
#include "server/server.h"
#include "server/tables/optimizer.h"

namespace shardps {

void Server::Pull(Shard& sh, const wire::Header& h, std::vector<zmq::message_t>& frames, Clock::time_point arrived,
                  bool resumed) {
  ServerTable* t;
  const uint64_t* keys;
  const float* values = nullptr;
  Status s = check_.Check(h, frames, false, &t, &keys, &values, sh.group, !sh.primary);
  if (!s.ok()) return ReplyError(frames[0], h.request_id(), s);
  const bool worker = h.role() == wire::Role::Worker;
  if (worker && sh.clocks.IsRetiring(h.rank()))  // declared dead: not served as a live worker, nor as an observer
    return ReplyError(frames[0], h.request_id(),
                      Status::Unavailable("worker " + std::to_string(h.rank()) + " was declared dead"));
  if (worker && sh.clocks.consistency() != Consistency::kAsync && sh.clocks.IsLive(h.rank())) {
    bool park;
    int64_t need;
    s = sh.clocks.GatePull(h.rank(), h.clock(), &park, &need);
    if (s.ok() && park) s = sh.clocks.Park(need, h.rank(), std::move(frames), arrived);
    if (!s.ok()) return ReplyError(frames[0], h.request_id(), s);
    if (park) return;
  }
  wire::Fields f;
  f.request_id = h.request_id();
  f.min_clock = sh.clocks.MinClock();
  f.max_clock = sh.clocks.MaxClock();
  f.table_version =
      sh.version_tag | (keys ? t->KeysVersion(keys, h.key_count()) : t->RangeVersion(h.row_begin(), h.row_end()));
  // The values' type: a sparse table's dtype, or the one this pull of a
  // dense table asks for (its wire_dtype).
  const DType vtype = RequestCheck::ValueType(*t, h);
  if (t->spec().kind == TableKind::kDense) f.values.dtype = h.dtype();
  std::vector<zmq::message_t> out;
  out.emplace_back(frames[0].data(), frames[0].size());
  out.push_back(wire::EncodeSimple(fbb_, f));
  const uint64_t rows = keys ? h.key_count() : h.row_end() - h.row_begin();
  const uint64_t value_bytes = rows * t->spec().cols * DTypeBytes(vtype);
  if (keys && t->tiered())
    if (s = t->Promote(keys, h.key_count()); !s.ok()) return ReplyError(frames[0], h.request_id(), s);
  if (keys) {
    // A pull creates no row (an absent id reads its initial values).
    zmq::message_t vals(value_bytes);
    t->ReadKeysAs(keys, rows, vals.data(), vtype);
    out.push_back(std::move(vals));
  } else if (vtype != DType::kF32) {
    // Converted from the table straight into the reply: half the bytes.
    zmq::message_t vals(value_bytes);
    t->ReadRangeAs(h.row_begin(), h.row_end(), vtype, vals.data());
    out.push_back(std::move(vals));
  } else {
    // Rows straight from the table, one frame per partition segment.
    t->ReadRangeFrames(h.row_begin(), h.row_end(), &out);
  }
  if (!keys && worker && sh.clocks.IsLive(h.rank()) &&
      EffectiveStalenessRule(t->spec()) == StalenessRule::kDelayCompensation) {
    // The float32 values (a 16-bit pull's worker computed on them rounded).
    sh.dc.Keep(h.rank(), h.table(), *t, h.row_begin(), h.row_end(), f.table_version);
    input_.changed = true;  // delay compensation's state: the backups keep it too
  }
  m_.pulls.SingleWriterInc();
  m_.pull_bytes.SingleWriterAdd(value_bytes);
  const auto now = Clock::now();
  m_.pull_seconds.SingleWriterObserve(std::chrono::duration<double>(now - arrived).count());
  if (resumed) m_.wait_seconds.SingleWriterObserve(std::chrono::duration<double>(now - arrived).count());
  Send(std::move(out));
}

void Server::ExpireParked(Shard& sh) {
  if (sh.clocks.parked().empty()) return;
  const auto now = Clock::now();
  WorkerClocks::Parked p;
  while (sh.clocks.TakeExpired(now, opts_.max_hold, &p)) {
    const wire::Header* h = nullptr;
    std::vector<uint64_t> scratch;
    const uint64_t id = wire::ParseHeader(p.frames[1], scratch, &h).ok() ? h->request_id() : 0;
    ReplyError(p.frames[0], id,
               Status::Timeout("pull held for more than " + std::to_string(opts_.max_hold.count()) +
                               " ms waiting for every live worker to reach clock " + std::to_string(p.need_clock) +
                               " (the slowest is at " + std::to_string(sh.clocks.MinClock()) + ")"));
  }
}

}  // namespace shardps

