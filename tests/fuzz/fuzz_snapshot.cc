// Fuzz target: the snapshot reader, manifest and SST, through the path a
// restore takes: the coordinator's PrepareRestore (snapshot::List,
// ReadManifest, Verify: every file's size, RocksDB's block checksums and
// the per-partition XXH3 checksums; the table ids) and then a server's
// ApplyCluster with restore_from set (SnapshotRows::Covers and Fill:
// ForEachRow over the SST, each row checked against its partition, Import).
//
// Each input is written as one snapshot directory, ROOT/snap-000000000005/
// (ROOT a temp dir made once per process, emptied for each input):
//   byte 0: bit 0 write the MANIFEST (else the snapshot is incomplete);
//           bit 1 fix up the manifest after writing the files: each part's
//           row count and checksum, each file's size and each structured
//           file's whole-file checksum recomputed from what was written (so
//           inputs get past Verify to the restore, as a fuzzer cannot forge
//           a hash); bit 2 restore onto 2 servers
//           (this one, rank 0, holds half the partitions), else 1
//   frame: the MANIFEST's bytes (a FlatBuffers Manifest)
//   frame: server-0.sst, frame: server-1.sst (absent: no file). A file's
//     first byte 0 means the rest is the file's raw bytes; anything else:
//     the rest is rows, each [u8 table][u8 partition][u64 row LE][u8 n]
//     [n floats], written with RocksDB's SstFileWriter in key order
//     (duplicates dropped) in the snapshot key format (server/snapshot/snapshot.h).
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <rocksdb/options.h>
#include <rocksdb/sst_file_writer.h>

#include "common/base/log.h"
#include "server/coordinator/coordinator.h"
#include "server/server.h"
#include "server/snapshot/snapshot.h"
#include "tests/fuzz/fuzz_input.h"

namespace shardps {

class CoordinatorFuzzAccess {
 public:
  static Status Prepare(Coordinator& c, ClusterView* v) {
    Status s = c.PrepareRestore();
    if (!s.ok()) return s;
    *v = c.View();
    v->map = ShardMap::Contiguous(c.opts_.partitions, c.opts_.num_servers, 1);
    return Status::OK();
  }
};

class ServerFuzzAccess {
 public:
  static void Restore(zmq::context_t& ctx, const ClusterView& v) {
    ServerOptions o;
    o.coordinator = "inproc://shardps-fuzz-nobody";
    o.memory_budget = 8ull << 20;
    Server s(ctx, o);
    s.data_.set(zmq::sockopt::linger, 0);
    s.coord_.set(zmq::sockopt::linger, 0);
    s.rank_ = 0;
    s.ApplyCluster(v);
    if (s.TableBytes() > s.opts_.memory_budget) std::abort();
  }
};

namespace {

zmq::context_t& Context() {
  static zmq::context_t ctx(1);
  return ctx;
}

void Clear(const std::string& dir) {
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != "..") unlink((dir + "/" + n).c_str());
    }
    closedir(d);
  }
}

void WriteRaw(const std::string& path, std::string_view bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void PutBe(char* p, uint64_t v, int n) {
  for (int i = n - 1; i >= 0; --i, v >>= 8) p[i] = static_cast<char>(v & 0xff);
}

// Rows of a structured file, by key (17 bytes: 'r', table, partition, row).
using Rows = std::map<std::string, std::string>;

Rows ParseRows(fuzz::Reader in) {
  Rows rows;
  while (!in.empty() && rows.size() < 4096) {
    std::string key(17, '\0');
    key[0] = 'r';
    PutBe(&key[1], in.U8(), 4);
    PutBe(&key[5], in.U8(), 4);
    uint64_t row = 0;
    for (int i = 0; i < 8; ++i) row |= static_cast<uint64_t>(in.U8()) << (8 * i);
    PutBe(&key[9], row, 8);
    std::string value;
    const size_t n = in.U8();
    for (size_t i = 0; i < n * 4 && !in.empty(); ++i) value.push_back(static_cast<char>(in.U8()));
    rows.emplace(std::move(key), std::move(value));
  }
  return rows;
}

void WriteRows(const std::string& path, const Rows& rows) {
  rocksdb::Options opts;
  opts.compression = rocksdb::kNoCompression;
  rocksdb::SstFileWriter w(rocksdb::EnvOptions(), opts);
  if (!w.Open(path).ok()) std::abort();
  for (const auto& [k, v] : rows)
    if (!w.Put(k, v).ok()) std::abort();
  if (rows.empty() && !w.Put("e", "").ok()) std::abort();  // as WriteServerFile marks an empty file
  if (!w.Finish().ok()) std::abort();
}

// The fix-up: row counts, checksums and sizes as the files hold them.
void FixManifest(const std::string& dir, const std::map<uint32_t, Rows>& files) {
  snapshot::Manifest m;
  if (!snapshot::ReadManifest(dir, &m).ok()) return;
  for (auto& p : m.parts) {
    auto f = files.find(p.server);
    if (f == files.end()) continue;
    char prefix[9];
    prefix[0] = 'r';
    PutBe(prefix + 1, p.table, 4);
    PutBe(prefix + 5, p.partition, 4);
    XXH3_state_t* st = XXH3_createState();
    XXH3_64bits_reset(st);
    p.rows = 0;
    for (auto it = f->second.lower_bound(std::string(prefix, 9));
         it != f->second.end() && it->first.compare(0, 9, prefix, 9) == 0; ++it) {
      XXH3_64bits_update(st, it->first.data(), it->first.size());
      XXH3_64bits_update(st, it->second.data(), it->second.size());
      ++p.rows;
    }
    p.checksum = XXH3_64bits_digest(st);
    XXH3_freeState(st);
  }
  for (auto& f : m.files) {
    std::ifstream in(dir + "/" + f.name, std::ios::binary | std::ios::ate);
    if (in) f.bytes = static_cast<uint64_t>(in.tellg());
    // Whole-file checksums only for the files written by SstFileWriter: a
    // raw file must match the checksum the input gave.
    if (files.count(f.server) && !snapshot::FileChecksum(dir + "/" + f.name, &f.checksum).ok()) std::abort();
  }
  (void)snapshot::WriteManifest(dir, m);
}

}  // namespace
}  // namespace shardps

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardps;
  static const bool quiet = [] {
    if (!getenv("SHARDPS_FUZZ_LOG")) SetLogLevel(static_cast<LogLevel>(static_cast<int>(LogLevel::kError) + 1));
    return true;
  }();
  (void)quiet;
  const std::string dir = fuzz::TempDir("snapshot") + "/" + snapshot::DirName(5);
  mkdir(dir.c_str(), 0755);
  Clear(dir);

  fuzz::Reader in(data, size);
  const uint8_t cfg = in.U8();
  const std::string_view manifest = in.Frame();
  if (cfg & 1) WriteRaw(dir + "/MANIFEST", manifest);
  std::map<uint32_t, Rows> structured;
  for (uint32_t server = 0; server < 2 && !in.empty(); ++server) {
    const std::string_view file = in.Frame();
    const std::string path = dir + "/" + snapshot::ServerFileName(server);
    if (!file.empty() && file[0] == 0) {
      WriteRaw(path, file.substr(1));
    } else {
      Rows rows = ParseRows(fuzz::Reader(reinterpret_cast<const uint8_t*>(file.data()) + (file.empty() ? 0 : 1),
                                         file.empty() ? 0 : file.size() - 1));
      WriteRows(path, rows);
      structured.emplace(server, std::move(rows));
    }
  }
  if ((cfg & 3) == 3) FixManifest(dir, structured);
  // A raw file the manifest records no whole-file checksum for (as in
  // snapshots written before manifests had them) would be parsed by
  // RocksDB alone, and Debian's RocksDB asserts on some malformed files
  // (docs/fuzzing.md): not ours to fuzz.
  {
    snapshot::Manifest m;
    if (snapshot::ReadManifest(dir, &m).ok())
      for (const auto& f : m.files)
        if (f.checksum == 0 && f.server < 2 && !structured.count(f.server)) return 0;
  }

  // The coordinator chooses and checks the snapshot; a server restores it.
  CoordinatorOptions o;
  o.num_servers = (cfg & 4) ? 2 : 1;
  o.num_workers = 1;
  o.partitions = 8;
  o.snapshot_dir = fuzz::TempDir("snapshot");
  o.restore = true;
  Coordinator c(Context(), o);
  ClusterView v;
  if (!CoordinatorFuzzAccess::Prepare(c, &v).ok()) return 0;
  ServerFuzzAccess::Restore(Context(), v);
  return 0;
}
