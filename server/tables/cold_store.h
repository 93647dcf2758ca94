// ColdStore: the cold tier of a server's tiered sparse tables
// (docs/embeddings.md, "Tables larger than memory"): rows moved out of
// memory, in one RocksDB of the server's own under --cold-dir.
//
// A key is 16 bytes, big-endian so that RocksDB's order is (table,
// partition, id): [u32 table][u32 partition][u64 id]; a value is a sparse
// row's record without its id (SparseRows::raw: stamp, optimizer state,
// values in the table's dtype), bit for bit as memory held it.
//
// The tier is not durable and need not be: snapshots are. The write-ahead
// log is off, the directory is emptied when the store opens and removed
// when it closes (a directory that is not empty and was not made by a cold
// store is refused: nothing else is ever deleted). No compression (float
// rows do not compress), a bloom filter per file (a read of an id that is
// not there touches no block), a small block cache (the operating system's
// page cache does the rest).
//
// Thread-safety: none; the server's event loop owns it (RocksDB's own
// threads flush and compact behind it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shardps/status.h"

namespace shardps {

class ColdStore {
 public:
  ~ColdStore();
  ColdStore(const ColdStore&) = delete;
  ColdStore& operator=(const ColdStore&) = delete;

  // Opens (makes) the store in `dir`: a directory that does not exist yet,
  // is empty, or holds an earlier cold store (which is wiped); Unavailable
  // while another process has it open.
  static Status Open(const std::string& dir, std::unique_ptr<ColdStore>* out);
  // Whether Open would take `dir` (InvalidArgument saying why not).
  static Status CheckDir(const std::string& dir);
  const std::string& dir() const { return dir_; }

  // Reads the rows of ids[0, n) (all of partition `partition` of table
  // `table`, ascending) in one batched read: found[i] says whether id i is
  // here, its value_bytes bytes then at out + i * value_bytes.
  Status MultiGet(uint32_t table, uint32_t partition, const uint64_t* ids, size_t n, size_t value_bytes, uint8_t* out,
                  std::vector<uint8_t>* found);
  // One row (false: not here).
  bool Get(uint32_t table, uint32_t partition, uint64_t id, size_t value_bytes, uint8_t* out) const;

  // Writes and deletes, applied together by Commit (ids in any order).
  void Put(uint32_t table, uint32_t partition, uint64_t id, const uint8_t* value, size_t value_bytes);
  void Delete(uint32_t table, uint32_t partition, uint64_t id);
  Status Commit();

  // Every row of a partition from `from` on, ascending, until fn returns
  // false; returns the id after the last one visited (0 with *done when the
  // partition's end was reached).
  template <typename Fn>
  uint64_t Scan(uint32_t table, uint32_t partition, uint64_t from, bool* done, Fn&& fn) const {
    return ScanImpl(table, partition, from, done,
                    [](void* ctx, uint64_t id, std::string_view v) { return (*static_cast<Fn*>(ctx))(id, v); }, &fn);
  }
  // Removes a whole partition's rows.
  Status DropPartition(uint32_t table, uint32_t partition);

  // The first failure of the store (a read or write RocksDB refused, a
  // corrupt block): "" while none. A server whose cold tier failed stops
  // (its replicas take over): rows it cannot read must not be taken as
  // absent.
  const std::string& failure() const { return failure_; }
  // Writes the memtable to files (tests).
  Status Flush();

  // Bytes read and written since the store opened, and the free bytes of
  // its file system (statvfs: what an unprivileged writer may use).
  uint64_t bytes_read() const { return bytes_read_; }
  uint64_t bytes_written() const { return bytes_written_; }
  uint64_t FreeBytes() const;

 private:
  struct Impl;
  using ScanFn = bool (*)(void* ctx, uint64_t id, std::string_view value);
  ColdStore(std::string dir, std::unique_ptr<Impl> impl);
  uint64_t ScanImpl(uint32_t table, uint32_t partition, uint64_t from, bool* done, ScanFn fn, void* ctx) const;

  Status Failed(const std::string& what, const std::string& why) const;

  std::string dir_;
  std::unique_ptr<Impl> impl_;
  mutable std::string failure_;
  mutable uint64_t bytes_read_ = 0;
  uint64_t bytes_written_ = 0;
};

// The directory server `rank`'s cold store goes in: `shardps-cold-RANK`
// under `parent` (--cold-dir; "" : the working directory).
std::string ColdDirOf(const std::string& parent, uint32_t rank);

}  // namespace shardps
