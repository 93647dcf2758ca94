#include "server/snapshot/snapshot.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/stat.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include <rocksdb/options.h>
#include <rocksdb/sst_file_reader.h>
#include <rocksdb/sst_file_writer.h>

#include "common/base/clock.h"
#include "common/base/file.h"
#include "common/codec/big_endian.h"
#include "common/codec/wire.h"
#include "server/snapshot/snapshot_chain.h"

namespace shardps::snapshot {
namespace {

constexpr size_t kKeyBytes = 17;

void MakeKey(char* k, uint32_t table, uint32_t partition, uint64_t row) {
  k[0] = 'r';
  PutBE32(k + 1, table);
  PutBE32(k + 5, partition);
  PutBE64(k + 9, row);
}

rocksdb::Options SstOptions() {
  rocksdb::Options o;
  o.compression = rocksdb::kNoCompression;  // float data does not compress; speed matters
  return o;
}

bool SyncPath(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return false;
  bool ok = fsync(fd) == 0;
  close(fd);
  return ok;
}

bool FileSize(const std::string& path, uint64_t* size) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return false;
  *size = static_cast<uint64_t>(st.st_size);
  return true;
}

}  // namespace

std::string DirName(int64_t clock) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "snap-%012lld", static_cast<long long>(clock));
  return buf;
}

std::string ServerFileName(uint32_t server) { return "server-" + std::to_string(server) + ".sst"; }

const PartEntry* Manifest::FindPart(uint32_t table, uint32_t partition) const {
  for (const auto& p : parts)
    if (p.table == table && p.partition == partition) return &p;
  return nullptr;
}

const TableSpec* Manifest::FindTable(const std::string& name) const {
  for (const auto& t : tables)
    if (t.name == name) return &t;
  return nullptr;
}

bool Manifest::full() const {
  for (const auto& p : parts)
    if (!p.full()) return false;
  return true;
}

std::vector<int64_t> Manifest::bases() const {
  std::vector<int64_t> b;
  for (const auto& p : parts)
    if (!p.full()) b.push_back(p.base);
  std::sort(b.begin(), b.end());
  b.erase(std::unique(b.begin(), b.end()), b.end());
  return b;
}

uint64_t Manifest::bytes() const {
  uint64_t b = 0;
  for (const auto& f : files) b += f.bytes;
  return b;
}

Status FileChecksum(const std::string& path, uint64_t* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::BadMessage("cannot read '" + path + "'");
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  std::vector<char> buf(1 << 20);
  while (f) {
    f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    XXH3_64bits_update(st, buf.data(), static_cast<size_t>(f.gcount()));
  }
  const bool ok = f.eof();
  *out = XXH3_64bits_digest(st);
  if (*out == 0) *out = 1;  // 0 means "not recorded"
  XXH3_freeState(st);
  return ok ? Status::OK() : Status::BadMessage("error reading '" + path + "'");
}

struct ServerFileWriter::Impl {
  std::string path;
  uint32_t server = 0;
  rocksdb::SstFileWriter w{rocksdb::EnvOptions(), SstOptions()};
  bool any = false;
  std::vector<PartEntry> entries;
  XXH3_state_t* st = nullptr;  // the open part's checksum
  Status Put(const char* key, size_t kn, const char* v, size_t vn) {
    rocksdb::Status rs = w.Put(rocksdb::Slice(key, kn), rocksdb::Slice(v, vn));
    if (!rs.ok()) return Status::Internal("writing '" + path + "': " + rs.ToString());
    any = true;
    return Status::OK();
  }
};

ServerFileWriter::ServerFileWriter() : impl_(std::make_unique<Impl>()) {}
ServerFileWriter::~ServerFileWriter() {
  if (impl_->st) XXH3_freeState(impl_->st);
}

Status ServerFileWriter::Open(const std::string& path, uint32_t server) {
  impl_->path = path;
  impl_->server = server;
  rocksdb::Status rs = impl_->w.Open(path);
  if (!rs.ok()) return Status::Internal("cannot create snapshot file '" + path + "': " + rs.ToString());
  return Status::OK();
}

Status ServerFileWriter::PutAdmission(uint32_t table, uint32_t partition, const std::string& bytes) {
  // Their keys ('a', table, partition) sort before every row's ('r', ...).
  char akey[9];
  akey[0] = 'a';
  PutBE32(akey + 1, table);
  PutBE32(akey + 5, partition);
  return impl_->Put(akey, 9, bytes.data(), bytes.size());
}

void ServerFileWriter::BeginPart(uint32_t table, uint32_t partition, int64_t base) {
  if (!impl_->st) impl_->st = XXH3_createState();
  XXH3_64bits_reset(impl_->st);
  PartEntry e;
  e.table = table;
  e.partition = partition;
  e.server = impl_->server;
  e.base = base;
  impl_->entries.push_back(e);
}

Status ServerFileWriter::Add(const PartitionData& d) {
  PartEntry& e = impl_->entries.back();
  char key[kKeyBytes];
  const size_t vbytes = static_cast<size_t>(d.stride) * sizeof(float);
  size_t i = 0, j = 0;  // rows, deleted: merged in key order
  while (i < d.rows.size() || j < d.deleted.size()) {
    const bool row = j == d.deleted.size() || (i < d.rows.size() && d.rows[i] < d.deleted[j]);
    MakeKey(key, e.table, e.partition, row ? d.rows[i] : d.deleted[j]);
    const char* v = row ? reinterpret_cast<const char*>(d.values.data() + i * d.stride) : "";
    const size_t vn = row ? vbytes : 0;
    XXH3_64bits_update(impl_->st, key, kKeyBytes);
    XXH3_64bits_update(impl_->st, v, vn);
    SHARDPS_RETURN_IF_ERROR(impl_->Put(key, kKeyBytes, v, vn));
    if (row) {
      ++i;
      ++e.rows;
    } else {
      ++j;
      ++e.deleted;
    }
  }
  return Status::OK();
}

void ServerFileWriter::EndPart() { impl_->entries.back().checksum = XXH3_64bits_digest(impl_->st); }

Status ServerFileWriter::Finish(std::vector<PartEntry>* entries, uint64_t* bytes, uint64_t* file_checksum) {
  const std::string& path = impl_->path;
  // SstFileWriter refuses an empty file: mark an empty server file with
  // one key outside the row space.
  if (!impl_->any) SHARDPS_RETURN_IF_ERROR(impl_->Put("e", 1, "", 0));
  rocksdb::Status rs = impl_->w.Finish();
  if (!rs.ok()) return Status::Internal("finishing '" + path + "': " + rs.ToString());
  // Durable before the coordinator may write the manifest that names it.
  if (!SyncPath(path)) return Status::Internal("cannot sync '" + path + "' to disk");
  if (!FileSize(path, bytes)) return Status::Internal("cannot stat '" + path + "'");
  if (file_checksum) {
    Status s = FileChecksum(path, file_checksum);
    if (!s.ok()) return Status::Internal(s.message());
  }
  entries->insert(entries->end(), impl_->entries.begin(), impl_->entries.end());
  return Status::OK();
}

Status WriteServerFile(const std::string& path, uint32_t server, std::vector<PartitionData>& parts,
                       std::vector<PartEntry>* entries, uint64_t* bytes, uint64_t* file_checksum) {
  std::sort(parts.begin(), parts.end(), [](const PartitionData& a, const PartitionData& b) {
    return a.table != b.table ? a.table < b.table : a.partition < b.partition;
  });
  ServerFileWriter w;
  SHARDPS_RETURN_IF_ERROR(w.Open(path, server));
  for (const auto& p : parts)
    if (!p.admission.empty()) SHARDPS_RETURN_IF_ERROR(w.PutAdmission(p.table, p.partition, p.admission));
  for (const auto& p : parts) {
    w.BeginPart(p.table, p.partition, -1);
    SHARDPS_RETURN_IF_ERROR(w.Add(p));
    w.EndPart();
  }
  return w.Finish(entries, bytes, file_checksum);
}

Status WriteManifest(const std::string& snap_dir, const Manifest& m) {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<wire::TableSpec>> tables;
  for (const auto& t : m.tables) tables.push_back(wire::BuildTableSpec(fbb, t));
  std::vector<flatbuffers::Offset<wire::SnapshotFile>> files;
  for (const auto& f : m.files) files.push_back(wire::CreateSnapshotFile(fbb, f.server, fbb.CreateString(f.name), f.bytes, f.checksum));
  std::vector<flatbuffers::Offset<wire::SnapshotPart>> parts;
  for (const auto& p : m.parts)
    parts.push_back(wire::CreateSnapshotPart(fbb, p.table, p.partition, p.server, p.rows, p.checksum, p.base,
                                             p.deleted));
  auto root = wire::CreateManifest(fbb, 1, m.clock, m.unix_time_ms, static_cast<wire::Consistency>(m.consistency),
                                   m.staleness, m.num_servers, m.partitions, fbb.CreateVector(m.owner),
                                   fbb.CreateVector(tables), fbb.CreateVector(files), fbb.CreateVector(parts),
                                   m.work_pool, m.work_position);
  fbb.Finish(root);
  std::string data(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize());
  Status s = WriteFileAtomic(snap_dir + "/MANIFEST", data);
  if (s.ok() && !(SyncPath(snap_dir + "/MANIFEST") && SyncPath(snap_dir)))
    s = Status::Internal("cannot sync " + snap_dir + "/MANIFEST to disk");
  return s;
}

Status ReadManifest(const std::string& snap_dir, Manifest* m) {
  const std::string path = snap_dir + "/MANIFEST";
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::InvalidArgument("'" + snap_dir + "' has no MANIFEST: incomplete or not a snapshot");
  std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (data.empty()) return Status::BadMessage(path + " is corrupt (empty)");
  std::vector<uint64_t> aligned((data.size() + 7) / 8);
  std::memcpy(aligned.data(), data.data(), data.size());
  flatbuffers::Verifier v(reinterpret_cast<const uint8_t*>(aligned.data()), data.size());
  if (!v.VerifyBuffer<wire::Manifest>(nullptr))
    return Status::BadMessage(path + " is corrupt (not a valid manifest)");
  const auto* in = flatbuffers::GetRoot<wire::Manifest>(aligned.data());
  if (in->format() != 1)
    return Status::VersionMismatch(path + " has format " + std::to_string(in->format()) + ", this build reads 1");
  Manifest out;
  out.clock = in->clock();
  out.unix_time_ms = in->unix_time_ms();
  out.consistency = static_cast<Consistency>(in->consistency());
  out.staleness = in->staleness();
  out.num_servers = in->num_servers();
  out.partitions = in->partitions();
  out.work_pool = in->work_pool();
  out.work_position = in->work_position();
  if (in->partition_owner()) out.owner.assign(in->partition_owner()->begin(), in->partition_owner()->end());
  if (out.owner.size() != out.partitions) return Status::BadMessage(path + ": shard map does not cover every partition");
  if (in->tables())
    for (const auto* t : *in->tables()) {
      TableSpec spec;
      Status s = wire::DecodeTableSpec(t, &spec);
      if (!s.ok()) return Status::BadMessage(path + ": " + s.message());
      out.tables.push_back(spec);
    }
  if (in->files())
    for (const auto* fi : *in->files()) {
      // Files are read by this name: only server-<rank>.sst, never a path
      // out of the snapshot directory.
      out.files.push_back({fi->server(), fi->name() ? fi->name()->str() : "", fi->bytes(), fi->checksum()});
      if (out.files.back().name != ServerFileName(fi->server()))
        return Status::BadMessage(path + ": a file entry of server " + std::to_string(fi->server()) +
                                  " is not named " + ServerFileName(fi->server()));
    }
  if (in->parts())
    for (const auto* p : *in->parts()) {
      if (p->partition() >= out.partitions || p->server() >= out.num_servers)
        return Status::BadMessage(path + ": a partition entry is out of range");
      out.parts.push_back({p->table(), p->partition(), p->server(), p->rows(), p->checksum(), p->base(), p->deleted()});
      if (p->base() >= out.clock)
        return Status::BadMessage(path + ": a part of table " + std::to_string(p->table()) + " partition " +
                                  std::to_string(p->partition()) + " changes the snapshot at clock " +
                                  std::to_string(p->base()) + ", not an earlier one");
    }
  std::sort(out.files.begin(), out.files.end(), [](const FileEntry& a, const FileEntry& b) { return a.server < b.server; });
  *m = std::move(out);
  return Status::OK();
}

namespace {
// Iterates one (table, partition) in a server file; fn sees key/value.
Status ScanPartition(const std::string& path, uint32_t table, uint32_t partition, uint32_t stride,
                     const std::function<void(const char* key, const char* value)>& fn, uint64_t* rows,
                     uint64_t* deleted, uint64_t* checksum) {
  rocksdb::Options opts = SstOptions();
  rocksdb::SstFileReader reader(opts);
  rocksdb::Status rs = reader.Open(path);
  if (!rs.ok()) return Status::BadMessage("cannot open snapshot file '" + path + "': " + rs.ToString());
  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;
  std::unique_ptr<rocksdb::Iterator> it(reader.NewIterator(ro));
  char prefix[9];
  prefix[0] = 'r';
  PutBE32(prefix + 1, table);
  PutBE32(prefix + 5, partition);
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  *rows = *deleted = 0;
  const size_t vbytes = static_cast<size_t>(stride) * sizeof(float);
  for (it->Seek(rocksdb::Slice(prefix, 9)); it->Valid(); it->Next()) {
    rocksdb::Slice k = it->key(), v = it->value();
    if (k.size() != kKeyBytes || std::memcmp(k.data(), prefix, 9) != 0) break;
    if (v.size() != vbytes && !v.empty()) {
      XXH3_freeState(st);
      return Status::BadMessage("snapshot file '" + path + "': a row of table " + std::to_string(table) +
                                " partition " + std::to_string(partition) + " has " + std::to_string(v.size()) +
                                " bytes, expected " + std::to_string(vbytes));
    }
    XXH3_64bits_update(st, k.data(), k.size());
    XXH3_64bits_update(st, v.data(), v.size());
    if (fn) fn(k.data(), v.empty() ? nullptr : v.data());  // empty: a row recorded as gone
    ++*(v.empty() ? deleted : rows);
  }
  *checksum = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  if (!it->status().ok())
    return Status::BadMessage("snapshot file '" + path + "' is corrupt (table " + std::to_string(table) +
                              ", partition " + std::to_string(partition) + "): " + it->status().ToString());
  return Status::OK();
}

const TableSpec* TableById(const Manifest& m, uint32_t id) {
  for (const auto& t : m.tables)
    if (t.id == id) return &t;
  return nullptr;
}
}  // namespace

Status ForEachRow(const std::string& snap_dir, const Manifest& m, uint32_t table, uint32_t partition,
                  const std::function<void(uint64_t, const float*, uint32_t)>& fn) {
  const PartEntry* pe = m.FindPart(table, partition);
  const TableSpec* spec = TableById(m, table);
  if (!spec) return Status::UnknownTable("snapshot " + snap_dir + " has no table id " + std::to_string(table));
  if (!pe) return Status::OK();  // an empty partition (no rows) may be absent
  const uint32_t stride = RowStride(*spec);
  std::vector<float> row(stride);
  uint64_t rows, deleted, sum;
  const std::string path = snap_dir + "/" + ServerFileName(pe->server);
  Status s = ScanPartition(path, table, partition, stride, [&](const char* k, const char* v) {
    if (!v) {
      fn(GetBE64(k + 9), nullptr, stride);
    } else if (reinterpret_cast<uintptr_t>(v) % alignof(float) == 0) {
      fn(GetBE64(k + 9), reinterpret_cast<const float*>(v), stride);  // in place when aligned
    } else {
      std::memcpy(row.data(), v, stride * sizeof(float));
      fn(GetBE64(k + 9), row.data(), stride);
    }
  }, &rows, &deleted, &sum);
  if (!s.ok()) return s;
  if (rows != pe->rows || deleted != pe->deleted || sum != pe->checksum)
    return Status::BadMessage("snapshot " + snap_dir + ": table '" + spec->name + "' partition " +
                              std::to_string(partition) + " in " + ServerFileName(pe->server) +
                              " does not match its checksum");
  return Status::OK();
}

Status ReadAdmission(const std::string& snap_dir, const Manifest& m, uint32_t table, uint32_t partition,
                     std::string* out) {
  out->clear();
  const PartEntry* pe = m.FindPart(table, partition);
  if (!pe) return Status::OK();
  const std::string path = snap_dir + "/" + ServerFileName(pe->server);
  rocksdb::Options opts = SstOptions();
  rocksdb::SstFileReader reader(opts);
  rocksdb::Status rs = reader.Open(path);
  if (!rs.ok()) return Status::BadMessage("cannot open snapshot file '" + path + "': " + rs.ToString());
  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;
  std::unique_ptr<rocksdb::Iterator> it(reader.NewIterator(ro));
  char akey[9];
  akey[0] = 'a';
  PutBE32(akey + 1, table);
  PutBE32(akey + 5, partition);
  it->Seek(rocksdb::Slice(akey, 9));
  if (it->Valid() && it->key() == rocksdb::Slice(akey, 9)) out->assign(it->value().data(), it->value().size());
  if (!it->status().ok())
    return Status::BadMessage("snapshot file '" + path + "' is corrupt (admission sketch of table " +
                              std::to_string(table) + ", partition " + std::to_string(partition) +
                              "): " + it->status().ToString());
  return Status::OK();
}

Status Verify(const std::string& snap_dir, const Manifest& m) {
  for (const auto& f : m.files) {
    uint64_t size;
    if (!FileSize(snap_dir + "/" + f.name, &size)) return Status::BadMessage("snapshot " + snap_dir + ": file " + f.name + " is missing");
    if (size != f.bytes)
      return Status::BadMessage("snapshot " + snap_dir + ": file " + f.name + " has " + std::to_string(size) +
                                " bytes, the manifest says " + std::to_string(f.bytes));
    // Before RocksDB parses it: Debian's RocksDB asserts (aborts the
    // process) on some malformed files whose footer turns its block
    // checksums off.
    if (f.checksum != 0) {
      uint64_t sum = 0;
      Status s = FileChecksum(snap_dir + "/" + f.name, &sum);
      if (!s.ok()) return Status::BadMessage("snapshot " + snap_dir + ": " + s.message());
      if (sum != f.checksum)
        return Status::BadMessage("snapshot " + snap_dir + ": file " + f.name + " fails its whole-file checksum");
    }
  }
  // One pass over every partition, reading with RocksDB's block checksums
  // on and recomputing ours; one thread per server file.
  std::vector<Status> results(m.files.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < m.files.size(); ++i)
    threads.emplace_back([&, i] {
      for (const auto& p : m.parts) {
        if (p.server != m.files[i].server) continue;
        const TableSpec* spec = TableById(m, p.table);
        if (!spec) {
          results[i] = Status::BadMessage("snapshot " + snap_dir + ": partition of unknown table id " + std::to_string(p.table));
          return;
        }
        uint64_t rows, deleted, sum;
        Status s = ScanPartition(snap_dir + "/" + m.files[i].name, p.table, p.partition, RowStride(*spec), nullptr,
                                 &rows, &deleted, &sum);
        if (s.ok() && (rows != p.rows || deleted != p.deleted || sum != p.checksum))
          s = Status::BadMessage("snapshot " + snap_dir + ": table '" + spec->name + "' partition " +
                                 std::to_string(p.partition) + " (" + m.files[i].name + ") fails its checksum" +
                                 (rows != p.rows ? " (" + std::to_string(rows) + " rows, manifest says " + std::to_string(p.rows) + ")" : ""));
        if (!s.ok()) {
          results[i] = s;
          return;
        }
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& p : m.parts) {
    bool has_file = false;
    for (const auto& f : m.files) has_file |= f.server == p.server;
    if (!has_file) return Status::BadMessage("snapshot " + snap_dir + ": no file for server " + std::to_string(p.server));
  }
  for (const auto& r : results)
    if (!r.ok()) return r;
  return Status::OK();
}

Status List(const std::string& root, std::vector<Listing>* out) {
  DIR* d = opendir(root.c_str());
  if (!d) return Status::InvalidArgument("cannot read snapshot directory '" + root + "'");
  out->clear();
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.rfind("snap-", 0) != 0) continue;
    char* end;
    long long clock = std::strtoll(name.c_str() + 5, &end, 10);
    if (*end) continue;
    Listing l;
    l.dir = root + "/" + name;
    l.clock = clock;
    Manifest m;
    Status s = ReadManifest(l.dir, &m);
    l.complete = s.ok();
    if (s.ok()) {
      l.unix_time_ms = m.unix_time_ms;
      l.bytes = m.bytes();
      l.full = m.full();
      l.bases = m.bases();
    } else {
      l.problem = s.message();
    }
    out->push_back(l);
  }
  closedir(d);
  std::sort(out->begin(), out->end(), [](const Listing& a, const Listing& b) { return a.clock < b.clock; });
  return Status::OK();
}

Status FindNewestGood(const std::string& root, int64_t clock, std::string* dir, Manifest* m,
                      std::vector<std::string>* refused) {
  std::vector<Listing> all;
  Status s = List(root, &all);
  if (!s.ok()) return s;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (clock >= 0 && it->clock != clock) continue;
    if (!it->complete) {
      refused->push_back(it->dir + ": " + it->problem);
      continue;
    }
    // A snapshot of what changed is good only with every link of its chain.
    Manifest cand;
    Chain chain;
    s = ReadManifest(it->dir, &cand);
    if (s.ok()) s = chain.Open(it->dir, cand);
    if (s.ok()) s = VerifyChain(chain);
    if (!s.ok()) {
      refused->push_back(s.message());
      continue;
    }
    *dir = it->dir;
    *m = std::move(cand);
    return Status::OK();
  }
  return Status::InvalidArgument(clock >= 0 ? "no good snapshot at clock " + std::to_string(clock) + " in '" + root + "'"
                                            : "no complete, verified snapshot in '" + root + "'");
}

}  // namespace shardps::snapshot
