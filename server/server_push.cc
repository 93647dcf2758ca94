// The server's push handler: a push validated, then held for its clock
// (sync, WorkerClocks) or applied now with its staleness weighed.
#include <algorithm>

#include "common/base/log.h"
#include "common/codec/wire.h"
#include "server/server.h"
#include "server/tables/optimizer.h"

namespace shardps {

void Server::Push(Shard& sh, const wire::Header& h, std::vector<zmq::message_t>& frames) {
  ServerTable* t;
  const uint64_t* keys;
  const float* values[kMaxPushSteps];
  const bool worker = h.role() == wire::Role::Worker;
  // A worker's push under sync is held for its clock and read then
  // (ApplyClock): only checked now, not converted twice. An assign (rows
  // written, not gradients) is applied at once under every model.
  const bool assign = h.assign();
  if (assign && (h.steps() > 1 || h.compress() != wire::Compression::None))
    return ReplyError(frames[0], h.request_id(),
                      Status::InvalidArgument("an assign carries one set of rows, uncompressed (got " +
                                              std::to_string(h.steps()) + " steps, compression " +
                                              wire::EnumNameCompression(h.compress()) + ")"));
  const bool held = worker && sh.clocks.sync() && !assign;
  Status s = check_.Check(h, frames, true, &t, &keys, held ? nullptr : values, sh.group, !sh.primary);
  if (!s.ok()) return ReplyError(frames[0], h.request_id(), s);
  const int rank = h.rank();
  if (worker && !sh.clocks.IsLive(rank))
    return ReplyError(frames[0], h.request_id(),
                      Status::Unavailable("worker " + std::to_string(rank) + " is not live in this job"));
  if (worker && h.seq() != 0 && sh.clocks.IsRetry(rank, h.seq())) {  // a retry of a push already applied
    LOG_DEBUG << "duplicate push seq " << h.seq() << " from worker " << rank;
    wire::Fields ok;
    ok.request_id = h.request_id();
    return Reply(frames[0], wire::EncodeSimple(fbb_, ok));
  }
  if (!worker || !sh.clocks.sync() || assign) return ApplyPush(sh, h, frames, t, keys, values);
  // Pushes for the clock being applied are what BSP holds by design
  // (workers x the model, at most): always taken. Pushes for later clocks
  // are bounded.
  const uint64_t bytes = FramesBytes(frames);
  s = sh.clocks.CheckHold(rank, h.clock(), std::max<uint32_t>(1, h.steps()), bytes);
  if (!s.ok()) return ReplyError(frames[0], h.request_id(), s);
  m_.pushes.SingleWriterInc();
  m_.push_bytes.SingleWriterAdd(frames.back().size());
  wire::Fields ok;
  ok.request_id = h.request_id();
  Reply(frames[0], wire::EncodeSimple(fbb_, ok));
  input_.changed = true;
  sh.clocks.Hold(static_cast<uint32_t>(rank), h.clock(), h.table(), std::move(frames), bytes);
}

void Server::ApplyPush(Shard& sh, const wire::Header& h, std::vector<zmq::message_t>& frames, ServerTable* t,
                       const uint64_t* keys, const float* const* values) {
  const bool worker = h.role() == wire::Role::Worker;
  const uint32_t steps = std::max<uint32_t>(1, h.steps());
  m_.pushes.SingleWriterInc();
  m_.push_bytes.SingleWriterAdd(frames.back().size() * steps);
  m_.push_steps.SingleWriterAdd(steps);
  if (keys && t->tiered())
    if (Status s = t->Promote(keys, h.key_count()); !s.ok()) return ReplyError(frames[0], h.request_id(), s);
  if (keys)
    sh.cut.EnsureCopiedKeys(h.table(), keys, h.key_count());
  else
    sh.cut.EnsureCopiedRange(h.table(), h.row_begin(), h.row_end());
  if (h.assign()) {
    if (keys)
      t->AssignKeys(keys, h.key_count(), values[0]);
    else
      t->AssignRange(h.row_begin(), h.row_end(), values[0]);
    input_.changed = true;
    wire::Fields ok;
    ok.request_id = h.request_id();
    return Reply(frames[0], wire::EncodeSimple(fbb_, ok));
  }
  // Each gradient is one optimizer step, in order. A worker's push says on
  // which version of these rows each was computed: its staleness is the
  // updates applied since (this push's earlier steps included), and the
  // table's rule weighs it (docs/consistency.md, "Stale gradients").
  wire::Fields ok;
  ok.request_id = h.request_id();
  const auto* bases = worker ? h.base_versions() : nullptr;
  const StalenessRule rule = EffectiveStalenessRule(t->spec());
  for (uint32_t j = 0; j < steps; ++j) {
    float lr_scale = 1.0f;
    const float* g = values[j];
    const uint64_t tagged = bases ? bases->Get(j) : 0;
    if (bases && (tagged >> kVersionBits) != (sh.version_tag >> kVersionBits)) {
      m_.stale_unknown.SingleWriterInc();  // based on a pull from before this server started: as fresh
    } else if (bases) {
      const uint64_t now = keys ? t->KeysVersion(keys, h.key_count()) : t->RangeVersion(h.row_begin(), h.row_end());
      const uint64_t base = tagged & ((1ull << kVersionBits) - 1);
      const uint64_t tau = now > base ? now - base : 0;
      m_.staleness.SingleWriterObserve(static_cast<double>(tau));
      ok.staleness = std::max(ok.staleness, tau);
      lr_scale = StalenessLrScale(rule, tau);
      if (rule == StalenessRule::kDelayCompensation && tau > 0) {
        const float* dc =
            keys ? nullptr : sh.dc.Compensate(h.rank(), h.table(), *t, h.row_begin(), h.row_end(), tagged, g);
        if (dc)
          g = dc;
        else
          m_.dc_uncompensated.SingleWriterInc();
      }
    }
    if (keys)
      t->ApplyKeys(keys, h.key_count(), g, 1.0f, lr_scale);
    else
      t->ApplyRange(h.row_begin(), h.row_end(), g, 1.0f, lr_scale);
  }
  input_.changed = true;
  Reply(frames[0], wire::EncodeSimple(fbb_, ok));
}

}  // namespace shardps
