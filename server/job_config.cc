#include "server/job_config.h"

#include <fstream>
#include <set>
#include <sstream>

#include <toml++/toml.h>

namespace shardps {
namespace {

std::string Where(std::string_view src, const toml::node* n) {
  std::string s(src);
  if (n && n->source().begin) s += ":" + std::to_string(n->source().begin.line);
  return s;
}

template <typename T>
Status GetInt(const toml::table& t, std::string_view key, std::string_view src, T lo, T hi, T* out) {
  const toml::node* n = t.get(key);
  if (!n) return Status::OK();
  auto v = n->value<int64_t>();
  if (!v || !n->is_integer())
    return Status::InvalidArgument(Where(src, n) + ": '" + std::string(key) + "' must be an integer");
  if (*v < static_cast<int64_t>(lo) || static_cast<uint64_t>(*v) > static_cast<uint64_t>(hi))
    return Status::InvalidArgument(Where(src, n) + ": '" + std::string(key) + "' = " +
                                   std::to_string(*v) + " is out of range [" + std::to_string(lo) +
                                   ", " + std::to_string(hi) + "]");
  *out = static_cast<T>(*v);
  return Status::OK();
}

Status GetFloat(const toml::table& t, std::string_view key, std::string_view src, float* out) {
  const toml::node* n = t.get(key);
  if (!n) return Status::OK();
  auto v = n->value<double>();
  if (!v) return Status::InvalidArgument(Where(src, n) + ": '" + std::string(key) + "' must be a number");
  *out = static_cast<float>(*v);
  return Status::OK();
}

template <typename E>
Status GetEnum(const toml::table& t, std::string_view key, std::string_view src, E* out) {
  const toml::node* n = t.get(key);
  if (!n) return Status::OK();
  auto v = n->value<std::string>();
  if (!v) return Status::InvalidArgument(Where(src, n) + ": '" + std::string(key) + "' must be a string");
  Status s = Parse(*v, out);
  if (!s.ok()) return Status::InvalidArgument(Where(src, n) + ": " + s.message());
  return Status::OK();
}

Status CheckKeys(const toml::table& t, std::string_view src, std::string_view section,
                 const std::set<std::string_view>& known) {
  for (const auto& [k, v] : t)
    if (!known.count(k.str()))
      return Status::InvalidArgument(Where(src, &v) + ": unknown key '" + std::string(k.str()) +
                                     "' in [" + std::string(section) + "]");
  return Status::OK();
}

#define RETURN_IF_ERROR(expr)      \
  do {                             \
    Status _s = (expr);            \
    if (!_s.ok()) return _s;       \
  } while (0)

Status ParseTable(const toml::table& t, std::string_view src, TableSpec* spec) {
  RETURN_IF_ERROR(CheckKeys(t, src, "table",
                            {"name", "kind", "rows", "cols", "init", "value", "low", "high", "mean",
                             "stddev", "seed", "optimizer", "lr", "momentum", "beta1", "beta2", "eps",
                             "initial_accumulator"}));
  auto name = t["name"].value<std::string>();
  if (!name) return Status::InvalidArgument(std::string(src) + ": a [[table]] has no name");
  spec->name = *name;
  RETURN_IF_ERROR(GetEnum(t, "kind", src, &spec->kind));
  RETURN_IF_ERROR(GetInt<uint64_t>(t, "rows", src, 0, 1ull << 40, &spec->rows));
  RETURN_IF_ERROR(GetInt<uint32_t>(t, "cols", src, 1, 1u << 24, &spec->cols));
  RETURN_IF_ERROR(GetEnum(t, "init", src, &spec->init));
  switch (spec->init) {
    case InitKind::kConstant: RETURN_IF_ERROR(GetFloat(t, "value", src, &spec->init_a)); break;
    case InitKind::kUniform:
      RETURN_IF_ERROR(GetFloat(t, "low", src, &spec->init_a));
      RETURN_IF_ERROR(GetFloat(t, "high", src, &spec->init_b));
      break;
    case InitKind::kNormal:
      RETURN_IF_ERROR(GetFloat(t, "mean", src, &spec->init_a));
      RETURN_IF_ERROR(GetFloat(t, "stddev", src, &spec->init_b));
      break;
    default: break;
  }
  RETURN_IF_ERROR(GetInt<uint64_t>(t, "seed", src, 0, ~0ull >> 1, &spec->seed));
  RETURN_IF_ERROR(GetEnum(t, "optimizer", src, &spec->optimizer));
  RETURN_IF_ERROR(GetFloat(t, "lr", src, &spec->lr));
  RETURN_IF_ERROR(GetFloat(t, "momentum", src, &spec->momentum));
  RETURN_IF_ERROR(GetFloat(t, "beta1", src, &spec->beta1));
  RETURN_IF_ERROR(GetFloat(t, "beta2", src, &spec->beta2));
  RETURN_IF_ERROR(GetFloat(t, "eps", src, &spec->eps));
  RETURN_IF_ERROR(GetFloat(t, "initial_accumulator", src, &spec->initial_accumulator));
  Status s = spec->Validate();
  if (!s.ok()) return Status::InvalidArgument(Where(src, &t) + ": " + s.message());
  return Status::OK();
}

}  // namespace

Status ParseJobConfig(std::string_view text, std::string_view src, CoordinatorOptions* out) {
  toml::table root;
  try {
    root = toml::parse(text, src);
  } catch (const toml::parse_error& e) {
    return Status::InvalidArgument(std::string(src) + ":" + std::to_string(e.source().begin.line) +
                                   ": " + std::string(e.description()));
  }
  RETURN_IF_ERROR(CheckKeys(root, src, "top level", {"job", "table"}));
  if (const toml::table* job = root["job"].as_table()) {
    RETURN_IF_ERROR(CheckKeys(*job, src, "job", {"servers", "workers", "partitions", "consistency",
                                                 "staleness", "heartbeat_timeout_ms", "join_timeout_ms",
                                                 "snapshot_dir", "snapshot_every_clocks", "snapshot_every_sec",
                                                 "keep_snapshots"}));
    if (auto d = (*job)["snapshot_dir"].value<std::string>()) out->snapshot_dir = *d;
    RETURN_IF_ERROR(GetInt<uint32_t>(*job, "snapshot_every_clocks", src, 0, 1u << 30, &out->snapshot_every_clocks));
    RETURN_IF_ERROR(GetInt<uint32_t>(*job, "snapshot_every_sec", src, 0, 1u << 30, &out->snapshot_every_sec));
    RETURN_IF_ERROR(GetInt<uint32_t>(*job, "keep_snapshots", src, 1, 100000, &out->keep_snapshots));
    RETURN_IF_ERROR(GetInt<uint32_t>(*job, "servers", src, 1, 4096, &out->num_servers));
    RETURN_IF_ERROR(GetInt<uint32_t>(*job, "workers", src, 0, 65536, &out->num_workers));
    RETURN_IF_ERROR(GetInt<uint32_t>(*job, "partitions", src, 1, 1u << 20, &out->partitions));
    RETURN_IF_ERROR(GetEnum(*job, "consistency", src, &out->consistency));
    RETURN_IF_ERROR(GetInt<uint32_t>(*job, "staleness", src, 0, 1u << 30, &out->staleness));
    int64_t ms = out->heartbeat_timeout.count();
    RETURN_IF_ERROR(GetInt<int64_t>(*job, "heartbeat_timeout_ms", src, 1, 3600000, &ms));
    out->heartbeat_timeout = Millis(ms);
    ms = out->join_timeout.count();
    RETURN_IF_ERROR(GetInt<int64_t>(*job, "join_timeout_ms", src, 1, 86400000, &ms));
    out->join_timeout = Millis(ms);
  } else if (root.contains("job")) {
    return Status::InvalidArgument(std::string(src) + ": 'job' must be a table ([job])");
  }
  if (const toml::node* tn = root.get("table")) {
    const toml::array* arr = tn->as_array();
    if (!arr) return Status::InvalidArgument(Where(src, tn) + ": tables are written [[table]]");
    for (const auto& n : *arr) {
      const toml::table* t = n.as_table();
      if (!t) return Status::InvalidArgument(Where(src, &n) + ": tables are written [[table]]");
      TableSpec spec;
      RETURN_IF_ERROR(ParseTable(*t, src, &spec));
      out->tables.push_back(std::move(spec));
    }
  }
  return Status::OK();
}

Status LoadJobConfig(const std::string& path, CoordinatorOptions* out) {
  std::ifstream f(path);
  if (!f) return Status::InvalidArgument("cannot open job file '" + path + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  return ParseJobConfig(ss.str(), path, out);
}

}  // namespace shardps
