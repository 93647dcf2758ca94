#include "server/coordinator/job_config.h"

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include <toml++/toml.h>

#include "common/base/json.h"
#include "server/coordinator/store/etcd_state.h"

namespace shardps {
namespace {

// "file:line", or "--set section.key=value" for an override.
std::string Where(std::string_view src, const toml::node* n) {
  if (n && n->source().path && n->source().path->rfind("--set", 0) == 0) return *n->source().path;
  std::string s(src);
  if (n && n->source().begin) s += ":" + std::to_string(n->source().begin.line);
  return s;
}

std::string Quote(std::string_view k) { return "'" + std::string(k) + "'"; }

template <typename T>
Status GetInt(const toml::table& t, std::string_view key, std::string_view src, T lo, T hi, T* out) {
  const toml::node* n = t.get(key);
  if (!n) return Status::OK();
  // is_integer() first: value<int64_t>() converts a float, out of range
  // undefined (7e84).
  const auto v = n->is_integer() ? n->value<int64_t>() : std::nullopt;
  if (!v) return Status::InvalidArgument(Where(src, n) + ": '" + std::string(key) + "' must be an integer");
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
    if (!known.count(k.str())) {
      std::string list;
      for (auto n : known) list += (list.empty() ? "" : ", ") + std::string(n);
      return Status::InvalidArgument(Where(src, &v) + ": unknown key '" + std::string(k.str()) +
                                     "' in [" + std::string(section) + "] (known keys: " + list + ")");
    }
  return Status::OK();
}

Status GetString(const toml::table& t, std::string_view key, std::string_view src, std::string* out) {
  const toml::node* n = t.get(key);
  if (!n) return Status::OK();
  auto v = n->value<std::string>();
  if (!v || !n->is_string()) return Status::InvalidArgument(Where(src, n) + ": " + Quote(key) + " must be a string");
  *out = *v;
  return Status::OK();
}

Status GetBool(const toml::table& t, std::string_view key, std::string_view src, bool* out) {
  const toml::node* n = t.get(key);
  if (!n) return Status::OK();
  if (!n->is_boolean()) return Status::InvalidArgument(Where(src, n) + ": " + Quote(key) + " must be true or false");
  *out = *n->value<bool>();
  return Status::OK();
}

// An array of strings; with `shell`, a single string is run by sh -c.
Status GetStrings(const toml::table& t, std::string_view key, std::string_view src, bool shell,
                  std::vector<std::string>* out) {
  const toml::node* n = t.get(key);
  if (!n) return Status::OK();
  if (shell && n->is_string()) {
    *out = {"sh", "-c", *n->value<std::string>()};
    return Status::OK();
  }
  const toml::array* a = n->as_array();
  const std::string what = Quote(key) + (shell ? " must be a string or an array of strings" : " must be an array of strings");
  if (!a) return Status::InvalidArgument(Where(src, n) + ": " + what);
  out->clear();
  for (const auto& e : *a) {
    if (!e.is_string()) return Status::InvalidArgument(Where(src, &e) + ": " + what);
    out->push_back(*e.value<std::string>());
  }
  return Status::OK();
}

Status ParseTable(const toml::table& t, std::string_view src, TableSpec* spec) {
  SHARDPS_RETURN_IF_ERROR(CheckKeys(t, src, "table",
                            {"name", "kind", "rows", "cols", "init", "value", "low", "high", "mean",
                             "stddev", "seed", "optimizer", "lr", "momentum", "beta1", "beta2", "eps",
                             "initial_accumulator", "max_rows", "staleness_rule", "dc_lambda", "dtype",
                             "admit_after", "evict_after_clocks", "evict_after_sec", "wire_dtype", "compress",
                             "topk_fraction", "cold_tier"}));
  auto name = t["name"].value<std::string>();
  if (!name) return Status::InvalidArgument(std::string(src) + ": a [[table]] has no name");
  spec->name = *name;
  SHARDPS_RETURN_IF_ERROR(GetEnum(t, "kind", src, &spec->kind));
  SHARDPS_RETURN_IF_ERROR(GetInt<uint64_t>(t, "rows", src, 0, 1ull << 40, &spec->rows));
  SHARDPS_RETURN_IF_ERROR(GetInt<uint32_t>(t, "cols", src, 1, 1u << 24, &spec->cols));
  SHARDPS_RETURN_IF_ERROR(GetEnum(t, "init", src, &spec->init));
  switch (spec->init) {
    case InitKind::kConstant: SHARDPS_RETURN_IF_ERROR(GetFloat(t, "value", src, &spec->init_a)); break;
    case InitKind::kUniform:
      SHARDPS_RETURN_IF_ERROR(GetFloat(t, "low", src, &spec->init_a));
      SHARDPS_RETURN_IF_ERROR(GetFloat(t, "high", src, &spec->init_b));
      break;
    case InitKind::kNormal:
      SHARDPS_RETURN_IF_ERROR(GetFloat(t, "mean", src, &spec->init_a));
      SHARDPS_RETURN_IF_ERROR(GetFloat(t, "stddev", src, &spec->init_b));
      break;
    default: break;
  }
  SHARDPS_RETURN_IF_ERROR(GetInt<uint64_t>(t, "seed", src, 0, ~0ull >> 1, &spec->seed));
  SHARDPS_RETURN_IF_ERROR(GetEnum(t, "optimizer", src, &spec->optimizer));
  SHARDPS_RETURN_IF_ERROR(GetFloat(t, "lr", src, &spec->lr));
  SHARDPS_RETURN_IF_ERROR(GetFloat(t, "momentum", src, &spec->momentum));
  SHARDPS_RETURN_IF_ERROR(GetFloat(t, "beta1", src, &spec->beta1));
  SHARDPS_RETURN_IF_ERROR(GetFloat(t, "beta2", src, &spec->beta2));
  SHARDPS_RETURN_IF_ERROR(GetFloat(t, "eps", src, &spec->eps));
  SHARDPS_RETURN_IF_ERROR(GetFloat(t, "initial_accumulator", src, &spec->initial_accumulator));
  SHARDPS_RETURN_IF_ERROR(GetInt<uint64_t>(t, "max_rows", src, 0, ~0ull >> 1, &spec->max_rows));
  SHARDPS_RETURN_IF_ERROR(GetEnum(t, "staleness_rule", src, &spec->staleness_rule));
  SHARDPS_RETURN_IF_ERROR(GetFloat(t, "dc_lambda", src, &spec->dc_lambda));
  SHARDPS_RETURN_IF_ERROR(GetEnum(t, "dtype", src, &spec->dtype));
  SHARDPS_RETURN_IF_ERROR(GetEnum(t, "wire_dtype", src, &spec->wire.dtype));
  SHARDPS_RETURN_IF_ERROR(GetEnum(t, "compress", src, &spec->wire.compress));
  SHARDPS_RETURN_IF_ERROR(GetFloat(t, "topk_fraction", src, &spec->wire.topk_fraction));
  SHARDPS_RETURN_IF_ERROR(GetInt<uint32_t>(t, "admit_after", src, 0, 255, &spec->admit_after));
  SHARDPS_RETURN_IF_ERROR(GetInt<uint32_t>(t, "evict_after_clocks", src, 0, ~0u >> 1, &spec->evict_after_clocks));
  SHARDPS_RETURN_IF_ERROR(GetInt<uint32_t>(t, "evict_after_sec", src, 0, ~0u >> 1, &spec->evict_after_sec));
  SHARDPS_RETURN_IF_ERROR(GetBool(t, "cold_tier", src, &spec->cold_tier));
  Status s = spec->Validate();
  if (!s.ok()) return Status::InvalidArgument(Where(src, &t) + ": " + s.message());
  return Status::OK();
}

Status ParseHost(const toml::node& n, std::string_view src, LaunchHost* h) {
  if (n.is_string()) {
    h->name = *n.value<std::string>();
  } else if (const toml::table* t = n.as_table()) {
    SHARDPS_RETURN_IF_ERROR(CheckKeys(*t, src, "launch.hosts", {"name", "address", "coordinator", "servers", "workers"}));
    SHARDPS_RETURN_IF_ERROR(GetString(*t, "name", src, &h->name));
    SHARDPS_RETURN_IF_ERROR(GetString(*t, "address", src, &h->address));
    SHARDPS_RETURN_IF_ERROR(GetBool(*t, "coordinator", src, &h->coordinator));
    SHARDPS_RETURN_IF_ERROR(GetInt<int>(*t, "servers", src, 0, 4096, &h->servers));
    SHARDPS_RETURN_IF_ERROR(GetInt<int>(*t, "workers", src, 0, 65536, &h->workers));
  } else {
    return Status::InvalidArgument(Where(src, &n) +
                                   ": each of 'hosts' must be a host name or a table {name = ..., servers = N, workers = N}");
  }
  if (h->name.empty() || h->name.find_first_of(" \t\n'\"") != std::string::npos)
    return Status::InvalidArgument(Where(src, &n) + ": a host needs a name without spaces or quotes, got '" + h->name + "'");
  return Status::OK();
}

Status ParseLaunch(const toml::table& t, std::string_view src, LaunchOptions* l) {
  SHARDPS_RETURN_IF_ERROR(CheckKeys(t, src, "launch",
                            {"mode", "hosts", "interface", "advertise", "coordinator_port", "server_ports",
                             "worker_command", "env", "server_cpus", "bin_dir", "run_dir", "timeout_sec",
                             "ssh_options", "srun_options", "restart_workers", "restart_servers", "restart_coordinator", "max_restarts", "etcd"}));
  SHARDPS_RETURN_IF_ERROR(GetString(t, "mode", src, &l->mode));
  if (l->mode != "local" && l->mode != "ssh" && l->mode != "slurm")
    return Status::InvalidArgument(Where(src, t.get("mode")) + ": 'mode' must be \"local\", \"ssh\" or \"slurm\", got '" +
                                   l->mode + "'");
  if (const toml::node* n = t.get("hosts")) {
    const toml::array* a = n->as_array();
    if (!a) return Status::InvalidArgument(Where(src, n) + ": 'hosts' must be an array of host names or tables");
    l->hosts.clear();
    for (const auto& e : *a) {
      LaunchHost h;
      SHARDPS_RETURN_IF_ERROR(ParseHost(e, src, &h));
      l->hosts.push_back(std::move(h));
    }
  }
  SHARDPS_RETURN_IF_ERROR(GetString(t, "interface", src, &l->interface));
  SHARDPS_RETURN_IF_ERROR(GetString(t, "advertise", src, &l->advertise));
  SHARDPS_RETURN_IF_ERROR(GetInt<uint32_t>(t, "coordinator_port", src, 0, 65535, &l->coordinator_port));
  if (const toml::node* n = t.get("server_ports")) {
    // 0 (free ports) or "FIRST-LAST".
    const std::string what = ": 'server_ports' must be 0 (free ports) or a range \"FIRST-LAST\" within 1-65535";
    if (n->is_integer()) {
      if (*n->value<int64_t>() != 0) return Status::InvalidArgument(Where(src, n) + what);
      l->server_port_min = l->server_port_max = 0;
    } else if (n->is_string()) {
      unsigned a = 0, b = 0;
      char extra = 0;
      const std::string v = *n->value<std::string>();
      if (v == "0") {
        l->server_port_min = l->server_port_max = 0;
      } else if (std::sscanf(v.c_str(), "%u-%u%c", &a, &b, &extra) != 2 || a < 1 || b > 65535 || a > b) {
        return Status::InvalidArgument(Where(src, n) + what + ", got '" + v + "'");
      } else {
        l->server_port_min = a;
        l->server_port_max = b;
      }
    } else {
      return Status::InvalidArgument(Where(src, n) + what);
    }
  }
  SHARDPS_RETURN_IF_ERROR(GetStrings(t, "worker_command", src, true, &l->worker_command));
  if (const toml::node* n = t.get("env")) {
    const toml::table* e = n->as_table();
    if (!e) return Status::InvalidArgument(Where(src, n) + ": 'env' must be a table of strings, e.g. env = { OMP_NUM_THREADS = \"1\" }");
    for (const auto& [k, v] : *e) {
      if (!v.is_string())
        return Status::InvalidArgument(Where(src, &v) + ": env '" + std::string(k.str()) + "' must be a string");
      l->env[std::string(k.str())] = *v.value<std::string>();
    }
  }
  if (const toml::node* n = t.get("server_cpus"); n && n->is_string()) {
    l->server_cpus = {*n->value<std::string>()};
  } else {
    SHARDPS_RETURN_IF_ERROR(GetStrings(t, "server_cpus", src, false, &l->server_cpus));
  }
  SHARDPS_RETURN_IF_ERROR(GetString(t, "bin_dir", src, &l->bin_dir));
  SHARDPS_RETURN_IF_ERROR(GetString(t, "run_dir", src, &l->run_dir));
  SHARDPS_RETURN_IF_ERROR(GetInt<uint32_t>(t, "timeout_sec", src, 1, 30u * 86400, &l->timeout_sec));
  SHARDPS_RETURN_IF_ERROR(GetBool(t, "restart_workers", src, &l->restart_workers));
  SHARDPS_RETURN_IF_ERROR(GetBool(t, "restart_servers", src, &l->restart_servers));
  SHARDPS_RETURN_IF_ERROR(GetBool(t, "restart_coordinator", src, &l->restart_coordinator));
  SHARDPS_RETURN_IF_ERROR(GetString(t, "etcd", src, &l->etcd));
  SHARDPS_RETURN_IF_ERROR(GetInt<uint32_t>(t, "max_restarts", src, 0, 1000000, &l->max_restarts));
  SHARDPS_RETURN_IF_ERROR(GetStrings(t, "ssh_options", src, false, &l->ssh_options));
  SHARDPS_RETURN_IF_ERROR(GetStrings(t, "srun_options", src, false, &l->srun_options));
  return Status::OK();
}

Status ParseMetrics(const toml::table& t, std::string_view src, MetricsOptions* m) {
  SHARDPS_RETURN_IF_ERROR(CheckKeys(t, src, "metrics", {"enabled", "port", "address"}));
  SHARDPS_RETURN_IF_ERROR(GetBool(t, "enabled", src, &m->enabled));
  SHARDPS_RETURN_IF_ERROR(GetInt<int>(t, "port", src, 0, 65535, &m->port));
  SHARDPS_RETURN_IF_ERROR(GetString(t, "address", src, &m->address));
  return Status::OK();
}

Status ParseSecurity(const toml::table& t, std::string_view src, SecurityConfig* s) {
  SHARDPS_RETURN_IF_ERROR(CheckKeys(t, src, "security", {"keys", "enabled"}));
  SHARDPS_RETURN_IF_ERROR(GetString(t, "keys", src, &s->keys));
  if (t.get("enabled")) {
    bool on = false;
    SHARDPS_RETURN_IF_ERROR(GetBool(t, "enabled", src, &on));
    s->enabled = on;
  }
  if (s->enabled == false && !s->keys.empty())
    return Status::InvalidArgument(std::string(src) + ": [security] enabled = false with keys = '" + s->keys +
                                   "': security off, yet a key directory; drop one (--set security.keys=\"\" clears the keys)");
  return Status::OK();
}

// Applies one --set section.key=value to the parsed document.
Status ApplySet(const std::string& set, toml::table* root) {
  const size_t eq = set.find('=');
  const size_t dot = set.find('.');
  if (eq == std::string::npos || dot == std::string::npos || dot > eq || dot == 0 || dot + 1 == eq)
    return Status::InvalidArgument("--set '" + set + "': expected SECTION.KEY=VALUE, e.g. --set job.servers=4");
  const std::string section = set.substr(0, dot), key = set.substr(dot + 1, eq - dot - 1),
                    value = set.substr(eq + 1);
  if (key.find('.') != std::string::npos)
    return Status::InvalidArgument("--set '" + set + "': only SECTION.KEY is supported, not deeper keys");
  if (section == "table")
    return Status::InvalidArgument("--set '" + set + "': tables are defined in the job file ([[table]])");
  if (section != "job" && section != "launch" && section != "metrics" && section != "security" &&
      section != "coordinator")
    return Status::InvalidArgument("--set '" + set + "': unknown section '" + section +
                                   "' (known sections: job, coordinator, launch, metrics, security)");
  // The value is TOML (3, true, "x", [1, 2], { A = "b" }); a bare word is a string.
  const std::string name = "--set " + set;
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + value, name);
  } catch (const toml::parse_error&) {
    std::string quoted = "\"";
    for (char c : value) {
      if (c == '"' || c == '\\') quoted += '\\';
      quoted += c;
    }
    try {
      parsed = toml::parse("v = " + quoted + "\"", name);
    } catch (const toml::parse_error& e) {
      return Status::InvalidArgument(name + ": " + std::string(e.description()));
    }
  }
  toml::node* sec = root->get(section);
  if (!sec) sec = &root->insert_or_assign(section, toml::table{}).first->second;
  toml::table* st = sec->as_table();
  if (!st) return Status::InvalidArgument(name + ": '" + section + "' is not a section");
  st->insert_or_assign(key, std::move(*parsed.get("v")));
  return Status::OK();
}

// [launch] etcd: "local" or HOST:PORT[,HOST:PORT...].
Status CheckEtcd(const toml::table& root, std::string_view src, const std::string& etcd) {
  if (etcd.empty() || etcd == "local") return Status::OK();
  std::vector<std::string> endpoints;
  std::string prefix;
  if (ParseEtcdUrl("etcd://" + etcd + "/p", &endpoints, &prefix).ok()) return Status::OK();
  return Status::InvalidArgument(Where(src, root["launch"]["etcd"].node()) + ": [launch] etcd '" + etcd +
                                 "' is not \"local\" or HOST:PORT[,HOST:PORT...]");
}

// [coordinator]: where the job's state is kept (store = "etcd://..."; a
// directory is [job] state_dir) and how many standby coordinators the
// launcher starts (standbys, which need etcd: store, or [launch] etcd).
// After [job] and [launch]: the state in two places is an error.
Status ParseCoordinator(const toml::table& root, std::string_view src, JobConfig* cfg) {
  CoordinatorOptions* out = &cfg->job;
  const std::string& etcd = cfg->launch.etcd;
  SHARDPS_RETURN_IF_ERROR(CheckEtcd(root, src, etcd));
  if (!etcd.empty() && !out->state_dir.empty() && out->state_dir.rfind("etcd://", 0) != 0)
    return Status::InvalidArgument(Where(src, root["launch"]["etcd"].node()) + ": [launch] etcd and [job] state_dir (" +
                                   out->state_dir + ") both given: the state goes to one of them");
  const toml::node* n = root.get("coordinator");
  if (!n) return Status::OK();
  const toml::table* t = n->as_table();
  if (!t) return Status::InvalidArgument(Where(src, n) + ": 'coordinator' must be a table ([coordinator])");
  SHARDPS_RETURN_IF_ERROR(CheckKeys(*t, src, "coordinator", {"store", "standbys"}));
  SHARDPS_RETURN_IF_ERROR(GetInt<uint32_t>(*t, "standbys", src, 0, 8, &cfg->coordinator.standbys));
  std::string store;
  SHARDPS_RETURN_IF_ERROR(GetString(*t, "store", src, &store));
  if (store.empty()) {
    if (cfg->coordinator.standbys > 0 && etcd.empty() && out->state_dir.rfind("etcd://", 0) != 0)
      return Status::InvalidArgument(Where(src, t->get("standbys")) + ": [coordinator] standbys need the job's state "
                                     "in etcd: [coordinator] store = \"etcd://HOST:PORT/PREFIX\" or [launch] etcd "
                                     "(\"local\": the launcher starts one)");
    return Status::OK();
  }
  if (!etcd.empty())
    return Status::InvalidArgument(Where(src, t->get("store")) + ": [coordinator] store and [launch] etcd both given: "
                                   "the job's state goes to the etcd the launcher starts or checks, or to yours");
  if (store.rfind("etcd://", 0) != 0)
    return Status::InvalidArgument(Where(src, t->get("store")) + ": [coordinator] store '" + store +
                                   "' is not etcd://HOST:PORT[,HOST:PORT...]/PREFIX (a directory: [job] state_dir)");
  if (!out->state_dir.empty() && out->state_dir != store)
    return Status::InvalidArgument(Where(src, t->get("store")) + ": [coordinator] store and [job] state_dir (" +
                                   out->state_dir + ") both given: the state goes to one of them");
  out->state_dir = store;
  return Status::OK();
}

}  // namespace

Status ParseJobConfig(std::string_view text, std::string_view src, const std::vector<std::string>& sets,
                      JobConfig* cfg) {
  CoordinatorOptions* out = &cfg->job;
  toml::table root;
  try {
    root = toml::parse(text, src);
  } catch (const toml::parse_error& e) {
    return Status::InvalidArgument(std::string(src) + ":" + std::to_string(e.source().begin.line) +
                                   ": " + std::string(e.description()));
  }
  for (const auto& set : sets) SHARDPS_RETURN_IF_ERROR(ApplySet(set, &root));
  SHARDPS_RETURN_IF_ERROR(
      CheckKeys(root, src, "top level", {"job", "table", "launch", "metrics", "security", "coordinator"}));
  if (const toml::node* n = root.get("launch")) {
    const toml::table* t = n->as_table();
    if (!t) return Status::InvalidArgument(Where(src, n) + ": 'launch' must be a table ([launch])");
    SHARDPS_RETURN_IF_ERROR(ParseLaunch(*t, src, &cfg->launch));
  }
  if (const toml::node* n = root.get("metrics")) {
    const toml::table* t = n->as_table();
    if (!t) return Status::InvalidArgument(Where(src, n) + ": 'metrics' must be a table ([metrics])");
    SHARDPS_RETURN_IF_ERROR(ParseMetrics(*t, src, &cfg->metrics));
  }
  if (const toml::node* n = root.get("security")) {
    const toml::table* t = n->as_table();
    if (!t) return Status::InvalidArgument(Where(src, n) + ": 'security' must be a table ([security])");
    SHARDPS_RETURN_IF_ERROR(ParseSecurity(*t, src, &cfg->security));
  }
  if (const toml::table* job = root["job"].as_table()) {
    SHARDPS_RETURN_IF_ERROR(CheckKeys(*job, src, "job", {"servers", "workers", "partitions", "consistency",
                                                 "staleness", "heartbeat_timeout_ms", "join_timeout_ms",
                                                 "snapshot_dir", "snapshot_every_clocks", "snapshot_every_sec",
                                                 "keep_snapshots", "snapshot_full_every", "server_memory_mb", "max_workers", "state_dir",
                                                 "replicas", "groups"}));
    SHARDPS_RETURN_IF_ERROR(GetInt<uint64_t>(*job, "server_memory_mb", src, 0, 1ull << 34, &out->server_memory_mb));
    SHARDPS_RETURN_IF_ERROR(GetString(*job, "snapshot_dir", src, &out->snapshot_dir));
    SHARDPS_RETURN_IF_ERROR(GetString(*job, "state_dir", src, &out->state_dir));
    SHARDPS_RETURN_IF_ERROR(GetInt<uint32_t>(*job, "snapshot_every_clocks", src, 0, 1u << 30, &out->snapshot_every_clocks));
    SHARDPS_RETURN_IF_ERROR(GetInt<uint32_t>(*job, "snapshot_every_sec", src, 0, 1u << 30, &out->snapshot_every_sec));
    SHARDPS_RETURN_IF_ERROR(GetInt<uint32_t>(*job, "keep_snapshots", src, 1, 100000, &out->snapshots.keep));
    SHARDPS_RETURN_IF_ERROR(GetInt<uint32_t>(*job, "snapshot_full_every", src, 1, 1000000, &out->snapshots.full_every));
    SHARDPS_RETURN_IF_ERROR(GetInt<uint32_t>(*job, "servers", src, 1, 4096, &out->num_servers));
    SHARDPS_RETURN_IF_ERROR(GetInt<uint32_t>(*job, "workers", src, 0, 65536, &out->num_workers));
    SHARDPS_RETURN_IF_ERROR(GetInt<uint32_t>(*job, "max_workers", src, 0, 65536, &out->max_workers));
    SHARDPS_RETURN_IF_ERROR(GetInt<uint32_t>(*job, "partitions", src, 1, 1u << 20, &out->partitions));
    SHARDPS_RETURN_IF_ERROR(GetInt<uint32_t>(*job, "replicas", src, 1, 4096, &out->replicas));
    SHARDPS_RETURN_IF_ERROR(GetInt<uint32_t>(*job, "groups", src, 0, 1u << 20, &out->groups));
    SHARDPS_RETURN_IF_ERROR(GetEnum(*job, "consistency", src, &out->consistency));
    SHARDPS_RETURN_IF_ERROR(GetInt<uint32_t>(*job, "staleness", src, 0, 1u << 30, &out->staleness));
    int64_t ms = out->heartbeat_timeout.count();
    SHARDPS_RETURN_IF_ERROR(GetInt<int64_t>(*job, "heartbeat_timeout_ms", src, 1, 3600000, &ms));
    out->heartbeat_timeout = Millis(ms);
    ms = out->join_timeout.count();
    SHARDPS_RETURN_IF_ERROR(GetInt<int64_t>(*job, "join_timeout_ms", src, 1, 86400000, &ms));
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
      SHARDPS_RETURN_IF_ERROR(ParseTable(*t, src, &spec));
      out->tables.push_back(std::move(spec));
    }
  }
  return ParseCoordinator(root, src, cfg);
}

Status LoadJobConfig(const std::string& path, const std::vector<std::string>& sets, JobConfig* out) {
  if (path.empty()) return ParseJobConfig("", "(no job file)", sets, out);
  std::ifstream f(path);
  if (!f) return Status::InvalidArgument("cannot open job file '" + path + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  return ParseJobConfig(ss.str(), path, sets, out);
}

Status ParseJobConfig(std::string_view text, std::string_view src, CoordinatorOptions* out) {
  JobConfig c;
  c.job = *out;
  SHARDPS_RETURN_IF_ERROR(ParseJobConfig(text, src, {}, &c));
  *out = std::move(c.job);
  return Status::OK();
}

Status LoadJobConfig(const std::string& path, CoordinatorOptions* out) {
  JobConfig c;
  c.job = *out;
  SHARDPS_RETURN_IF_ERROR(LoadJobConfig(path, {}, &c));
  *out = std::move(c.job);
  return Status::OK();
}

namespace {
std::string JsonStrings(const std::vector<std::string>& v) {
  std::string o = "[";
  for (size_t i = 0; i < v.size(); ++i) o += (i ? ", " : "") + JsonString(v[i]);
  return o + "]";
}
std::string JsonBool(bool b) { return b ? "true" : "false"; }
}  // namespace

std::string JobConfigJson(const JobConfig& c) {
  const CoordinatorOptions& j = c.job;
  const LaunchOptions& l = c.launch;
  std::string o = "{\"job\": {";
  o += "\"servers\": " + std::to_string(j.num_servers) + ", \"workers\": " + std::to_string(j.num_workers) +
       ", \"max_workers\": " + std::to_string(std::max(j.num_workers, j.max_workers)) + ", \"partitions\": " + std::to_string(j.partitions) + ", \"consistency\": " +
       JsonString(ToString(j.consistency)) + ", \"staleness\": " + std::to_string(j.staleness) +
       ", \"replicas\": " + std::to_string(j.replicas) + ", \"groups\": " + std::to_string(j.Groups()) +
       ", \"heartbeat_timeout_ms\": " + std::to_string(j.heartbeat_timeout.count()) +
       ", \"join_timeout_ms\": " + std::to_string(j.join_timeout.count()) +
       ", \"snapshot_dir\": " + JsonString(j.snapshot_dir) + ", \"state_dir\": " + JsonString(j.state_dir) +
       ", \"snapshot_every_clocks\": " + std::to_string(j.snapshot_every_clocks) +
       ", \"snapshot_every_sec\": " + std::to_string(j.snapshot_every_sec) +
       ", \"keep_snapshots\": " + std::to_string(j.snapshots.keep) +
       ", \"snapshot_full_every\": " + std::to_string(j.snapshots.full_every) +
       ", \"server_memory_mb\": " + std::to_string(j.server_memory_mb) + "}, \"tables\": [";
  for (size_t i = 0; i < j.tables.size(); ++i) {
    const TableSpec& t = j.tables[i];
    o += (i ? ", " : "") + std::string("{\"name\": ") + JsonString(t.name) + ", \"kind\": " +
         JsonString(ToString(t.kind)) + ", \"rows\": " + std::to_string(t.rows) + ", \"cols\": " +
         std::to_string(t.cols) + ", \"optimizer\": " + JsonString(ToString(t.optimizer)) + "}";
  }
  o += "], \"launch\": {\"mode\": " + JsonString(l.mode) + ", \"hosts\": [";
  for (size_t i = 0; i < l.hosts.size(); ++i) {
    const LaunchHost& h = l.hosts[i];
    o += (i ? ", " : "") + std::string("{\"name\": ") + JsonString(h.name) + ", \"address\": " +
         JsonString(h.address) + ", \"coordinator\": " + JsonBool(h.coordinator) +
         ", \"servers\": " + std::to_string(h.servers) + ", \"workers\": " + std::to_string(h.workers) + "}";
  }
  o += "], \"interface\": " + JsonString(l.interface) + ", \"advertise\": " + JsonString(l.advertise) +
       ", \"coordinator_port\": " + std::to_string(l.coordinator_port) +
       ", \"server_ports\": [" + std::to_string(l.server_port_min) + ", " + std::to_string(l.server_port_max) +
       "], \"worker_command\": " + JsonStrings(l.worker_command) + ", \"env\": {";
  bool first = true;
  for (const auto& [k, v] : l.env) {
    o += (first ? "" : ", ") + JsonString(k) + ": " + JsonString(v);
    first = false;
  }
  o += "}, \"server_cpus\": " + JsonStrings(l.server_cpus) + ", \"bin_dir\": " + JsonString(l.bin_dir) +
       ", \"run_dir\": " + JsonString(l.run_dir) + ", \"timeout_sec\": " + std::to_string(l.timeout_sec) +
       ", \"restart_workers\": " + JsonBool(l.restart_workers) + ", \"restart_servers\": " + JsonBool(l.restart_servers) + ", \"restart_coordinator\": " + JsonBool(l.restart_coordinator) + ", \"max_restarts\": " + std::to_string(l.max_restarts) +
       ", \"etcd\": " + JsonString(l.etcd) + ", \"ssh_options\": " + JsonStrings(l.ssh_options) + ", \"srun_options\": " + JsonStrings(l.srun_options) +
       "}, \"coordinator\": {\"store\": " +
       JsonString(j.state_dir.rfind("etcd://", 0) == 0 ? j.state_dir : "") +
       ", \"standbys\": " + std::to_string(c.coordinator.standbys) + "}, \"metrics\": {\"enabled\": " + JsonBool(c.metrics.enabled) + ", \"port\": " +
       std::to_string(c.metrics.port) + ", \"address\": " + JsonString(c.metrics.address) +
       "}, \"security\": {\"keys\": " + JsonString(c.security.keys) + ", \"enabled\": " +
       (c.security.enabled ? JsonBool(*c.security.enabled) : std::string("null")) + "}}";
  return o;
}

}  // namespace shardps
