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

void CutWriter::Submit(CutJob job) {
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_all();
}

bool CutWriter::TakeDone(std::deque<CutDone>* out) {
  std::lock_guard<std::mutex> lock(mu_);
  if (done_.empty()) return false;
  out->swap(done_);
  return true;
}

void CutWriter::Loop() {
  for (;;) {
    CutJob job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    CutDone done = Write(job, write_delay_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_.push_back(std::move(done));
    }
  }
}

CutDone CutWriter::Write(CutJob& job, Millis delay) {
  CutDone done;
  done.clock = job.clock;
  const std::string& dir = job.dir;
  mkdir(job.root.c_str(), 0755);
  mkdir(dir.c_str(), 0755);
  if (delay.count() > 0) std::this_thread::sleep_for(delay);
  snapshot::Manifest existing;
  Status s = snapshot::ReadManifest(dir, &existing).ok()
                 ? Status::Conflict(dir + " is a complete snapshot already: not overwritten")
                 : snapshot::WriteServerFile(dir + "/" + snapshot::ServerFileName(job.server), job.server, job.parts,
                                             &done.parts, &done.bytes, &done.checksum);
  if (!s.ok()) done.error = s.ToString();
  return done;
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

void SnapshotCut::Take(int64_t clock, uint32_t server, std::string root, std::string dir) {
  if (active_) Finish();  // a cut still copying completes first
  job_ = CutJob{clock, server, {}, std::move(root), std::move(dir)};
  pending_.assign(tables_.size(), {});
  remaining_ = 0;
  for (size_t id = 0; id < tables_.size(); ++id) {
    if (!tables_[id]) continue;
    pending_[id].assign(tables_[id]->partitions(), 0);
    for (uint32_t p = 0; p < tables_[id]->partitions(); ++p)
      if (tables_[id]->Holds(p) && (mine_.empty() || (p < mine_.size() && mine_[p]))) {
        pending_[id][p] = 1;
        ++remaining_;
      }
  }
  last_cut_ = clock;
  while (!scheduled_.empty() && *scheduled_.begin() <= clock) scheduled_.erase(scheduled_.begin());
  active_ = true;
  started_ms_ = NowMs();
  max_slice_ms_ = 0;
  if (remaining_ == 0) Finish();
}

void SnapshotCut::CopyPartition(uint32_t table, uint32_t p) {
  tables_[table]->ExportPartition(table, p, &job_.parts);
  pending_[table][p] = 0;
  if (--remaining_ == 0) Finish();
}

void SnapshotCut::CopyRange(uint32_t table, uint64_t begin, uint64_t end) {
  if (table >= pending_.size() || pending_[table].empty() || begin >= end) return;
  const TableSpec& spec = tables_[table]->spec();
  const uint32_t P = tables_[table]->partitions();
  const double t0 = NowMs();
  for (uint32_t p = PartitionOfRow(begin, spec.rows, P); active_ && p <= PartitionOfRow(end - 1, spec.rows, P); ++p)
    if (pending_[table][p]) CopyPartition(table, p);
  max_slice_ms_ = std::max(max_slice_ms_, NowMs() - t0);
}

void SnapshotCut::CopyKeys(uint32_t table, const uint64_t* keys, uint64_t n) {
  if (table >= pending_.size() || pending_[table].empty()) return;
  const TableSpec& spec = tables_[table]->spec();
  const uint32_t P = tables_[table]->partitions();
  const double t0 = NowMs();
  for (uint64_t i = 0; i < n && active_; ++i) {
    const uint32_t p = spec.kind == TableKind::kDense ? PartitionOfRow(keys[i], spec.rows, P) : PartitionOfId(keys[i], P);
    if (pending_[table][p]) CopyPartition(table, p);
  }
  max_slice_ms_ = std::max(max_slice_ms_, NowMs() - t0);
}

void SnapshotCut::CopySome(double budget_ms) {
  if (!active_) return;
  const double t0 = NowMs();
  for (size_t t = 0; t < pending_.size() && active_; ++t)
    for (uint32_t p = 0; p < pending_[t].size() && active_; ++p) {
      if (!pending_[t][p]) continue;
      CopyPartition(static_cast<uint32_t>(t), p);
      if (NowMs() - t0 >= budget_ms) {
        max_slice_ms_ = std::max(max_slice_ms_, NowMs() - t0);
        return;
      }
    }
  max_slice_ms_ = std::max(max_slice_ms_, NowMs() - t0);
}

void SnapshotCut::Finish() {
  if (remaining_ > 0) {
    for (size_t t = 0; t < pending_.size(); ++t)
      for (uint32_t p = 0; p < pending_[t].size(); ++p)
        if (pending_[t][p]) {
          tables_[t]->ExportPartition(static_cast<uint32_t>(t), p, &job_.parts);
          pending_[t][p] = 0;
        }
    remaining_ = 0;
  }
  active_ = false;
  LOG_INFO << "snapshot cut at clock " << job_.clock << ": " << job_.parts.size() << " partitions copied over "
           << (NowMs() - started_ms_) << " ms, longest pause " << max_slice_ms_ << " ms";
  writer_.Submit(std::move(job_));
  job_ = CutJob{};
}

}  // namespace shardps
