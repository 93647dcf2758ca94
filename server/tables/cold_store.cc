#include "server/tables/cold_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include "common/codec/big_endian.h"

namespace shardps {

namespace fs = std::filesystem;

namespace {

// The file that marks a directory as a cold store's (the only kind Open
// empties).
constexpr const char* kMarker = "SHARDPS_COLD_TIER";


struct Key {
  char b[16];
  Key(uint32_t table, uint32_t partition, uint64_t id) {
    PutBE32(b, table);
    PutBE32(b + 4, partition);
    PutBE64(b + 8, id);
  }
  rocksdb::Slice slice() const { return rocksdb::Slice(b, 16); }
};

Status Bad(const std::string& what, const rocksdb::Status& rs) {
  return Status::Internal("cold tier: " + what + ": " + rs.ToString());
}

}  // namespace

Status ColdStore::Failed(const std::string& what, const std::string& why) const {
  Status s = Status::Internal("cold tier " + dir_ + ": " + what + ": " + why);
  if (failure_.empty()) failure_ = s.message();
  return s;
}


struct ColdStore::Impl {
  std::unique_ptr<rocksdb::DB> db;
  int lock_fd = -1;  // the marker, locked (flock) while open
  rocksdb::WriteBatch batch;
  rocksdb::WriteOptions write;
  rocksdb::ReadOptions read;
};

ColdStore::ColdStore(std::string dir, std::unique_ptr<Impl> impl) : dir_(std::move(dir)), impl_(std::move(impl)) {}

Status ColdStore::Flush() {
  const rocksdb::Status rs = impl_->db->Flush(rocksdb::FlushOptions());
  return rs.ok() ? Status::OK() : Failed("flushing", rs.ToString());
}

ColdStore::~ColdStore() {
  if (!impl_) return;
  impl_->db.reset();
  std::error_code ec;
  fs::remove_all(dir_, ec);  // (the tier is not durable: nothing in it outlives the server)
  ::close(impl_->lock_fd);
}

std::string ColdDirOf(const std::string& parent, uint32_t rank) {
  std::error_code ec;
  const fs::path base = parent.empty() ? fs::current_path(ec) : fs::path(parent);
  return (base / ("shardps-cold-" + std::to_string(rank))).string();
}

Status ColdStore::CheckDir(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return Status::OK();
  if (!fs::is_directory(dir, ec)) return Status::InvalidArgument("cold tier: " + dir + " is not a directory");
  if (!fs::is_empty(dir, ec) && !fs::exists(fs::path(dir) / kMarker, ec))
    return Status::InvalidArgument("cold tier: " + dir +
                                   " is not empty and holds no cold tier (--cold-dir must name an empty or new "
                                   "directory; nothing in it is deleted)");
  return Status::OK();
}

Status ColdStore::Open(const std::string& dir, std::unique_ptr<ColdStore>* out) {
  std::error_code ec;
  SHARDPS_RETURN_IF_ERROR(CheckDir(dir));
  fs::create_directories(dir, ec);
  if (ec) return Status::Internal("cold tier: making " + dir + ": " + ec.message());
  // The marker, locked while the store is open: a tier a running server
  // uses is never taken; one left by a dead server is emptied.
  const std::string marker = (fs::path(dir) / kMarker).string();
  const int fd = ::open(marker.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Status::Internal("cold tier: opening " + marker + ": " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return Status::Unavailable("cold tier: " + dir + " is in use by another running server (--cold-dir: give each "
                               "server of a host its own, or leave it out)");
  }
  const std::string text = "The cold tier of a shardps server's tables (not durable: removed when the server stops).\n";
  if (::ftruncate(fd, 0) != 0 || ::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    ::close(fd);
    return Status::Internal("cold tier: writing " + marker + ": " + std::strerror(errno));
  }
  std::vector<fs::path> old;  // an earlier server's tier: its rows are not this job's
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename() != kMarker) old.push_back(e.path());
  for (const auto& p : old) {
    std::error_code rec;
    fs::remove_all(p, rec);
    if (rec) ec = rec;
  }
  if (ec) {
    ::close(fd);
    return Status::Internal("cold tier: emptying " + dir + ": " + ec.message());
  }
  rocksdb::Options o;
  o.create_if_missing = true;
  o.compression = rocksdb::kNoCompression;  // float rows do not compress
  o.write_buffer_size = 32 << 20;           // memory beside the hot tier: 2 x 32 MiB of memtables at most
  o.max_write_buffer_number = 2;
  o.max_background_jobs = 2;
  o.max_open_files = 256;
  // Universal compaction: each row is written about once more per merge of
  // a few similar files, not once per level (rows come and go; space, not
  // write bandwidth, is what a tier has to spare). Merged only from 16
  // sorted runs on, 4 at least at a time: a tiered server's disk is busy
  // with the rows' point reads and flushes, and merges at 4 runs (RocksDB's
  // default) wrote 3.2x what was flushed, against 1.0x (docs/performance.md,
  // "Tables larger than memory"). A miss costs a bloom probe per run.
  o.compaction_style = rocksdb::kCompactionStyleUniversal;
  o.level0_file_num_compaction_trigger = 16;
  o.level0_slowdown_writes_trigger = 48;
  o.level0_stop_writes_trigger = 64;
  o.compaction_options_universal.min_merge_width = 4;
  o.error_if_exists = true;               // (emptied above: an old tier is never read)
  o.avoid_flush_during_shutdown = true;   // (removed as it closes)
  o.keep_log_file_num = 2;
  rocksdb::BlockBasedTableOptions t;
  t.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  t.block_cache = rocksdb::NewLRUCache(16 << 20);
  t.cache_index_and_filter_blocks = false;
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
  auto impl = std::make_unique<Impl>();
  rocksdb::DB* db = nullptr;
  const std::string path = (fs::path(dir) / "rows").string();
  if (rocksdb::Status rs = rocksdb::DB::Open(o, path, &db); !rs.ok()) {
    ::close(fd);
    return Bad("opening " + path, rs);
  }
  impl->db.reset(db);
  impl->lock_fd = fd;
  impl->write.disableWAL = true;  // not durable: snapshots are
  impl->read.fill_cache = true;
  impl->read.verify_checksums = true;
  out->reset(new ColdStore(dir, std::move(impl)));
  return Status::OK();
}

Status ColdStore::MultiGet(uint32_t table, uint32_t partition, const uint64_t* ids, size_t n, size_t value_bytes,
                           uint8_t* out, std::vector<uint8_t>* found) {
  found->assign(n, 0);
  std::vector<Key> keys;
  keys.reserve(n);
  std::vector<rocksdb::Slice> slices;
  slices.reserve(n);
  for (size_t i = 0; i < n; ++i) keys.emplace_back(table, partition, ids[i]);
  for (const Key& k : keys) slices.push_back(k.slice());
  std::vector<rocksdb::PinnableSlice> values(n);
  std::vector<rocksdb::Status> st(n);
  impl_->db->MultiGet(impl_->read, impl_->db->DefaultColumnFamily(), n, slices.data(), values.data(), st.data(),
                      /*sorted_input=*/true);
  for (size_t i = 0; i < n; ++i) {
    if (st[i].IsNotFound()) continue;
    if (!st[i].ok()) return Failed("reading row " + std::to_string(ids[i]), st[i].ToString());
    if (values[i].size() != value_bytes)
      return Failed("reading row " + std::to_string(ids[i]),
                    std::to_string(values[i].size()) + " bytes, not " + std::to_string(value_bytes));
    std::memcpy(out + i * value_bytes, values[i].data(), value_bytes);
    (*found)[i] = 1;
    bytes_read_ += value_bytes;
  }
  return Status::OK();
}

bool ColdStore::Get(uint32_t table, uint32_t partition, uint64_t id, size_t value_bytes, uint8_t* out) const {
  const Key k(table, partition, id);
  rocksdb::PinnableSlice v;
  const rocksdb::Status rs = impl_->db->Get(impl_->read, impl_->db->DefaultColumnFamily(), k.slice(), &v);
  if (rs.IsNotFound()) return false;
  if (!rs.ok() || v.size() != value_bytes) {
    (void)Failed("reading row " + std::to_string(id),  // recorded in failure(); the caller sees false
                 rs.ok() ? std::to_string(v.size()) + " bytes, not " + std::to_string(value_bytes) : rs.ToString());
    return false;
  }
  std::memcpy(out, v.data(), value_bytes);
  bytes_read_ += value_bytes;
  return true;
}

void ColdStore::Put(uint32_t table, uint32_t partition, uint64_t id, const uint8_t* value, size_t value_bytes) {
  const Key k(table, partition, id);
  impl_->batch.Put(k.slice(), rocksdb::Slice(reinterpret_cast<const char*>(value), value_bytes));
  bytes_written_ += value_bytes;
}

void ColdStore::Delete(uint32_t table, uint32_t partition, uint64_t id) {
  const Key k(table, partition, id);
  impl_->batch.Delete(k.slice());
}

Status ColdStore::Commit() {
  if (impl_->batch.Count() == 0) return Status::OK();
  const rocksdb::Status rs = impl_->db->Write(impl_->write, &impl_->batch);
  impl_->batch.Clear();
  if (!rs.ok()) return Failed("writing rows", rs.ToString());
  return Status::OK();
}

uint64_t ColdStore::ScanImpl(uint32_t table, uint32_t partition, uint64_t from, bool* done, ScanFn fn,
                             void* ctx) const {
  const Key start(table, partition, from);
  char end[8];  // the partition's end: the iterator stops there (no walk past its tombstones)
  PutBE32(end, partition == UINT32_MAX ? table + 1 : table);
  PutBE32(end + 4, partition + 1);
  const rocksdb::Slice upper(end, 8);
  rocksdb::ReadOptions ro = impl_->read;
  ro.fill_cache = false;  // a sweep or a copy: no reason to keep its blocks
  ro.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(ro));
  *done = true;
  for (it->Seek(start.slice()); it->Valid(); it->Next()) {
    const rocksdb::Slice k = it->key();
    if (k.size() != 16 || std::memcmp(k.data(), start.b, 8) != 0) break;
    const uint64_t id = GetBE64(k.data() + 8);
    const rocksdb::Slice v = it->value();
    bytes_read_ += v.size();
    if (!fn(ctx, id, std::string_view(v.data(), v.size()))) {
      *done = id == UINT64_MAX;
      return id + 1;
    }
  }
  if (!it->status().ok()) (void)Failed("reading partition " + std::to_string(partition), it->status().ToString());
  return 0;
}

Status ColdStore::DropPartition(uint32_t table, uint32_t partition) {
  const Key begin(table, partition, 0);
  char end[16];
  PutBE32(end, table);
  PutBE32(end + 4, partition + 1);  // (partition + 1 of table, or table + 1's first when it wraps)
  if (partition == UINT32_MAX) PutBE32(end, table + 1);
  PutBE64(end + 8, 0);
  const rocksdb::Status rs = impl_->db->DeleteRange(impl_->write, impl_->db->DefaultColumnFamily(), begin.slice(),
                                                    rocksdb::Slice(end, 16));
  if (!rs.ok()) return Failed("removing partition " + std::to_string(partition), rs.ToString());
  return Status::OK();
}

uint64_t ColdStore::FreeBytes() const {
  struct statvfs s {};
  if (::statvfs(dir_.c_str(), &s) != 0) return 0;
  return static_cast<uint64_t>(s.f_bavail) * s.f_frsize;
}

}  // namespace shardps
