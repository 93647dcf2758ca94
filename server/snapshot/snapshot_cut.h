// SnapshotCut: the server's side of a consistent cut (docs/snapshots.md):
// at which clocks a cut is due, what each held partition writes (every row,
// or only the rows changed since this server's previous cut of it: a
// snapshot of what changed), and CutWriter, the thread that streams the
// rows into the snapshot file.
//
// A cut never copies the model. The event loop hands the writer the rows of
// one partition after the other, a slice at a time between requests
// (CopySome), while the writer is less than kQueueBytes behind; a request
// about to change rows the cut has not handed over yet first keeps those
// rows as they were at the cut (EnsureCopied*: copy on write of a sparse
// row, of a dense partition). So a cut costs memory in proportion to the
// rows changed while it is written, and stays exact while training goes
// on. The event loop reports a written cut to the coordinator (TakeDone).
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/base/clock.h"
#include "server/snapshot/snapshot.h"

namespace shardps {

class ServerTable;

// What the event loop hands the writer, in order: a cut's kBegin (where,
// and the admission sketches as they were at the cut), the rows of each
// partition in key order over kRows pieces (`first` opens the part,
// `last` closes it), then kEnd.
struct CutPiece {
  enum Kind : uint8_t { kBegin, kRows, kEnd } kind = kRows;
  int64_t clock = 0;
  uint32_t server = 0;
  std::string root, dir;                // kBegin
  std::vector<PartitionData> sketches;  // kBegin: (table, partition, admission) only
  PartitionData rows;                   // kRows
  int64_t base = -1;                    // kRows: the part's base (PartEntry::base)
  bool first = false, last = false;     // kRows
  uint64_t bytes() const { return rows.values.size() * sizeof(float) + rows.rows.size() * 8 + rows.deleted.size() * 8; }
};
// A cut written (error empty) or not.
struct CutDone {
  int64_t clock = 0;
  std::vector<snapshot::PartEntry> parts;
  uint64_t bytes = 0;
  uint64_t checksum = 0;  // of the whole file
  std::string error;
};

// The writer thread and its queue. A piece carries everything the writer
// needs: it never reads the event loop's state. A piece belongs to the
// event loop until Submit moves it into pieces_, then to the writer thread;
// a CutDone goes the other way through done_.
class CutWriter {
 public:
  // `write_delay`: a fault-injection aid for tests: wait before writing.
  explicit CutWriter(Millis write_delay) : write_delay_(write_delay) {}
  ~CutWriter();  // stops the thread after the pieces queued, and joins it
  CutWriter(const CutWriter&) = delete;
  CutWriter& operator=(const CutWriter&) = delete;

  // Queues `piece` (starting the thread on first use). Event loop only.
  void Submit(CutPiece piece);
  // Bytes of rows queued and not written yet.
  uint64_t queued_bytes() const { return queued_.load(std::memory_order_relaxed); }
  // Moves the cuts written since the last call to *out; false when none.
  // Event loop only.
  bool TakeDone(std::deque<CutDone>* out);

 private:
  struct File;  // the cut being written (writer thread)
  void Loop();  // the writer thread
  void Write(CutPiece& piece, std::unique_ptr<File>& file);

  const Millis write_delay_;  // set before the thread starts; read by it
  std::thread thread_;        // started and joined by the event loop
  std::mutex mu_;             // guards pieces_, done_, stop_
  std::condition_variable cv_;
  std::deque<CutPiece> pieces_;  // event loop -> writer (mu_)
  std::deque<CutDone> done_;     // writer -> event loop (mu_)
  std::atomic<uint64_t> queued_{0};
  bool stop_ = false;  // (mu_)
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
  // written is handed over first), to be written as server `server`'s file
  // in `dir` under `root`; `label` is the clock in the directory's name
  // (what later parts name as their base; -1: `clock`). A partition writes
  // only what changed since this server's previous cut of it when that cut
  // is complete (its MANIFEST names this server's part) and fewer than
  // `full_every` - 1 parts of what changed were written since its last full
  // part; every row otherwise. Forgets the scheduled cuts up to `clock`.
  void Take(int64_t clock, uint32_t server, std::string root, std::string dir, int64_t label = -1,
            uint32_t full_every = 1);
  // Before rows of `table` change: keeps those the cut has not handed to
  // the writer yet as they were at the cut. A no-op without a cut.
  void EnsureCopiedRange(uint32_t table, uint64_t begin, uint64_t end) {
    if (active_) KeepRange(table, begin, end);
  }
  void EnsureCopiedKeys(uint32_t table, const uint64_t* keys, uint64_t n) {
    if (active_) KeepKeys(table, keys, n);
  }
  // Hands rows to the writer for about `budget_ms` (at least one slice)
  // while it is less than kQueueBytes behind.
  void CopySome(double budget_ms);
  // Whether CopySome has rows to hand over now (false while the writer
  // catches up, or without a cut).
  bool busy() const { return active_ && (writer_.queued_bytes() < kQueueBytes || dense_ahead_ > 0); }
  // Hands over what is left (however far behind the writer is).
  void Finish();
  // The cuts written since the last call (CutWriter::TakeDone).
  bool TakeDone(std::deque<CutDone>* out) { return writer_.TakeDone(out); }

  static constexpr uint64_t kQueueBytes = 8ull << 20;  // the writer's lag, at most (and one slice)
  static constexpr uint64_t kSliceBytes = 1ull << 20;  // rows handed over at once

 private:
  enum : uint8_t { kOut, kPending, kStarted, kDone };
  static constexpr uint32_t kAbsent = ~0u;
  // One partition of the cut in progress.
  struct Part {
    uint8_t state = kOut;
    int64_t base = -1;          // a part of what changed since this label; -1: full
    std::vector<uint64_t> ids;  // sparse: the ids to write, ascending (a full part's: from when it started)
    size_t next = 0;            // sparse: ids[0, next) handed over
    // Sparse: rows as they were at the cut, kept before a request changed
    // them: id -> offset in kept_rows (kAbsent: no row at the cut).
    std::unordered_map<uint64_t, uint32_t> kept;
    std::vector<float> kept_rows;
    std::unique_ptr<PartitionData> dense;  // a dense partition copied before a write
    uint64_t held = 0;                     // bytes kept (kept_rows and their index, or dense)
  };
  // Per partition, what this server's previous cut of it wrote.
  struct History {
    int64_t label = -1;        // that cut's label (-1: none)
    uint32_t since_full = 0;   // parts of what changed written since its last full part
    uint64_t version = 0;      // the partition's update count at that cut (dense)
    uint64_t generation = 0;   // the table's copy of the partition it was
  };

  void Plan(uint32_t t, uint32_t p, const std::string& root, uint32_t server, uint32_t full_every);
  bool BaseComplete(const std::string& root, int64_t label, uint32_t t, uint32_t p, uint32_t server);
  void KeepRange(uint32_t table, uint64_t begin, uint64_t end);
  void KeepKeys(uint32_t table, const uint64_t* keys, uint64_t n);
  void KeepDense(uint32_t table, uint32_t p);
  // Before any row goes to the writer: copies the dense partitions for
  // about `budget_ms` (at least one), so that requests seldom wait for one.
  void CopyDenseAhead(double t0, double budget_ms);
  void KeepSparse(uint32_t table, Part& part, uint64_t id);
  // Hands over up to kSliceBytes of (t, p); true once the part is done.
  bool HandOver(uint32_t t, uint32_t p);
  void SubmitRows(uint32_t t, uint32_t p, PartitionData rows, bool first, bool last);
  void Done(Part& part);  // a part handed over: what it kept is freed
  void End();

  const std::vector<std::unique_ptr<ServerTable>>& tables_;
  std::vector<uint8_t> mine_;    // by partition: copied by a cut (empty: every one held)
  std::set<int64_t> scheduled_;  // on-demand cut clocks
  int64_t last_cut_ = -1;
  bool active_ = false;
  int64_t clock_ = 0, label_ = 0;            // the cut in progress
  std::vector<std::vector<Part>> parts_;     // [table][partition] of the cut in progress
  std::vector<std::vector<History>> history_;  // [table][partition]
  std::unordered_map<int64_t, snapshot::Manifest> bases_;  // manifests read while planning a cut
  uint32_t cursor_t_ = 0, cursor_p_ = 0;     // the next part to hand over
  uint32_t dense_ahead_ = 0;                 // pending full dense parts not copied yet
  struct Stats {
    double started_ms = 0, max_slice_ms = 0;
    uint64_t full = 0, changed = 0, rows = 0, gone = 0, kept_rows = 0, kept_bytes = 0;
    uint64_t kept_now = 0;   // bytes of rows kept and not handed over yet
    uint64_t peak_held = 0;  // the most bytes held for the cut at once: kept rows and the writer's queue
  } stats_;
  CutWriter writer_;
};

}  // namespace shardps
