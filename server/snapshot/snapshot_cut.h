// SnapshotCut: the server's side of a consistent cut (docs/snapshots.md):
// at which clocks a cut is due, the copy of every held partition at the cut
// while training goes on, and CutWriter, the thread that writes each
// finished copy to the snapshot directory.
//
// A cut is copied partition by partition: between requests a few at a time
// (CopySome), and any partition a request is about to change first
// (EnsureCopied*: copy on write), so the cut stays exact while training
// pauses only briefly. The event loop reports a written cut to the
// coordinator (TakeDone).
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/base/clock.h"
#include "server/snapshot/snapshot.h"

namespace shardps {

class ServerTable;

// A cut copied, to be written as server `server`'s file in `dir`.
struct CutJob {
  int64_t clock = 0;
  uint32_t server = 0;
  std::vector<PartitionData> parts;
  std::string root, dir;  // the snapshot root and this cut's directory
};
// A cut written (error empty) or not.
struct CutDone {
  int64_t clock = 0;
  std::vector<snapshot::PartEntry> parts;
  uint64_t bytes = 0;
  uint64_t checksum = 0;  // of the whole file
  std::string error;
};

// The writer thread and its queues. A job carries everything the writer
// needs: it never reads the event loop's state. A CutJob belongs to the
// event loop until Submit moves it into jobs_, then to the writer thread
// once popped; a CutDone goes the other way through done_.
class CutWriter {
 public:
  // `write_delay`: a fault-injection aid for tests: wait before writing.
  explicit CutWriter(Millis write_delay) : write_delay_(write_delay) {}
  ~CutWriter();  // stops the thread after the jobs queued, and joins it
  CutWriter(const CutWriter&) = delete;
  CutWriter& operator=(const CutWriter&) = delete;

  // Queues `job` (starting the thread on first use). Event loop only.
  void Submit(CutJob job);
  // Moves the cuts written since the last call to *out; false when none.
  // Event loop only.
  bool TakeDone(std::deque<CutDone>* out);

 private:
  void Loop();  // the writer thread
  static CutDone Write(CutJob& job, Millis delay);

  const Millis write_delay_;  // set before the thread starts; read by it
  std::thread thread_;        // started and joined by the event loop
  std::mutex mu_;             // guards jobs_, done_, stop_
  std::condition_variable cv_;
  std::deque<CutJob> jobs_;   // event loop -> writer (mu_)
  std::deque<CutDone> done_;  // writer -> event loop (mu_)
  bool stop_ = false;         // (mu_)
};

// The schedule and the copy in progress.
//
// Thread: the event loop owns every member but writer_ (CutWriter says
// which of its members the writer thread reads); no locks here.
class SnapshotCut {
 public:
  // `tables`: the server's tables by id (null: not held), which outlive
  // this; read only (ServerTable::ExportPartition).
  SnapshotCut(const std::vector<std::unique_ptr<ServerTable>>& tables, Millis write_delay)
      : tables_(tables), writer_(write_delay) {}

  // The partitions a cut copies (a replica group's; by default every one
  // held).
  void SetPartitions(const std::vector<uint32_t>& partitions) {
    mine_.clear();
    for (uint32_t p : partitions) {
      if (p >= mine_.size()) mine_.resize(p + 1, 0);
      mine_[p] = 1;
    }
  }

  // On-demand cuts (the coordinator's SnapshotAt / SnapshotCancel).
  void Schedule(int64_t clock) { scheduled_.insert(clock); }
  void Cancel(int64_t clock) { scheduled_.erase(clock); }
  int64_t last_cut() const { return last_cut_; }  // -1: none taken
  // Cuts up to `clock` are taken (elsewhere: a backup made primary).
  void SkipTo(int64_t clock) {
    last_cut_ = std::max(last_cut_, clock);
    while (!scheduled_.empty() && *scheduled_.begin() <= clock) scheduled_.erase(scheduled_.begin());
  }
  bool active() const { return active_; }         // a cut is being copied

  // Which cut is due. Sync, at applied clock `clock`: a cut at `clock` is
  // scheduled, or periodic (`every` > 0 clocks), and not taken yet.
  bool DueAt(int64_t clock, uint32_t every) const;
  // With no live worker (nothing changes: any cut is exact now): forgets
  // the scheduled cuts already taken; the first still scheduled, or -1.
  int64_t FirstScheduled();
  // Bounded / async: the cut at C is taken once every live worker finished
  // clock C (`min_clock` >= C), so it holds every update of the clocks < C
  // (and possibly newer ones that already arrived, within the staleness
  // bound). The newest such cut not taken yet, or -1.
  int64_t DueBehind(int64_t min_clock, uint32_t every) const;

  // Starts the cut at `clock` of every partition held (a cut still being
  // copied is finished first), to be written as server `server`'s file in
  // `dir` under `root`. Forgets the scheduled cuts up to `clock`.
  void Take(int64_t clock, uint32_t server, std::string root, std::string dir);
  // Before rows of `table` change: copies the partitions they lie in that
  // the cut in progress has not copied yet. A no-op without a cut.
  void EnsureCopiedRange(uint32_t table, uint64_t begin, uint64_t end) {
    if (active_) CopyRange(table, begin, end);
  }
  void EnsureCopiedKeys(uint32_t table, const uint64_t* keys, uint64_t n) {
    if (active_) CopyKeys(table, keys, n);
  }
  // Copies partitions for about `budget_ms` (at least one, if any is left).
  void CopySome(double budget_ms);
  // Copies what is left and hands the cut to the writer.
  void Finish();
  // The cuts written since the last call (CutWriter::TakeDone).
  bool TakeDone(std::deque<CutDone>* out) { return writer_.TakeDone(out); }

 private:
  void CopyPartition(uint32_t table, uint32_t partition);
  void CopyRange(uint32_t table, uint64_t begin, uint64_t end);
  void CopyKeys(uint32_t table, const uint64_t* keys, uint64_t n);

  const std::vector<std::unique_ptr<ServerTable>>& tables_;
  std::vector<uint8_t> mine_;    // by partition: copied by a cut (empty: every one held)
  std::set<int64_t> scheduled_;  // on-demand cut clocks
  int64_t last_cut_ = -1;
  bool active_ = false;
  CutJob job_;                                 // the cut being copied
  std::vector<std::vector<uint8_t>> pending_;  // [table][partition]: still to copy
  size_t remaining_ = 0;
  double started_ms_ = 0;
  double max_slice_ms_ = 0;  // the longest the loop paused copying
  CutWriter writer_;
};

}  // namespace shardps
