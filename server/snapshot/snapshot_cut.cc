#include "server/snapshot/snapshot_cut.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>

#include "common/base/log.h"
#include "common/cluster/partition.h"
#include "server/tables/table.h"

namespace shardps {

namespace {
double NowMs() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

CutWriter::~CutWriter() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CutWriter::Submit(CutPiece piece) {
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
  queued_.fetch_add(piece.bytes(), std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    pieces_.push_back(std::move(piece));
  }
  cv_.notify_all();
}

bool CutWriter::TakeDone(std::deque<CutDone>* out) {
  std::lock_guard<std::mutex> lock(mu_);
  if (done_.empty()) return false;
  out->swap(done_);
  return true;
}

// The cut being written: its file (none once an error stopped it).
struct CutWriter::File {
  CutDone done;
  std::unique_ptr<snapshot::ServerFileWriter> w;
  void Fail(const Status& s) {
    if (done.error.empty()) done.error = s.ToString();
    w.reset();
  }
};

void CutWriter::Loop() {
  std::unique_ptr<File> file;
  for (;;) {
    CutPiece piece;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !pieces_.empty(); });
      if (pieces_.empty()) return;
      piece = std::move(pieces_.front());
      pieces_.pop_front();
    }
    Write(piece, file);
    queued_.fetch_sub(piece.bytes(), std::memory_order_relaxed);
    if (piece.kind == CutPiece::kEnd && file) {
      std::lock_guard<std::mutex> lock(mu_);
      done_.push_back(std::move(file->done));
      file.reset();
    }
  }
}

void CutWriter::Write(CutPiece& piece, std::unique_ptr<File>& file) {
  if (piece.kind == CutPiece::kBegin) {
    file = std::make_unique<File>();
    file->done.clock = piece.clock;
    mkdir(piece.root.c_str(), 0755);
    mkdir(piece.dir.c_str(), 0755);
    if (write_delay_.count() > 0) std::this_thread::sleep_for(write_delay_);
    snapshot::Manifest existing;
    if (snapshot::ReadManifest(piece.dir, &existing).ok())
      return file->Fail(Status::Conflict(piece.dir + " is a complete snapshot already: not overwritten"));
    file->w = std::make_unique<snapshot::ServerFileWriter>();
    Status s = file->w->Open(piece.dir + "/" + snapshot::ServerFileName(piece.server), piece.server);
    for (size_t i = 0; s.ok() && i < piece.sketches.size(); ++i)
      s = file->w->PutAdmission(piece.sketches[i].table, piece.sketches[i].partition, piece.sketches[i].admission);
    if (!s.ok()) file->Fail(s);
    return;
  }
  if (!file || !file->w) return;  // (failed: the rest of the cut is dropped)
  if (piece.kind == CutPiece::kRows) {
    if (piece.first) file->w->BeginPart(piece.rows.table, piece.rows.partition, piece.base);
    Status s = file->w->Add(piece.rows);
    if (!s.ok()) return file->Fail(s);
    if (piece.last) file->w->EndPart();
    return;
  }
  Status s = file->w->Finish(&file->done.parts, &file->done.bytes, &file->done.checksum);
  if (!s.ok()) file->Fail(s);
}

bool SnapshotCut::DueAt(int64_t clock, uint32_t every) const {
  if (clock <= last_cut_) return false;
  if (scheduled_.count(clock)) return true;
  return every > 0 && clock > 0 && clock % every == 0;
}

int64_t SnapshotCut::FirstScheduled() {
  while (!scheduled_.empty() && *scheduled_.begin() <= last_cut_) scheduled_.erase(scheduled_.begin());
  return scheduled_.empty() ? -1 : *scheduled_.begin();
}

int64_t SnapshotCut::DueBehind(int64_t min_clock, uint32_t every) const {
  int64_t due = -1;
  for (int64_t c : scheduled_)
    if (c <= min_clock && c > last_cut_) due = std::max(due, c);
  if (every > 0) {
    const int64_t periodic = (min_clock / every) * every;
    if (periodic > 0 && periodic > last_cut_) due = std::max(due, periodic);
  }
  return due;
}

void SnapshotCut::Take(int64_t clock, uint32_t server, std::string root, std::string dir, int64_t label,
                       uint32_t full_every) {
  if (active_) Finish();  // a cut still being handed over completes first
  clock_ = clock;
  label_ = label >= 0 ? label : clock;
  dense_ahead_ = 0;
  stats_ = Stats{};
  stats_.started_ms = NowMs();
  CutPiece begin;
  begin.kind = CutPiece::kBegin;
  begin.clock = clock;
  begin.server = server;
  begin.root = root;
  begin.dir = std::move(dir);
  parts_.clear();
  parts_.resize(tables_.size());
  if (history_.size() < tables_.size()) history_.resize(tables_.size());
  for (size_t id = 0; id < tables_.size(); ++id) {
    if (!tables_[id]) continue;
    const uint32_t P = tables_[id]->partitions();
    parts_[id] = std::vector<Part>(P);
    history_[id].resize(P);
    for (uint32_t p = 0; p < P; ++p)
      if (tables_[id]->Holds(p) && (mine_.empty() || (p < mine_.size() && mine_[p]))) {
        Plan(static_cast<uint32_t>(id), p, root, server, full_every);
        std::string sketch = tables_[id]->AdmissionBytes(p);  // as it is at the cut
        if (sketch.empty()) continue;
        begin.sketches.emplace_back();
        begin.sketches.back().table = static_cast<uint32_t>(id);
        begin.sketches.back().partition = p;
        begin.sketches.back().admission = std::move(sketch);
      }
  }
  bases_.clear();
  writer_.Submit(std::move(begin));
  last_cut_ = clock;
  while (!scheduled_.empty() && *scheduled_.begin() <= clock) scheduled_.erase(scheduled_.begin());
  active_ = true;
  cursor_t_ = cursor_p_ = 0;
  bool any = false;
  for (const auto& t : parts_)
    for (const auto& p : t) any |= p.state != kOut;
  if (!any) End();  // nothing held: written at once
}

void SnapshotCut::Plan(uint32_t t, uint32_t p, const std::string& root, uint32_t server, uint32_t full_every) {
  ServerTable& table = *tables_[t];
  Part& part = parts_[t][p];
  History& h = history_[t][p];
  part.state = kPending;
  const bool sparse = table.spec().kind == TableKind::kSparse;
  // Always taken: tracking starts again at every cut.
  const bool tracked = sparse && table.TakeChanged(p, &part.ids);
  const bool could = full_every > 1 && h.label >= 0 && h.since_full + 1 < full_every &&
                     h.generation == table.Generation(p) && BaseComplete(root, h.label, t, p, server);
  if (could && (sparse ? tracked : h.version == table.PartitionVersion(p))) {
    part.base = h.label;  // sparse: the rows changed; dense: unchanged, nothing to write
    ++h.since_full;
    ++stats_.changed;
  } else {
    part.base = -1;
    part.ids.clear();
    h.since_full = 0;
    ++stats_.full;
  }
  if (!sparse && part.base >= 0) part.state = kStarted;  // (an empty part: nothing to keep)
  if (!sparse && part.base < 0) ++dense_ahead_;
  h.label = label_;
  h.version = table.PartitionVersion(p);
  h.generation = table.Generation(p);
}

bool SnapshotCut::BaseComplete(const std::string& root, int64_t label, uint32_t t, uint32_t p, uint32_t server) {
  auto it = bases_.find(label);
  if (it == bases_.end()) {
    snapshot::Manifest m;
    if (!snapshot::ReadManifest(root + "/" + snapshot::DirName(label), &m).ok()) m.clock = -1;
    it = bases_.emplace(label, std::move(m)).first;
  }
  const snapshot::PartEntry* e = it->second.clock == label ? it->second.FindPart(t, p) : nullptr;
  return e && e->server == server;
}

void SnapshotCut::KeepRange(uint32_t table, uint64_t begin, uint64_t end) {
  if (table >= parts_.size() || parts_[table].empty() || begin >= end) return;
  const TableSpec& spec = tables_[table]->spec();
  const uint32_t P = tables_[table]->partitions();
  for (uint32_t p = PartitionOfRow(begin, spec.rows, P); p <= PartitionOfRow(end - 1, spec.rows, P); ++p)
    KeepDense(table, p);
}

void SnapshotCut::KeepKeys(uint32_t table, const uint64_t* keys, uint64_t n) {
  if (table >= parts_.size() || parts_[table].empty()) return;
  const TableSpec& spec = tables_[table]->spec();
  const uint32_t P = tables_[table]->partitions();
  const double t0 = NowMs();
  if (spec.kind == TableKind::kDense) {
    for (uint64_t i = 0; i < n; ++i) KeepDense(table, PartitionOfRow(keys[i], spec.rows, P));
  } else {
    for (uint64_t i = 0; i < n; ++i) KeepSparse(table, parts_[table][PartitionOfId(keys[i], P)], keys[i]);
  }
  stats_.max_slice_ms = std::max(stats_.max_slice_ms, NowMs() - t0);
}

void SnapshotCut::KeepDense(uint32_t table, uint32_t p) {
  Part& part = parts_[table][p];
  if (part.state != kPending || part.dense) return;
  --dense_ahead_;
  std::vector<PartitionData> out;
  tables_[table]->ExportPartition(table, p, &out);
  part.dense = std::make_unique<PartitionData>(std::move(out.at(0)));
  ++stats_.kept_rows;
  part.held = part.dense->values.size() * sizeof(float);
  stats_.kept_bytes += part.held;
  stats_.kept_now += part.held;
  stats_.peak_held = std::max(stats_.peak_held, stats_.kept_now + writer_.queued_bytes());
}

void SnapshotCut::CopyDenseAhead(double t0, double budget_ms) {
  bool copied = false;
  for (uint32_t t = 0; t < parts_.size() && dense_ahead_ > 0; ++t)
    for (uint32_t p = 0; p < parts_[t].size() && dense_ahead_ > 0; ++p) {
      const Part& part = parts_[t][p];
      if (part.state != kPending || part.dense || tables_[t]->spec().kind != TableKind::kDense) continue;
      if (copied && NowMs() - t0 >= budget_ms) return;
      KeepDense(t, p);
      copied = true;
    }
}

void SnapshotCut::KeepSparse(uint32_t table, Part& part, uint64_t id) {
  if (part.state == kOut || part.state == kDone) return;
  if (part.state == kStarted && (part.next >= part.ids.size() || id < part.ids[part.next])) return;  // handed over
  // A part of what changed writes only its ids; a full one every row held.
  if (part.base >= 0 && !std::binary_search(part.ids.begin() + part.next, part.ids.end(), id)) return;
  if (part.kept.count(id)) return;  // kept already: as it was at the cut
  const uint32_t stride = RowStride(tables_[table]->spec());
  const size_t off = part.kept_rows.size();
  part.kept_rows.resize(off + stride);
  if (tables_[table]->ExportSparseRow(id, &part.kept_rows[off])) {
    part.kept.emplace(id, static_cast<uint32_t>(off));
    ++stats_.kept_rows;
    part.held += stride * sizeof(float) + 16;
    stats_.kept_bytes += stride * sizeof(float) + 16;
    stats_.kept_now += stride * sizeof(float) + 16;
    stats_.peak_held = std::max(stats_.peak_held, stats_.kept_now + writer_.queued_bytes());
  } else {
    part.kept_rows.resize(off);
    part.kept.emplace(id, kAbsent);
  }
}

void SnapshotCut::SubmitRows(uint32_t t, uint32_t p, PartitionData rows, bool first, bool last) {
  CutPiece piece;
  piece.kind = CutPiece::kRows;
  piece.base = parts_[t][p].base;
  piece.first = first;
  piece.last = last;
  stats_.rows += rows.rows.size();
  stats_.gone += rows.deleted.size();
  piece.rows = std::move(rows);
  piece.rows.table = t;
  piece.rows.partition = p;
  writer_.Submit(std::move(piece));
  stats_.peak_held = std::max(stats_.peak_held, stats_.kept_now + writer_.queued_bytes());
}

void SnapshotCut::Done(Part& part) {
  stats_.kept_now -= part.held;
  part = Part();
  part.state = kDone;
}

bool SnapshotCut::HandOver(uint32_t t, uint32_t p) {
  Part& part = parts_[t][p];
  ServerTable& table = *tables_[t];
  if (table.spec().kind == TableKind::kDense) {
    PartitionData d;
    d.stride = RowStride(table.spec());
    if (part.base < 0) {  // (a part of what changed of a dense partition is empty: unchanged)
      if (!part.dense) KeepDense(t, p);
      d = std::move(*part.dense);
      d.admission.clear();
    }
    SubmitRows(t, p, std::move(d), true, true);
    Done(part);
    return true;
  }
  const bool first = part.state == kPending;
  if (first && part.base < 0) {
    // A full part: the rows held now but those made since the cut.
    table.SparseIds(p, &part.ids);
    part.ids.erase(std::remove_if(part.ids.begin(), part.ids.end(),
                                  [&](uint64_t id) {
                                    auto it = part.kept.find(id);
                                    return it != part.kept.end() && it->second == kAbsent;
                                  }),
                   part.ids.end());
  }
  part.state = kStarted;
  PartitionData d;
  d.stride = RowStride(table.spec());
  const size_t n = std::max<size_t>(1, kSliceBytes / (d.stride * sizeof(float) + 8));
  d.rows.reserve(std::min(n, part.ids.size() - part.next));
  for (size_t k = 0; k < n && part.next < part.ids.size(); ++k) {
    const uint64_t id = part.ids[part.next++];
    auto it = part.kept.find(id);
    if (it != part.kept.end()) {
      if (it->second == kAbsent) {
        if (part.base >= 0) d.deleted.push_back(id);  // (a full part never lists it)
        continue;
      }
      d.rows.push_back(id);
      d.values.insert(d.values.end(), part.kept_rows.begin() + it->second,
                      part.kept_rows.begin() + it->second + d.stride);
      continue;
    }
    const size_t off = d.values.size();
    d.values.resize(off + d.stride);
    if (table.ExportSparseRow(id, &d.values[off])) {
      d.rows.push_back(id);
    } else {  // changed since the last cut, and gone before this one
      d.values.resize(off);
      d.deleted.push_back(id);
    }
  }
  const bool last = part.next >= part.ids.size();
  SubmitRows(t, p, std::move(d), first, last);
  if (last) Done(part);
  return last;
}

void SnapshotCut::CopySome(double budget_ms) {
  if (!active_) return;
  const double t0 = NowMs();
  const bool all = budget_ms < 0;  // Finish: however far behind the writer is
  // Dense partitions are copied first, a few between requests, before the
  // writer starts: while they wait, every request that changes one copies
  // it, and copies run slowest beside a busy writer.
  if (!all && dense_ahead_ > 0) {
    CopyDenseAhead(t0, budget_ms);
    stats_.max_slice_ms = std::max(stats_.max_slice_ms, NowMs() - t0);
    return;
  }
  bool handed = false;             // (at least one slice a call, the writer allowing)
  for (; cursor_t_ < parts_.size(); ++cursor_t_, cursor_p_ = 0)
    for (; cursor_p_ < parts_[cursor_t_].size(); ++cursor_p_) {
      const uint8_t st = parts_[cursor_t_][cursor_p_].state;
      if (st == kOut || st == kDone) continue;
      for (;;) {
        if (!all && (writer_.queued_bytes() >= kQueueBytes || (handed && NowMs() - t0 >= budget_ms))) {
          stats_.max_slice_ms = std::max(stats_.max_slice_ms, NowMs() - t0);
          return;
        }
        handed = true;
        if (HandOver(cursor_t_, cursor_p_)) break;
      }
    }
  stats_.max_slice_ms = std::max(stats_.max_slice_ms, NowMs() - t0);
  End();
}

void SnapshotCut::Finish() { CopySome(-1); }

void SnapshotCut::End() {
  active_ = false;
  CutPiece end;
  end.kind = CutPiece::kEnd;
  end.clock = clock_;
  writer_.Submit(std::move(end));
  LOG_INFO << "snapshot cut at clock " << clock_ << ": " << stats_.full << " full parts, " << stats_.changed
           << " of what changed; " << stats_.rows << " rows and " << stats_.gone << " gone handed over in "
           << (NowMs() - stats_.started_ms) << " ms; kept as at the cut: " << stats_.kept_rows << " rows ("
           << stats_.kept_bytes << " bytes); held for the cut at most " << stats_.peak_held
           << " bytes; longest pause " << stats_.max_slice_ms << " ms";
  parts_.clear();
}

}  // namespace shardps
