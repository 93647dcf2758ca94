// RocksDB-backed snapshots: the on-disk format, and reading and verifying
// it. Used by the server (write, restore), the coordinator (manifest,
// choosing what to restore) and shardps-snapshot (inspection).
//
// A snapshot is a directory ROOT/snap-<clock, 12 digits>/ holding
//  - server-<rank>.sst: one RocksDB SST file per server, written with
//    rocksdb::SstFileWriter. Key: 'r', table id (be32), partition (be32),
//    row or sparse id (be64); value: the row's parameters (cols floats)
//    followed by its optimizer state (OptimizerStateWidth floats) and, for
//    a sparse table with eviction, its stamp (a uint32 in a float's 4
//    bytes), little-endian (RowStride floats in all). Key 'a', table id
//    (be32), partition (be32): a sparse partition's admission sketch
//    (server/tables/admission.h), covered by the whole-file checksum.
//    RocksDB checksums every block.
//  - MANIFEST: a FlatBuffers `Manifest` (schema/shardps.fbs) written by the
//    coordinator after every server reported success, atomically (temp file
//    + rename): clock, time, tables, the shard map that wrote it, every file
//    and, per (table, partition), the server file holding it, its row count
//    and an XXH3-64 checksum over its keys and values in key order.
// A directory without a MANIFEST is an incomplete snapshot.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/tables/partition_data.h"
#include "shardps/status.h"
#include "shardps/types.h"

namespace shardps::snapshot {

struct PartEntry {
  uint32_t table = 0, partition = 0, server = 0;
  uint64_t rows = 0, checksum = 0;
  int64_t base = -1;      // a part of what changed since the snapshot at this clock; -1: a full part
  uint64_t deleted = 0;   // rows it records as gone (a part of what changed)
  bool full() const { return base < 0; }
};
struct FileEntry {
  uint32_t server = 0;
  std::string name;
  uint64_t bytes = 0;
  uint64_t checksum = 0;  // XXH3-64 of the whole file; 0: not recorded (older snapshots)
};

struct Manifest {
  int64_t clock = 0;
  int64_t unix_time_ms = 0;
  Consistency consistency = Consistency::kSync;
  uint32_t staleness = 0;
  uint32_t num_servers = 0;
  uint32_t partitions = 0;
  std::vector<uint32_t> owner;
  std::vector<TableSpec> tables;
  std::vector<FileEntry> files;
  std::vector<PartEntry> parts;
  uint64_t work_pool = 0;      // where training resumes: this epoch's pool (0: not recorded) ...
  uint64_t work_position = 0;  // ... with its units [0, work_position) trained

  const PartEntry* FindPart(uint32_t table, uint32_t partition) const;
  // Every part full (no earlier snapshot needed to read it).
  bool full() const;
  // The clocks of the snapshots its parts change, ascending, distinct.
  std::vector<int64_t> bases() const;
  const TableSpec* FindTable(const std::string& name) const;
  uint64_t bytes() const;
};

std::string DirName(int64_t clock);  // "snap-000000000042"
std::string ServerFileName(uint32_t server);

// Writes one server file as its rows come: admission sketches first, then
// each partition's rows (PartitionData::rows and ::deleted, merged in key
// order) over one or more Add calls, partitions ascending. A row recorded
// as gone is its key with an empty value.
class ServerFileWriter {
 public:
  ServerFileWriter();
  ~ServerFileWriter();
  ServerFileWriter(const ServerFileWriter&) = delete;
  ServerFileWriter& operator=(const ServerFileWriter&) = delete;

  Status Open(const std::string& path, uint32_t server);
  Status PutAdmission(uint32_t table, uint32_t partition, const std::string& bytes);
  // A partition's part: `base` as PartEntry::base.
  void BeginPart(uint32_t table, uint32_t partition, int64_t base);
  Status Add(const PartitionData& d);
  void EndPart();
  // Finishes and syncs the file; the parts written, its size and (if
  // given) its XXH3-64.
  Status Finish(std::vector<PartEntry>* entries, uint64_t* bytes, uint64_t* file_checksum);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Writes `parts` (sorted by table, partition, row) into `path`; fills one
// PartEntry per partition (server = `server`), the file's size and (if
// given) the XXH3-64 of the whole file.
Status WriteServerFile(const std::string& path, uint32_t server, std::vector<PartitionData>& parts,
                       std::vector<PartEntry>* entries, uint64_t* bytes, uint64_t* file_checksum = nullptr);
// XXH3-64 of the whole file at `path` (never 0: a 0 is recorded as 1).
Status FileChecksum(const std::string& path, uint64_t* out);

Status WriteManifest(const std::string& snap_dir, const Manifest& m);
// NotFound-like InvalidArgument when absent ("incomplete"), BadMessage when corrupt.
Status ReadManifest(const std::string& snap_dir, Manifest* m);

// The admission sketch stored for (table, partition); "" when none.
Status ReadAdmission(const std::string& snap_dir, const Manifest& m, uint32_t table, uint32_t partition,
                     std::string* out);

// Calls fn(row, values, stride) for every row of (table, partition) in
// this snapshot's part, in key order; values is null for a row the part
// records as gone. Checks the counts and checksum against the manifest.
// (A part of what changed holds only those rows: snapshot_chain.h reads a
// partition through its chain.)
Status ForEachRow(const std::string& snap_dir, const Manifest& m, uint32_t table, uint32_t partition,
                  const std::function<void(uint64_t row, const float* values, uint32_t stride)>& fn);

// Checks every file's size and whole-file checksum (where the manifest
// records one) before RocksDB reads it, then recomputes every partition
// checksum with RocksDB's block checksums on. On failure the message names
// the file, table and partition.
Status Verify(const std::string& snap_dir, const Manifest& m);

struct Listing {
  std::string dir;  // full path
  int64_t clock = 0;
  bool complete = false;
  std::string problem;  // why not complete / unreadable
  int64_t unix_time_ms = 0;
  uint64_t bytes = 0;
  bool full = true;            // every part full (complete snapshots)
  std::vector<int64_t> bases;  // the snapshots its parts change
};
// Every snap-* directory under `root`, oldest first.
Status List(const std::string& root, std::vector<Listing>* out);

// The newest complete snapshot under `root` whose files, and those of every
// snapshot its chain reads (snapshot_chain.h), verify (or the one
// at `clock` if clock >= 0). Snapshots refused on the way are described in
// *refused.
Status FindNewestGood(const std::string& root, int64_t clock, std::string* dir, Manifest* m,
                      std::vector<std::string>* refused);

}  // namespace shardps::snapshot
