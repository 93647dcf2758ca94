// The server's side of snapshots: consistent cuts, the background writer,
// reports to the coordinator, and restoring partitions at start.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "common/log.h"
#include "common/wire.h"
#include "common/partition.h"
#include "server/server.h"

namespace shardps {

bool Server::Quiescent() const {
  return std::none_of(live_.begin(), live_.end(), [](uint8_t l) { return l != 0; });
}

bool Server::CutDue(int64_t clock) const {
  if (view_.snapshot_root.empty() || clock <= last_cut_) return false;
  if (scheduled_cuts_.count(clock)) return true;
  return view_.snapshot_every_clocks > 0 && clock > 0 && clock % view_.snapshot_every_clocks == 0;
}

void Server::CutIfDue(int64_t clock) {
  if (CutDue(clock)) TakeCut(clock);
}

void Server::MaybeCut() {
  if (view_.snapshot_root.empty() || !view_.complete()) return;
  if (Quiescent()) {
    // Nothing changes without live workers: every scheduled cut is exact now.
    while (!scheduled_cuts_.empty() && *scheduled_cuts_.begin() <= last_cut_) scheduled_cuts_.erase(scheduled_cuts_.begin());
    if (!scheduled_cuts_.empty()) TakeCut(*scheduled_cuts_.begin());
    return;
  }
  if (view_.consistency == Consistency::kSync) return;  // cut in Advance(), clock by clock
  // Bounded / async: the cut at C is taken once every live worker finished
  // clock C, so it holds every update of the clocks < C (and possibly newer
  // ones that already arrived, within the staleness bound).
  const int64_t m = MinClock();
  int64_t due = -1;
  for (int64_t c : scheduled_cuts_)
    if (c <= m && c > last_cut_) due = std::max(due, c);
  if (view_.snapshot_every_clocks > 0) {
    const int64_t periodic = (m / view_.snapshot_every_clocks) * view_.snapshot_every_clocks;
    if (periodic > 0 && periodic > last_cut_) due = std::max(due, periodic);
  }
  if (due >= 0) TakeCut(due);
}

namespace {
double NowMs() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

void Server::TakeCut(int64_t clock) {
  if (cut_active_) FinishCut();  // a cut still copying completes first
  // The writer thread gets where to write with the job: it never reads
  // view_, which the event loop replaces on every cluster update.
  cut_job_ = CutJob{clock, {}, view_.snapshot_root,
                    view_.snapshot_root + "/" + snapshot::DirName(view_.snapshot_clock_base + clock)};
  cut_pending_.assign(tables_.size(), {});
  cut_remaining_ = 0;
  for (size_t id = 0; id < tables_.size(); ++id) {
    if (!tables_[id]) continue;
    cut_pending_[id].assign(tables_[id]->partitions(), 0);
    for (uint32_t p = 0; p < tables_[id]->partitions(); ++p)
      if (tables_[id]->Holds(p)) {
        cut_pending_[id][p] = 1;
        ++cut_remaining_;
      }
  }
  last_cut_ = clock;
  while (!scheduled_cuts_.empty() && *scheduled_cuts_.begin() <= clock) scheduled_cuts_.erase(scheduled_cuts_.begin());
  cut_active_ = true;
  cut_started_ms_ = NowMs();
  cut_max_slice_ms_ = 0;
  if (cut_remaining_ == 0) FinishCut();
}

void Server::CopyCutPartition(uint32_t table, uint32_t p) {
  tables_[table]->ExportPartition(table, p, &cut_job_.parts);
  cut_pending_[table][p] = 0;
  if (--cut_remaining_ == 0) FinishCut();
}

void Server::EnsureCopiedRange(uint32_t table, uint64_t begin, uint64_t end) {
  if (!cut_active_ || table >= cut_pending_.size() || cut_pending_[table].empty() || begin >= end) return;
  const TableSpec& spec = tables_[table]->spec();
  const uint32_t P = tables_[table]->partitions();
  const double t0 = NowMs();
  for (uint32_t p = PartitionOfRow(begin, spec.rows, P); cut_active_ && p <= PartitionOfRow(end - 1, spec.rows, P); ++p)
    if (cut_pending_[table][p]) CopyCutPartition(table, p);
  cut_max_slice_ms_ = std::max(cut_max_slice_ms_, NowMs() - t0);
}

void Server::EnsureCopiedKeys(uint32_t table, const uint64_t* keys, uint64_t n) {
  if (!cut_active_ || table >= cut_pending_.size() || cut_pending_[table].empty()) return;
  const TableSpec& spec = tables_[table]->spec();
  const uint32_t P = tables_[table]->partitions();
  const double t0 = NowMs();
  for (uint64_t i = 0; i < n && cut_active_; ++i) {
    const uint32_t p = spec.kind == TableKind::kDense ? PartitionOfRow(keys[i], spec.rows, P) : PartitionOfId(keys[i], P);
    if (cut_pending_[table][p]) CopyCutPartition(table, p);
  }
  cut_max_slice_ms_ = std::max(cut_max_slice_ms_, NowMs() - t0);
}

void Server::CopySomeOfCut(double budget_ms) {
  if (!cut_active_) return;
  const double t0 = NowMs();
  for (size_t t = 0; t < cut_pending_.size() && cut_active_; ++t)
    for (uint32_t p = 0; p < cut_pending_[t].size() && cut_active_; ++p) {
      if (!cut_pending_[t][p]) continue;
      CopyCutPartition(static_cast<uint32_t>(t), p);
      if (NowMs() - t0 >= budget_ms) {
        cut_max_slice_ms_ = std::max(cut_max_slice_ms_, NowMs() - t0);
        return;
      }
    }
  cut_max_slice_ms_ = std::max(cut_max_slice_ms_, NowMs() - t0);
}

void Server::FinishCut() {
  if (cut_remaining_ > 0) {
    for (size_t t = 0; t < cut_pending_.size(); ++t)
      for (uint32_t p = 0; p < cut_pending_[t].size(); ++p)
        if (cut_pending_[t][p]) {
          tables_[t]->ExportPartition(static_cast<uint32_t>(t), p, &cut_job_.parts);
          cut_pending_[t][p] = 0;
        }
    cut_remaining_ = 0;
  }
  cut_active_ = false;
  LOG_INFO << "snapshot cut at clock " << cut_job_.clock << ": " << cut_job_.parts.size() << " partitions copied over "
           << (NowMs() - cut_started_ms_) << " ms, longest pause " << cut_max_slice_ms_ << " ms";
  if (!writer_.joinable()) writer_ = std::thread([this] { WriterLoop(); });
  {
    std::lock_guard<std::mutex> lock(wmu_);
    jobs_.push_back(std::move(cut_job_));
  }
  cut_job_ = CutJob{};
  wcv_.notify_all();
}

void Server::WriterLoop() {
  for (;;) {
    CutJob job;
    {
      std::unique_lock<std::mutex> lock(wmu_);
      wcv_.wait(lock, [&] { return writer_stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    CutDone done;
    done.clock = job.clock;
    const std::string& dir = job.dir;
    mkdir(job.root.c_str(), 0755);
    mkdir(dir.c_str(), 0755);
    if (opts_.snapshot_write_delay.count() > 0) std::this_thread::sleep_for(opts_.snapshot_write_delay);
    snapshot::Manifest existing;
    Status s = snapshot::ReadManifest(dir, &existing).ok()
                   ? Status::Conflict(dir + " is a complete snapshot already: not overwritten")
                   : snapshot::WriteServerFile(dir + "/" + snapshot::ServerFileName(rank_), rank_, job.parts, &done.parts,
                                         &done.bytes, &done.checksum);
    if (!s.ok()) done.error = s.ToString();
    done.clock = job.clock;
    {
      std::lock_guard<std::mutex> lock(wmu_);
      done_.push_back(std::move(done));
    }
  }
}

void Server::SendSnapshotReports() {
  std::deque<CutDone> done;
  {
    std::lock_guard<std::mutex> lock(wmu_);
    if (done_.empty()) return;
    done.swap(done_);
  }
  for (const auto& d : done) {
    if (d.error.empty())
      LOG_INFO << "snapshot at clock " << d.clock << " written (" << d.bytes << " bytes)";
    else
      LOG_ERROR << "snapshot at clock " << d.clock << " failed: " << d.error;
    fbb_.Clear();
    std::vector<flatbuffers::Offset<wire::SnapshotFile>> files;
    files.push_back(wire::CreateSnapshotFile(fbb_, rank_, fbb_.CreateString(snapshot::ServerFileName(rank_)), d.bytes,
                                             d.checksum));
    std::vector<flatbuffers::Offset<wire::SnapshotPart>> parts;
    for (const auto& p : d.parts)
      parts.push_back(wire::CreateSnapshotPart(fbb_, p.table, p.partition, p.server, p.rows, p.checksum));
    auto body = wire::CreateSnapshotReport(fbb_, d.clock, fbb_.CreateVector(files), fbb_.CreateVector(parts),
                                           d.error.empty() ? 0 : fbb_.CreateString(d.error));
    wire::Fields f;
    f.type = wire::MsgType::SnapshotDone;
    f.request_id = next_request_id_++;
    f.role = wire::Role::Server;
    f.rank = static_cast<int32_t>(rank_);
    f.clock = d.clock;
    coord_.send(wire::Encode(fbb_, f, wire::Body::SnapshotReport, body.Union()), zmq::send_flags::dontwait);
  }
}

void Server::HandleSnapshotControl(const wire::Header& h) {
  wire::Fields r;
  r.type = wire::MsgType::Reply;
  r.request_id = h.request_id();
  r.role = wire::Role::Server;
  r.rank = static_cast<int32_t>(rank_);
  // Where a cut taken now would be: sync cuts at applied clocks, the others
  // once every live worker passed the clock.
  const int64_t at = view_.consistency == Consistency::kSync ? applied_clock_ : MinClock();
  r.min_clock = at;
  Status s;
  if (view_.snapshot_root.empty()) {
    s = Status::InvalidArgument("this job has no snapshot directory (coordinator --snapshot-dir)");
  } else if (h.type() == wire::MsgType::SnapshotAt) {
    const int64_t c = h.clock();
    if (c <= last_cut_ || (!Quiescent() && c < at) ||
        (!Quiescent() && view_.consistency != Consistency::kSync && c <= at))
      s = Status::StaleClock("server " + std::to_string(rank_) + " is already at clock " + std::to_string(at) +
                             ", past the cut at " + std::to_string(c));
    else
      scheduled_cuts_.insert(c);
  } else if (h.type() == wire::MsgType::SnapshotCancel) {
    scheduled_cuts_.erase(h.clock());
  }
  r.error = wire::ToWire(s.code());
  r.message = s.message();
  coord_.send(wire::EncodeSimple(fbb_, r), zmq::send_flags::dontwait);
  if (s.ok() && h.type() == wire::MsgType::SnapshotAt) {
    if (view_.consistency == Consistency::kSync && !Quiescent()) CutIfDue(applied_clock_);
    MaybeCut();
  }
}

bool Server::RestoreCoversTable(const TableSpec& spec) {
  if (!restore_loaded_) {
    if (!snapshot::ReadManifest(view_.restore_from, &restore_manifest_).ok()) return false;
    restore_loaded_ = true;
  }
  uint64_t rows = 0;
  bool same = false;
  for (const auto& t : restore_manifest_.tables) same |= t.id == spec.id && t.SameShape(spec);
  for (const auto& p : restore_manifest_.parts)
    if (p.table == spec.id) rows += p.rows;
  return same && rows == spec.rows;
}

Status Server::RestoreTable(const TableSpec& spec) {
  if (!restore_loaded_) {
    Status s = snapshot::ReadManifest(view_.restore_from, &restore_manifest_);
    if (!s.ok()) return s;
    restore_loaded_ = true;
  }
  const TableSpec* saved = nullptr;
  for (const auto& t : restore_manifest_.tables)
    if (t.id == spec.id) saved = &t;
  if (!saved) return Status::OK();  // a table created after the snapshot
  if (!saved->SameShape(spec))
    return Status::Conflict("table '" + spec.name + "' differs from the one in " + view_.restore_from);
  ServerTable& t = *tables_[spec.id];
  uint64_t rows = 0;
  for (uint32_t p = 0; p < view_.map.partitions(); ++p) {
    if (!t.Holds(p)) continue;
    // A row is imported only into the partition it belongs to: a damaged
    // or foreign file must not write outside the table.
    Status bad;
    Status s = snapshot::ForEachRow(view_.restore_from, restore_manifest_, spec.id, p,
                                    [&](uint64_t row, const float* v, uint32_t) {
                                      if (!bad.ok()) return;
                                      const bool fits = spec.kind == TableKind::kDense
                                                            ? row < spec.rows &&
                                                                  PartitionOfRow(row, spec.rows, view_.map.partitions()) == p
                                                            : PartitionOfId(row, view_.map.partitions()) == p;
                                      if (!fits) {
                                        bad = Status::BadMessage("snapshot " + view_.restore_from + ": row " +
                                                                 std::to_string(row) + " of table '" + spec.name +
                                                                 "' is stored under partition " + std::to_string(p) +
                                                                 ", which does not hold it");
                                        return;
                                      }
                                      t.Import(row, v);
                                      ++rows;
                                    });
    if (!s.ok()) return s;
    if (!bad.ok()) return bad;
  }
  LOG_INFO << "restored " << rows << " rows of table '" << spec.name << "' from " << view_.restore_from;
  return Status::OK();
}

}  // namespace shardps
