// shardps-snapshot: look inside snapshots, offline, on the files.
//
//   shardps-snapshot list DIR
//   shardps-snapshot info SNAP
//   shardps-snapshot show SNAP TABLE [--rows A:B | --ids 1,2,3]
//   shardps-snapshot diff SNAP_A SNAP_B
//   shardps-snapshot export SNAP TABLE --format npy|csv OUT
//   shardps-snapshot verify SNAP
// Every verb takes --json (except export) and --help. A snapshot of a live
// job is taken with `shardps-ctl snapshot COORDINATOR`.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>
#include <zmq.hpp>

#include "common/base/json.h"
#include "common/cluster/partition.h"
#include "common/codec/wire.h"
#include "server/snapshot/snapshot.h"
#include "server/snapshot/snapshot_chain.h"

namespace shardps {
namespace {

using snapshot::Manifest;

std::string Json(const std::string& s) { return JsonString(s); }
std::string Num(double v) {
  if (std::isnan(v)) return "null";
  if (std::isinf(v)) return v > 0 ? "1e999" : "-1e999";
  char b[64];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}
std::string Time(int64_t ms) {
  std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm;
  gmtime_r(&t, &tm);
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return b;
}
int Fail(const std::string& msg, int code = 1) {
  std::fprintf(stderr, "shardps-snapshot: %s\n", msg.c_str());
  return code;
}

Status Open(const std::string& dir, Manifest* m) {
  Status s = snapshot::ReadManifest(dir, m);
  if (s.ok()) return s;
  // A directory of snapshots, not one snapshot?
  std::vector<snapshot::Listing> all;
  if (snapshot::List(dir, &all).ok() && !all.empty())
    return Status::InvalidArgument("'" + dir + "' holds snapshots, it is not one: pass one of its snap-* directories");
  return s;
}

// The parameters (not optimizer state) of a table, by row, as the
// snapshot's chain makes them (snapshots of what changed).
Status LoadTable(const std::string& dir, const Manifest& m, const TableSpec& t, std::map<uint64_t, std::vector<float>>* out) {
  snapshot::Chain chain;
  SHARDPS_RETURN_IF_ERROR(chain.Open(dir, m));
  for (uint32_t p = 0; p < m.partitions; ++p) {
    Status s = snapshot::ForEachChainRow(chain, t.id, p, [&](uint64_t row, const float* v, uint32_t) {
      (*out)[row].assign(v, v + t.cols);
    });
    if (!s.ok()) return s;
  }
  return Status::OK();
}

// "full", or "changed since 10, 20" (the clocks of the snapshots it reads).
std::string Kind(bool full, const std::vector<int64_t>& bases) {
  if (full) return "full";
  std::string k = "changed since ";
  for (size_t i = 0; i < bases.size(); ++i) k += (i ? ", " : "") + std::to_string(bases[i]);
  return k;
}
std::string JsonClocks(const std::vector<int64_t>& v) {
  std::string o = "[";
  for (size_t i = 0; i < v.size(); ++i) o += (i ? ", " : "") + std::to_string(v[i]);
  return o + "]";
}

struct Stats {
  uint64_t rows = 0, values = 0, nan = 0, inf = 0;
  double min = INFINITY, max = -INFINITY, sum = 0, sq = 0;
  void Add(float v) {
    ++values;
    if (std::isnan(v)) { ++nan; return; }
    if (std::isinf(v)) { ++inf; return; }
    min = std::min(min, static_cast<double>(v));
    max = std::max(max, static_cast<double>(v));
    sum += v;
    sq += static_cast<double>(v) * v;
  }
};

int CmdList(const std::string& dir, bool json) {
  std::vector<snapshot::Listing> all;
  Status s = snapshot::List(dir, &all);
  if (!s.ok()) return Fail(s.message());
  if (json) {
    std::printf("[");
    for (size_t i = 0; i < all.size(); ++i) {
      const auto& l = all[i];
      std::printf("%s{\"id\": %lld, \"clock\": %lld, \"dir\": %s, \"complete\": %s, \"time\": %s, \"bytes\": %llu, "
                  "\"full\": %s, \"bases\": %s, \"problem\": %s}",
                  i ? ", " : "", static_cast<long long>(l.clock), static_cast<long long>(l.clock), Json(l.dir).c_str(),
                  l.complete ? "true" : "false", l.complete ? Json(Time(l.unix_time_ms)).c_str() : "null",
                  static_cast<unsigned long long>(l.bytes), l.complete && l.full ? "true" : "false",
                  JsonClocks(l.bases).c_str(), l.complete ? "null" : Json(l.problem).c_str());
    }
    std::printf("]\n");
    return 0;
  }
  if (all.empty()) {
    std::printf("no snapshots in %s\n", dir.c_str());
    return 0;
  }
  std::printf("%-14s %-22s %12s  %s\n", "id (clock)", "time (UTC)", "bytes", "status (full, or what changed since)");
  for (const auto& l : all)
    std::printf("%-14lld %-22s %12llu  %s\n", static_cast<long long>(l.clock), l.complete ? Time(l.unix_time_ms).c_str() : "-",
                static_cast<unsigned long long>(l.bytes),
                l.complete ? ("complete, " + Kind(l.full, l.bases)).c_str() : ("INCOMPLETE: " + l.problem).c_str());
  return 0;
}

std::string Describe(const TableSpec& t) {
  std::ostringstream os;
  os << ToString(t.optimizer) << " lr=" << t.lr << ", init " << ToString(t.init);
  if (t.init == InitKind::kConstant) os << "(" << t.init_a << ")";
  if (t.init == InitKind::kUniform || t.init == InitKind::kNormal) os << "(" << t.init_a << ", " << t.init_b << ")";
  return os.str();
}

int CmdInfo(const std::string& dir, bool json) {
  Manifest m;
  Status s = Open(dir, &m);
  if (!s.ok()) return Fail(s.message());
  std::map<uint32_t, std::pair<uint64_t, uint32_t>> per_table;  // rows, partitions
  for (const auto& p : m.parts) {
    per_table[p.table].first += p.rows;
    per_table[p.table].second += 1;
  }
  if (json) {
    std::printf("{\"clock\": %lld, \"time\": %s, \"consistency\": %s, \"staleness\": %u, \"servers\": %u, \"partitions\": %u, \"bytes\": %llu, \"work_pool\": %llu, \"work_position\": %llu, \"full\": %s, \"bases\": %s, \"tables\": [",
                static_cast<long long>(m.clock), Json(Time(m.unix_time_ms)).c_str(), Json(std::string(ToString(m.consistency))).c_str(),
                m.staleness, m.num_servers, m.partitions, static_cast<unsigned long long>(m.bytes()),
                static_cast<unsigned long long>(m.work_pool), static_cast<unsigned long long>(m.work_position),
                m.full() ? "true" : "false", JsonClocks(m.bases()).c_str());
    for (size_t i = 0; i < m.tables.size(); ++i) {
      const auto& t = m.tables[i];
      std::printf("%s{\"id\": %u, \"name\": %s, \"kind\": %s, \"rows\": %llu, \"cols\": %u, \"optimizer\": %s, \"lr\": %s, \"init\": %s, \"stored_rows\": %llu, \"stored_partitions\": %u}",
                  i ? ", " : "", t.id, Json(t.name).c_str(), Json(std::string(ToString(t.kind))).c_str(),
                  static_cast<unsigned long long>(t.rows), t.cols, Json(std::string(ToString(t.optimizer))).c_str(), Num(t.lr).c_str(),
                  Json(std::string(ToString(t.init))).c_str(), static_cast<unsigned long long>(per_table[t.id].first), per_table[t.id].second);
    }
    std::printf("], \"files\": [");
    for (size_t i = 0; i < m.files.size(); ++i)
      std::printf("%s{\"server\": %u, \"name\": %s, \"bytes\": %llu}", i ? ", " : "", m.files[i].server, Json(m.files[i].name).c_str(),
                  static_cast<unsigned long long>(m.files[i].bytes));
    std::printf("]}\n");
    return 0;
  }
  std::printf("snapshot %s\n  clock %lld, written %s, %s consistency", dir.c_str(), static_cast<long long>(m.clock),
              Time(m.unix_time_ms).c_str(), std::string(ToString(m.consistency)).c_str());
  if (m.consistency == Consistency::kBounded) std::printf(" (s=%u)", m.staleness);
  std::printf("\n  %u servers, %u virtual partitions, %llu bytes; %s\n", m.num_servers, m.partitions,
              static_cast<unsigned long long>(m.bytes()), Kind(m.full(), m.bases()).c_str());
  if (m.work_pool > 0)
    std::printf("  training resumes in epoch %llu after its first %llu examples\n",
                static_cast<unsigned long long>(m.work_pool), static_cast<unsigned long long>(m.work_position));
  std::printf("\n");
  std::printf("  %-20s %-7s %-16s %12s %6s  %s\n", "table", "kind", "shape", "rows stored", "parts", "optimizer, initializer");
  for (const auto& t : m.tables) {
    std::string shape = t.kind == TableKind::kDense ? std::to_string(t.rows) + " x " + std::to_string(t.cols) : "? x " + std::to_string(t.cols);
    std::printf("  %-20s %-7s %-16s %12llu %6u  %s\n", t.name.c_str(), std::string(ToString(t.kind)).c_str(), shape.c_str(),
                static_cast<unsigned long long>(per_table[t.id].first), per_table[t.id].second, Describe(t).c_str());
  }
  std::printf("\n  %-8s %-20s %12s\n", "server", "file", "bytes");
  for (const auto& f : m.files) std::printf("  %-8u %-20s %12llu\n", f.server, f.name.c_str(), static_cast<unsigned long long>(f.bytes));
  return 0;
}

int CmdShow(const std::string& dir, const std::string& table, const std::string& rows_arg, const std::string& ids_arg, bool json,
            int limit) {
  Manifest m;
  Status s = Open(dir, &m);
  if (!s.ok()) return Fail(s.message());
  const TableSpec* t = m.FindTable(table);
  if (!t) {
    std::string known;
    for (const auto& x : m.tables) known += (known.empty() ? "" : ", ") + x.name;
    return Fail("snapshot has no table '" + table + "' (tables: " + known + ")");
  }
  std::map<uint64_t, std::vector<float>> data;
  s = LoadTable(dir, m, *t, &data);
  if (!s.ok()) return Fail(s.message());
  Stats st;
  for (const auto& [row, v] : data) {
    ++st.rows;
    for (float x : v) st.Add(x);
  }
  std::vector<uint64_t> pick;
  if (!rows_arg.empty()) {
    uint64_t a, b;
    char colon;
    std::istringstream is(rows_arg);
    if (!(is >> a >> colon >> b) || colon != ':' || a >= b || !is.eof())
      return Fail("--rows wants A:B with A < B, got '" + rows_arg + "'", 2);
    for (uint64_t r = a; r < b; ++r) pick.push_back(r);
  } else if (!ids_arg.empty()) {
    std::istringstream is(ids_arg);
    std::string item;
    while (std::getline(is, item, ',')) {
      char* end;
      unsigned long long v = std::strtoull(item.c_str(), &end, 10);
      if (item.empty() || *end) return Fail("--ids wants comma-separated ids, got '" + item + "'", 2);
      pick.push_back(v);
    }
  } else {
    for (const auto& [row, v] : data) {
      if (static_cast<int>(pick.size()) >= limit) break;
      pick.push_back(row);
    }
  }
  const double n = static_cast<double>(st.values - st.nan - st.inf);
  const double mean = n > 0 ? st.sum / n : NAN, l2 = std::sqrt(st.sq);
  if (json) {
    std::printf("{\"table\": %s, \"rows\": %llu, \"cols\": %u, \"stats\": {\"min\": %s, \"max\": %s, \"mean\": %s, \"l2\": %s, \"nan\": %llu, \"inf\": %llu}, \"values\": {",
                Json(t->name).c_str(), static_cast<unsigned long long>(st.rows), t->cols, Num(st.min).c_str(), Num(st.max).c_str(),
                Num(mean).c_str(), Num(l2).c_str(), static_cast<unsigned long long>(st.nan), static_cast<unsigned long long>(st.inf));
    bool first = true;
    for (uint64_t r : pick) {
      auto it = data.find(r);
      if (it == data.end()) continue;
      std::printf("%s\"%llu\": [", first ? "" : ", ", static_cast<unsigned long long>(r));
      for (size_t j = 0; j < it->second.size(); ++j) std::printf("%s%s", j ? ", " : "", Num(it->second[j]).c_str());
      std::printf("]");
      first = false;
    }
    std::printf("}}\n");
    return 0;
  }
  std::printf("table '%s': %llu rows x %u cols\n  min %.6g  max %.6g  mean %.6g  L2 %.6g  NaN %llu  Inf %llu\n\n", t->name.c_str(),
              static_cast<unsigned long long>(st.rows), t->cols, st.min, st.max, mean, l2, static_cast<unsigned long long>(st.nan),
              static_cast<unsigned long long>(st.inf));
  for (uint64_t r : pick) {
    auto it = data.find(r);
    if (it == data.end()) {
      std::printf("  %-12llu (not stored)\n", static_cast<unsigned long long>(r));
      continue;
    }
    std::printf("  %-12llu", static_cast<unsigned long long>(r));
    for (size_t j = 0; j < it->second.size() && j < 8; ++j) std::printf(" %10.6g", it->second[j]);
    if (it->second.size() > 8) std::printf(" ... (%zu more)", it->second.size() - 8);
    std::printf("\n");
  }
  return 0;
}

int CmdDiff(const std::string& a, const std::string& b, bool json) {
  Manifest ma, mb;
  Status s = Open(a, &ma);
  if (!s.ok()) return Fail(s.message());
  s = Open(b, &mb);
  if (!s.ok()) return Fail(s.message());
  std::vector<std::string> names;
  for (const auto& t : ma.tables) names.push_back(t.name);
  for (const auto& t : mb.tables)
    if (!ma.FindTable(t.name)) names.push_back(t.name);
  if (json) std::printf("{\"a\": %s, \"b\": %s, \"tables\": [", Json(a).c_str(), Json(b).c_str());
  else std::printf("%-20s %14s %14s %10s %10s\n", "table", "max |a-b|", "L2(a-b)", "only in a", "only in b");
  bool first = true;
  for (const auto& name : names) {
    const TableSpec* ta = ma.FindTable(name);
    const TableSpec* tb = mb.FindTable(name);
    std::map<uint64_t, std::vector<float>> da, db;
    if (ta && !(s = LoadTable(a, ma, *ta, &da)).ok()) return Fail(s.message());
    if (tb && !(s = LoadTable(b, mb, *tb, &db)).ok()) return Fail(s.message());
    double maxd = 0, sq = 0;
    uint64_t only_a = 0, only_b = 0;
    bool shape_differs = ta && tb && ta->cols != tb->cols;
    for (const auto& [row, va] : da) {
      auto it = db.find(row);
      if (it == db.end()) { ++only_a; continue; }
      if (shape_differs) continue;
      for (size_t j = 0; j < va.size(); ++j) {
        double d = std::fabs(static_cast<double>(va[j]) - it->second[j]);
        maxd = std::max(maxd, d);
        sq += d * d;
      }
    }
    for (const auto& [row, vb] : db)
      if (!da.count(row)) ++only_b;
    if (json) {
      std::printf("%s{\"table\": %s, \"in_a\": %s, \"in_b\": %s, \"max_abs_diff\": %s, \"l2_diff\": %s, \"rows_only_in_a\": %llu, \"rows_only_in_b\": %llu, \"cols_differ\": %s}",
                  first ? "" : ", ", Json(name).c_str(), ta ? "true" : "false", tb ? "true" : "false", Num(maxd).c_str(),
                  Num(std::sqrt(sq)).c_str(), static_cast<unsigned long long>(only_a), static_cast<unsigned long long>(only_b),
                  shape_differs ? "true" : "false");
    } else {
      std::printf("%-20s %14.6g %14.6g %10llu %10llu%s%s\n", name.c_str(), maxd, std::sqrt(sq), static_cast<unsigned long long>(only_a),
                  static_cast<unsigned long long>(only_b), !ta ? "  (only in b)" : !tb ? "  (only in a)" : "",
                  shape_differs ? "  (cols differ)" : "");
    }
    first = false;
  }
  if (json) std::printf("]}\n");
  return 0;
}

// NumPy .npy version 1.0.
bool WriteNpy(const std::string& path, const char* descr, const std::vector<uint64_t>& shape, const void* data, size_t bytes) {
  std::string sh = "(";
  for (size_t i = 0; i < shape.size(); ++i) sh += std::to_string(shape[i]) + (shape.size() == 1 ? "," : i + 1 < shape.size() ? ", " : "");
  sh += ")";
  std::string header = "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': " + sh + ", }";
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return false;
  f.write("\x93NUMPY\x01\x00", 8);
  const uint16_t len = static_cast<uint16_t>(header.size());
  f.put(static_cast<char>(len & 0xff));
  f.put(static_cast<char>(len >> 8));
  f << header;
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  return f.good();
}

int CmdExport(const std::string& dir, const std::string& table, const std::string& format, const std::string& out) {
  Manifest m;
  Status s = Open(dir, &m);
  if (!s.ok()) return Fail(s.message());
  const TableSpec* t = m.FindTable(table);
  if (!t) return Fail("snapshot has no table '" + table + "'");
  std::map<uint64_t, std::vector<float>> data;
  s = LoadTable(dir, m, *t, &data);
  if (!s.ok()) return Fail(s.message());
  std::vector<uint64_t> ids;
  std::vector<float> values;
  for (const auto& [row, v] : data) {
    ids.push_back(row);
    values.insert(values.end(), v.begin(), v.end());
  }
  if (t->kind == TableKind::kDense && ids.size() != t->rows)
    return Fail("snapshot holds " + std::to_string(ids.size()) + " of " + std::to_string(t->rows) + " rows of '" + table + "'");
  if (format == "npy") {
    if (!WriteNpy(out, "<f4", {ids.size(), t->cols}, values.data(), values.size() * 4)) return Fail("cannot write '" + out + "'");
    if (t->kind == TableKind::kSparse) {
      const std::string idp = out.size() > 4 && out.substr(out.size() - 4) == ".npy" ? out.substr(0, out.size() - 4) + ".ids.npy" : out + ".ids.npy";
      if (!WriteNpy(idp, "<u8", {ids.size()}, ids.data(), ids.size() * 8)) return Fail("cannot write '" + idp + "'");
      std::printf("wrote %s (%zu x %u float32) and %s (the ids)\n", out.c_str(), ids.size(), t->cols, idp.c_str());
    } else {
      std::printf("wrote %s (%zu x %u float32)\n", out.c_str(), ids.size(), t->cols);
    }
    return 0;
  }
  std::ofstream f(out, std::ios::trunc);
  if (!f) return Fail("cannot write '" + out + "'");
  f << (t->kind == TableKind::kDense ? "row" : "id");
  for (uint32_t j = 0; j < t->cols; ++j) f << ",c" << j;
  f << "\n";
  char b[32];
  for (size_t i = 0; i < ids.size(); ++i) {
    f << ids[i];
    for (uint32_t j = 0; j < t->cols; ++j) {
      std::snprintf(b, sizeof b, ",%.9g", values[i * t->cols + j]);
      f << b;
    }
    f << "\n";
  }
  if (!f.good()) return Fail("write to '" + out + "' failed");
  std::printf("wrote %s (%zu rows)\n", out.c_str(), ids.size());
  return 0;
}

int CmdVerify(const std::string& dir, bool json) {
  // The snapshot and every snapshot of its chain (snapshots of what changed).
  Manifest m;
  snapshot::Chain chain;
  Status s = Open(dir, &m);
  if (s.ok()) s = chain.Open(dir, m);
  if (s.ok()) s = snapshot::VerifyChain(chain);
  const size_t links = chain.snaps().empty() ? 0 : chain.snaps().size() - 1;
  if (json) {
    std::printf("{\"snapshot\": %s, \"ok\": %s, \"partitions\": %zu, \"files\": %zu, \"chain\": %zu, \"error\": %s}\n",
                Json(dir).c_str(), s.ok() ? "true" : "false", m.parts.size(), m.files.size(), links,
                s.ok() ? "null" : Json(s.message()).c_str());
  } else if (s.ok()) {
    std::printf("OK: %s: %zu partitions in %zu files verified%s\n", dir.c_str(), m.parts.size(), m.files.size(),
                links ? (", with the " + std::to_string(links) + " earlier snapshots it reads").c_str() : "");
  } else {
    std::fprintf(stderr, "FAILED: %s\n", s.message().c_str());
  }
  return s.ok() ? 0 : 1;
}

int CmdFlatten(const std::string& dir, const std::string& out) {
  Manifest m;
  snapshot::Chain chain;
  Status s = Open(dir, &m);
  if (s.ok()) s = chain.Open(dir, m);
  if (s.ok()) s = snapshot::VerifyChain(chain);
  if (s.ok()) s = snapshot::Flatten(chain, out);
  Manifest written;
  if (s.ok()) s = snapshot::ReadManifest(out, &written);
  if (s.ok()) s = snapshot::Verify(out, written);
  if (!s.ok()) return Fail(s.message());
  std::printf("wrote %s: the model of %s (%zu snapshots read) as one full snapshot, %llu bytes\n", out.c_str(),
              dir.c_str(), chain.snaps().size(), static_cast<unsigned long long>(written.bytes()));
  return 0;
}

}  // namespace
}  // namespace shardps

int main(int argc, char** argv) {
  using namespace shardps;
  CLI::App app{"shardps-snapshot: look inside shardps snapshots (offline, on the files)"};
  app.require_subcommand(1);
  bool json = false;
  std::string dir, dir_b, table, rows, ids, format, out;
  int limit = 10;
  auto* list = app.add_subcommand("list", "snapshots in DIR: id, clock, time, size, complete or not, full or what changed since which");
  list->add_option("DIR", dir, "snapshot directory (--snapshot-dir of the job)")->required();
  list->add_flag("--json", json, "JSON output");
  auto* info = app.add_subcommand("info", "tables (kind, shape, optimizer, initializer), servers, partitions, sizes");
  info->add_option("SNAP", dir, "one snapshot (a snap-* directory)")->required();
  info->add_flag("--json", json, "JSON output");
  auto* show = app.add_subcommand("show", "values of a table, with summary statistics");
  show->add_option("SNAP", dir)->required();
  show->add_option("TABLE", table)->required();
  auto* rows_opt = show->add_option("--rows", rows, "rows A:B (dense row ids)");
  show->add_option("--ids", ids, "comma-separated row or sparse ids")->excludes(rows_opt);
  show->add_option("--limit", limit, "rows shown without --rows/--ids")->check(CLI::Range(0, 1000000))->capture_default_str();
  show->add_flag("--json", json, "JSON output");
  auto* diff = app.add_subcommand("diff", "per table: max |a-b|, L2(a-b), rows only in one");
  diff->add_option("SNAP_A", dir)->required();
  diff->add_option("SNAP_B", dir_b)->required();
  diff->add_flag("--json", json, "JSON output");
  auto* exp = app.add_subcommand("export", "a table as a NumPy .npy (sparse: plus OUT.ids.npy) or CSV file");
  exp->add_option("SNAP", dir)->required();
  exp->add_option("TABLE", table)->required();
  exp->add_option("--format", format, "npy | csv")->required()->check(CLI::IsMember({"npy", "csv"}));
  exp->add_option("OUT", out, "output file")->required();
  auto* flat = app.add_subcommand("flatten", "write a snapshot and the snapshots it reads as one full snapshot in OUT");
  flat->add_option("SNAP", dir)->required();
  flat->add_option("OUT", out, "a new snapshot directory (snap-<clock> to restore from it)")->required();
  auto* verify = app.add_subcommand("verify", "recompute every checksum; exit 0 only if all hold");
  verify->add_option("SNAP", dir)->required();
  verify->add_flag("--json", json, "JSON output");
  CLI11_PARSE(app, argc, argv);
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (*list) return CmdList(dir, json);
  if (*info) return CmdInfo(dir, json);
  if (*show) return CmdShow(dir, table, rows, ids, json, limit);
  if (*diff) return CmdDiff(dir, dir_b, json);
  if (*exp) return CmdExport(dir, table, format, out);
  if (*verify) return CmdVerify(dir, json);
  if (*flat) return CmdFlatten(dir, out);
  return 2;
}
