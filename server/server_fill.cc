// Re-replication (docs/fault-tolerance.md, "Re-replication and drains"): a
// copy of a replica group made on another server while training goes on.
//
// The coordinator names, in a new shard map, a server to be filled with a
// copy of group g (ShardMap::joining). The group's last full copy then
// feeds that server as it would feed a next copy in the chain, except that
// nothing waits for it until FillEnd is sent: first the group's state at this place in the
// stream (FillBegin: the version tag and the worker clocks, held sync
// pushes and kept pulls included), then each table partition of the group
// (FillPart, a few at a time, the next ones as the copy acknowledges), then
// delay compensation's kept pulls (FillEnd); and between them, every input
// as it comes. A part is taken at its own place in the stream, between two
// inputs, so the copy applies every input to every partition and each
// part, when it comes, overwrites what the partition held with what it
// holds at that place: once the last part is in, every partition is what
// the source has. The copy tells the coordinator, whose next map makes it
// a full copy at the end of the chain: from then on replies wait for it.
#include <chrono>
#include <cstring>
#include <memory>

#include "common/base/log.h"
#include "common/cluster/partition.h"
#include "common/codec/wire.h"
#include "server/server.h"
#include "server/tables/optimizer.h"

namespace shardps {

namespace {

// Parts sent and not yet installed by the copy, at most: the source sends
// the next ones as the copy keeps up, so a fill costs the loop one
// partition's copy at a time and the stream's memory a few partitions.
constexpr uint64_t kFillWindow = 4;

wire::Fields FillFields(const Shard& sh, uint32_t rank, wire::RepKind kind, uint64_t at) {
  wire::Fields f;
  f.type = wire::MsgType::Replicate;
  f.role = wire::Role::Server;
  f.rank = static_cast<int32_t>(rank);
  f.group = static_cast<int32_t>(sh.group);
  f.fseq = f.request_id = at;  // its place: after input `at`
  f.rep = kind;
  return f;
}

zmq::message_t Bytes(const std::string& s) { return zmq::message_t(s.data(), s.size()); }

// ZeroMQ's free callback of a fill part's frames (its I/O thread calls it
// once the frame is sent; named in tools/tsan.supp: the hand-over is in
// uninstrumented libzmq).
void ReleaseFillPart(void*, void* hint) { delete static_cast<std::shared_ptr<PartitionData>*>(hint); }

// A frame of `bytes` at `data`, which `owner` keeps alive until ZeroMQ has
// sent it (small frames: copied).
zmq::message_t Owning(const std::shared_ptr<PartitionData>& owner, const void* data, size_t bytes) {
  if (bytes < 4096) return zmq::message_t(data, bytes);
  return zmq::message_t(const_cast<void*>(data), bytes, &ReleaseFillPart,
                        new std::shared_ptr<PartitionData>(owner));
}

// The `T`s of a frame: in place when aligned, else copied into *copy.
template <typename T>
const T* Aligned(const zmq::message_t& f, std::vector<T>* copy) {
  if (reinterpret_cast<uintptr_t>(f.data()) % alignof(T) == 0) return static_cast<const T*>(f.data());
  copy->resize(f.size() / sizeof(T));
  if (!copy->empty()) std::memcpy(copy->data(), f.data(), copy->size() * sizeof(T));
  return copy->data();
}

}  // namespace

void Server::StartFill(Shard& sh) {
  // The place in the stream the state is taken at: what this copy applied
  // (a primary: what it took, every input of which it forwarded).
  const uint64_t at = sh.primary ? sh.sent : sh.applied;
  sh.sent = at;
  sh.fill.active = true;
  sh.fill.todo.clear();
  sh.fill.sent = sh.fill.acked = sh.fill.bytes = 0;
  sh.fill.end_sent = false;
  sh.fill.start = Clock::now();
  sh.kept.clear();
  sh.keep = false;
  const auto parts = view_.map.OfGroup(sh.group);
  for (uint32_t id = 0; id < tables_.size(); ++id)
    if (const ServerTable* t = tables_.get(id))
      for (uint32_t p : parts)
        if (t->Holds(p)) sh.fill.todo.push_back({id, p});
  // The worker clocks, and of the parked pulls those a copy parks too
  // (delay compensation's: the others are answered by the primary only).
  std::string clocks;
  sh.clocks.Save(&clocks, [&](const WorkerClocks::Parked& p) {
    const wire::Header* ph = nullptr;
    std::vector<uint64_t> scratch;
    if (p.frames.size() < 2 || !wire::ParseHeader(p.frames[1], scratch, &ph).ok()) return false;
    const ServerTable* t = tables_.get(ph->table());
    return ph->type() == wire::MsgType::Pull && ph->role() == wire::Role::Worker && ph->key_count() == 0 && t &&
           EffectiveStalenessRule(t->spec()) == StalenessRule::kDelayCompensation;
  });
  wire::Fields f = FillFields(sh, rank_, wire::RepKind::FillBegin, at);
  f.table_version = sh.version_tag;
  f.key_count = sh.fill.todo.size();
  std::vector<zmq::message_t> out;
  out.push_back(wire::EncodeSimple(fbb_, f));
  out.push_back(Bytes(clocks));
  LOG_INFO << "group " << sh.group << ": filling server " << sh.next << " with a copy (" << sh.fill.todo.size()
           << " table partitions, from input " << at << ")";
  SendToNext(sh, out);
  PumpFill(sh);
}

void Server::PumpFill(Shard& sh) {
  if (!sh.fill.active) return;
  const uint64_t at = sh.primary ? sh.sent : sh.applied;
  while (!sh.fill.todo.empty() && sh.fill.sent - sh.fill.acked < kFillWindow) {
    const Shard::FillPart part = sh.fill.todo.front();
    sh.fill.todo.pop_front();
    const ServerTable* t = tables_.get(part.table);
    if (!t || !t->Holds(part.partition)) continue;  // (not held: nothing the copy lacks)
    std::vector<PartitionData> data;
    t->ExportPartition(part.table, part.partition, &data);
    // Its arrays go out as they are (the frames own them; no copy).
    auto held = std::make_shared<PartitionData>(std::move(data.front()));
    const PartitionData& d = *held;
    wire::Fields f = FillFields(sh, rank_, wire::RepKind::FillPart, at);
    f.table = part.table;
    f.row_begin = part.partition;
    f.table_version = t->PartitionVersion(part.partition);
    f.seq = t->RoundingState(part.partition);
    f.key_count = d.rows.size();
    std::vector<zmq::message_t> out;
    out.push_back(wire::EncodeSimple(fbb_, f));
    out.push_back(Owning(held, d.rows.data(), d.rows.size() * sizeof(uint64_t)));
    out.push_back(Owning(held, d.values.data(), d.values.size() * sizeof(float)));
    out.emplace_back(d.admission.data(), d.admission.size());
    sh.fill.bytes += FramesBytes(out);
    ++sh.fill.sent;
    m_.fill_bytes.SingleWriterAdd(FramesBytes(out));
    SendToNext(sh, out);
  }
  if (sh.fill.todo.empty() && !sh.fill.end_sent) {
    sh.fill.end_sent = true;
    std::string dc;
    sh.dc.Save(&dc);
    wire::Fields f = FillFields(sh, rank_, wire::RepKind::FillEnd, at);
    f.key_count = sh.fill.sent;
    std::vector<zmq::message_t> out;
    out.push_back(wire::EncodeSimple(fbb_, f));
    out.push_back(Bytes(dc));
    SendToNext(sh, out);
    const double secs = std::chrono::duration<double>(Clock::now() - sh.fill.start).count();
    LOG_INFO << "group " << sh.group << ": fill of server " << sh.next << " sent: " << sh.fill.sent << " parts, "
             << sh.fill.bytes << " bytes in " << secs << " s";
  }
}

Status Server::ApplyFill(Shard& sh, const wire::Header& h, std::vector<zmq::message_t>& frames) {
  const std::string where = "group " + std::to_string(sh.group) + "'s fill";
  if (sh.filled.done && h.rep() != wire::RepKind::FillBegin)
    return Status::BadMessage(where + ": a part after the copy was filled");
  if (h.rep() != wire::RepKind::FillBegin && !sh.filled.begun)
    return Status::BadMessage(where + ": a part before its FillBegin");
  if (h.rep() != wire::RepKind::FillBegin && h.fseq() != sh.applied)
    return Status::BadMessage(where + ": a part taken after input " + std::to_string(h.fseq()) +
                              " came after input " + std::to_string(sh.applied));
  // [sender's routing id][header][payload...]
  const size_t want = h.rep() == wire::RepKind::FillPart ? 5 : 3;
  if (frames.size() != want)
    return Status::BadMessage(where + ": a '" + wire::EnumNameRepKind(h.rep()) + "' of " +
                              std::to_string(frames.size() - 2) + " frames, not " + std::to_string(want - 2));
  switch (h.rep()) {
    case wire::RepKind::FillBegin: {
      WorkerClocks clocks(UINT64_MAX);
      clocks.SetModel(view_.consistency, view_.staleness);
      if (Status s = clocks.Load(frames[2].to_string_view()); !s.ok()) return s;
      // A new fill (or one again from a new source): everything before it
      // is forgotten; the rows are overwritten part by part.
      sh.clocks = std::move(clocks);
      sh.clocks.set_held_limit(UINT64_MAX);
      sh.dc = DcKept();
      sh.version_tag = h.table_version();
      sh.applied = h.fseq();
      sh.acked_up = 0;
      sh.filled = Shard::FillIn{false, true, 0, Clock::now(), false};
      LOG_INFO << where << " begins: " << h.key_count() << " table partitions from server " << h.rank()
               << ", at input " << h.fseq();
      return Status::OK();
    }
    case wire::RepKind::FillPart:
      if (Status s = InstallPart(sh, h, frames); !s.ok()) return Status(s.code(), where + ": " + s.message());
      ++sh.filled.parts;
      return Status::OK();
    case wire::RepKind::FillEnd: {
      if (h.key_count() != sh.filled.parts)
        return Status::BadMessage(where + ": " + std::to_string(sh.filled.parts) + " parts installed of " +
                                  std::to_string(h.key_count()) + " sent");
      DcKept dc;
      if (Status s = dc.Load(frames[2].to_string_view()); !s.ok()) return s;
      sh.dc = std::move(dc);
      sh.filled.done = true;
      const double secs = std::chrono::duration<double>(Clock::now() - sh.filled.start).count();
      LOG_INFO << where << " is complete: " << sh.filled.parts << " table partitions in " << secs << " s, at input "
               << sh.applied;
      m_.fills.SingleWriterInc();
      ReportFilled(sh, Status::OK());
      return Status::OK();
    }
    default:
      return Status::BadMessage(where + ": not a fill message");
  }
}

Status Server::InstallPart(Shard& sh, const wire::Header& h, std::vector<zmq::message_t>& frames) {
  ServerTable* t = tables_.get(h.table());
  const uint32_t p = static_cast<uint32_t>(h.row_begin());
  if (!t || h.row_begin() >= view_.map.partitions() || !t->Holds(p) || view_.map.GroupOf(p) != sh.group)
    return Status::BadMessage("partition " + std::to_string(h.row_begin()) + " of table " + std::to_string(h.table()) +
                              " is not one of the group's held here");
  const TableSpec& spec = t->spec();
  const uint32_t stride = RowStride(spec);
  const uint64_t n = h.key_count();
  if (frames[2].size() != n * sizeof(uint64_t) || frames[3].size() != n * stride * sizeof(float))
    return Status::BadMessage("table '" + spec.name + "' partition " + std::to_string(p) +
                              ": the part's sizes do not match " + std::to_string(n) + " rows of " +
                              std::to_string(stride) + " floats");
  std::vector<uint64_t> rows_copy;
  std::vector<float> values_copy;
  const uint64_t* rows = Aligned(frames[2], &rows_copy);
  const float* values = Aligned(frames[3], &values_copy);
  const uint32_t parts = view_.map.partitions();
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t row = rows[i];
    if (!t->RowInPartition(row, p))
      return Status::BadMessage("row " + std::to_string(row) + " of table '" + spec.name + "' is not in partition " +
                                std::to_string(p));
  }
  if (spec.kind == TableKind::kDense &&
      n != PartitionRowBegin(p + 1, spec.rows, parts) - PartitionRowBegin(p, spec.rows, parts))
    return Status::BadMessage("dense partition " + std::to_string(p) + " of '" + spec.name + "' with " +
                              std::to_string(n) + " rows");
  const std::string admission(frames[4].to_string_view());
  if (spec.kind == TableKind::kSparse) t->ClearSparsePartition(p);
  for (uint64_t i = 0; i < n; ++i) t->Import(rows[i], &values[i * stride]);
  if (!admission.empty() && !t->ImportAdmission(p, admission))
    return Status::BadMessage("table '" + spec.name + "' partition " + std::to_string(p) + ": not an admission sketch of it");
  t->SetPartitionVersion(p, h.table_version());
  t->SetRoundingState(p, h.seq());
  return Status::OK();
}

void Server::ReportFilled(Shard& sh, const Status& s) {
  if (!s.ok()) LOG_ERROR << "group " << sh.group << ": the copy cannot be filled: " << s.ToString();
  wire::Fields f;
  f.type = wire::MsgType::Filled;
  f.request_id = coord_link_.next_request_id++;
  f.role = wire::Role::Server;
  f.rank = static_cast<int32_t>(rank_);
  f.group = static_cast<int32_t>(sh.group);
  f.map_version = view_.map.version;
  if (!s.ok()) {
    f.error = static_cast<wire::ErrorCode>(s.code());
    f.message = s.message();
  }
  Coord().send(wire::EncodeSimple(fbb_, f), zmq::send_flags::dontwait);
}

}  // namespace shardps
