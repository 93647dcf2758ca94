#include "server/snapshot/snapshot_chain.h"

#include <sys/stat.h>

#include <algorithm>
#include <deque>
#include <set>

namespace shardps::snapshot {

std::string RootOf(const std::string& snap_dir) {
  std::string d = snap_dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  const size_t slash = d.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : d.substr(0, slash);
}

Status Chain::Open(const std::string& snap_dir) {
  Manifest m;
  SHARDPS_RETURN_IF_ERROR(ReadManifest(snap_dir, &m));
  return Open(snap_dir, std::move(m));
}

Status Chain::Open(const std::string& snap_dir, Manifest head) {
  snaps_.clear();
  head_clock_ = head.clock;
  const std::string root = RootOf(snap_dir);
  std::deque<int64_t> todo;
  for (int64_t b : head.bases()) todo.push_back(b);
  snaps_[head_clock_] = Snap{snap_dir, std::move(head)};
  while (!todo.empty()) {
    const int64_t clock = todo.front();
    todo.pop_front();
    if (snaps_.count(clock)) continue;
    Snap s{root + "/" + DirName(clock), {}};
    Status st = ReadManifest(s.dir, &s.m);
    if (!st.ok())
      return Status::BadMessage("snapshot " + snap_dir + " holds what changed since " + s.dir +
                                ", a link of its chain that cannot be read: " + st.message());
    if (s.m.clock != clock)
      return Status::BadMessage("snapshot " + snap_dir + ": its link " + s.dir + " is the snapshot at clock " +
                                std::to_string(s.m.clock));
    for (int64_t b : s.m.bases()) todo.push_back(b);
    snaps_[clock] = std::move(s);
  }
  return Status::OK();
}

Status Chain::Links(uint32_t table, uint32_t partition, std::vector<Link>* out) const {
  out->clear();
  const Snap* s = &head();
  const PartEntry* p = s->m.FindPart(table, partition);
  while (p) {
    out->push_back({s, p});
    if (p->full()) break;
    auto it = snaps_.find(p->base);
    if (it == snaps_.end()) return Status::Internal("chain of " + head().dir + " not opened");
    const Snap* base = &it->second;
    const PartEntry* bp = base->m.FindPart(table, partition);
    if (!bp)
      return Status::BadMessage("snapshot " + s->dir + ": table " + std::to_string(table) + " partition " +
                                std::to_string(partition) + " holds what changed since " + base->dir +
                                ", which has no part of it");
    s = base;
    p = bp;
  }
  std::reverse(out->begin(), out->end());
  return Status::OK();
}

Status VerifyChain(const Chain& c) {
  for (const auto& [clock, s] : c.snaps()) {
    Status st = Verify(s.dir, s.m);
    if (!st.ok()) {
      if (clock == c.head().m.clock) return st;
      return Status::BadMessage("snapshot " + c.head().dir + ": its chain's link " + s.dir +
                                " fails verification: " + st.message());
    }
  }
  std::vector<Chain::Link> links;
  for (const auto& p : c.head().m.parts) SHARDPS_RETURN_IF_ERROR(c.Links(p.table, p.partition, &links));
  return Status::OK();
}

Status ForEachChainRow(const Chain& c, uint32_t table, uint32_t partition,
                       const std::function<void(uint64_t, const float*, uint32_t)>& fn) {
  std::vector<Chain::Link> links;
  SHARDPS_RETURN_IF_ERROR(c.Links(table, partition, &links));
  if (links.empty()) return Status::OK();
  if (links.size() == 1) {
    return ForEachRow(links[0].snap->dir, links[0].snap->m, table, partition, [&](uint64_t row, const float* v, uint32_t n) {
      if (v) fn(row, v, n);
    });
  }
  std::map<uint64_t, std::vector<float>> rows;
  uint32_t stride = 0;
  for (const auto& l : links) {
    SHARDPS_RETURN_IF_ERROR(ForEachRow(l.snap->dir, l.snap->m, table, partition, [&](uint64_t row, const float* v, uint32_t n) {
      stride = n;
      if (v)
        rows[row].assign(v, v + n);
      else
        rows.erase(row);
    }));
  }
  for (const auto& [row, v] : rows) fn(row, v.data(), stride);
  return Status::OK();
}

Status Flatten(const Chain& c, const std::string& out_dir) {
  const Chain::Snap& head = c.head();
  Manifest m = head.m;
  Manifest existing;
  if (ReadManifest(out_dir, &existing).ok()) return Status::Conflict(out_dir + " holds a snapshot already: not overwritten");
  mkdir(out_dir.c_str(), 0755);
  m.files.clear();
  m.parts.clear();
  // One file per server file of the head, its partitions in key order.
  std::vector<PartEntry> parts = head.m.parts;
  std::sort(parts.begin(), parts.end(), [](const PartEntry& a, const PartEntry& b) {
    return a.server != b.server ? a.server < b.server
                                : (a.table != b.table ? a.table < b.table : a.partition < b.partition);
  });
  for (size_t i = 0; i < parts.size();) {
    const uint32_t server = parts[i].server;
    size_t j = i;
    while (j < parts.size() && parts[j].server == server) ++j;
    ServerFileWriter w;
    FileEntry f{server, ServerFileName(server), 0, 0};
    SHARDPS_RETURN_IF_ERROR(w.Open(out_dir + "/" + f.name, server));
    for (size_t k = i; k < j; ++k) {
      std::string sketch;
      SHARDPS_RETURN_IF_ERROR(ReadAdmission(head.dir, head.m, parts[k].table, parts[k].partition, &sketch));
      if (!sketch.empty()) SHARDPS_RETURN_IF_ERROR(w.PutAdmission(parts[k].table, parts[k].partition, sketch));
    }
    for (size_t k = i; k < j; ++k) {
      PartitionData d;
      SHARDPS_RETURN_IF_ERROR(ForEachChainRow(c, parts[k].table, parts[k].partition, [&](uint64_t row, const float* v, uint32_t n) {
        d.stride = n;
        d.rows.push_back(row);
        d.values.insert(d.values.end(), v, v + n);
      }));
      w.BeginPart(parts[k].table, parts[k].partition, -1);
      SHARDPS_RETURN_IF_ERROR(w.Add(d));
      w.EndPart();
    }
    SHARDPS_RETURN_IF_ERROR(w.Finish(&m.parts, &f.bytes, &f.checksum));
    m.files.push_back(f);
    i = j;
  }
  return WriteManifest(out_dir, m);
}

}  // namespace shardps::snapshot
