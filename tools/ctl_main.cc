// shardps-ctl: talk to a running job's coordinator.
//
//   shardps-ctl status COORDINATOR [--json]   every process, clocks, rates, who waits on whom
//                                             (from the pulls the servers hold, as of their last heartbeats)
//   shardps-ctl top COORDINATOR [--once]      the same, redrawn every second until Ctrl-C
//   shardps-ctl snapshot COORDINATOR          take a snapshot now and wait for it
//   shardps-ctl stop COORDINATOR              workers finish their step, a final snapshot, all exit 0
//
// and, for the launcher's checks before a job starts on several hosts:
//
//   shardps-ctl probe-listen ADDRESS [--seconds N]   print a free port on ADDRESS, accept connections
//   shardps-ctl probe-connect HOST:PORT...            exit 0 if each accepts a TCP connection
#include <CLI/CLI.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <functional>
#include <ctime>
#include <cstdarg>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "common/base/json.h"
#include "common/codec/wire.h"
#include "common/net/handshake.h"
#include "common/net/net.h"
#include "common/net/security.h"
#include "tools/ctl_run_dir.h"

namespace shardps {
namespace {

int Fail(const std::string& msg, int rc = 1) {
  std::fprintf(stderr, "shardps-ctl: %s\n", msg.c_str());
  return rc;
}

std::optional<KeyFile> g_key;  // --key / $SHARDPS_KEY
const char* g_key_needed = "observer.key";  // the key of the job this command needs, with security on

// One request to the coordinator and its reply (a header), within `timeout_sec`.
// A request's body, if any: built into the header's builder.
struct BodyOf {
  wire::Body type = wire::Body::NONE;
  std::function<flatbuffers::Offset<void>(flatbuffers::FlatBufferBuilder&)> build;
};

Status Call(const std::string& coordinator, wire::MsgType type, int timeout_sec, zmq::message_t* reply,
            const wire::Header** h, std::vector<uint64_t>* scratch, int rank = -1, const BodyOf& body = {}) {
  static zmq::context_t ctx(1);
  zmq::socket_t sock(ctx, zmq::socket_type::dealer);
  sock.set(zmq::sockopt::linger, 0);
  zmq::socket_t monitor;
  try {
    if (g_key) MakeCurveClient(sock, *g_key);
    static int calls = 0;
    monitor = WatchHandshakes(ctx, sock, "inproc://shardps-ctl-monitor-" + std::to_string(calls++));
    ConnectCoordinators(sock, coordinator);
  } catch (const zmq::error_t& e) {
    return Status::InvalidArgument("cannot connect to '" + coordinator + "': " + e.what());
  }
  flatbuffers::FlatBufferBuilder fbb;
  wire::Fields f;
  f.type = type;
  f.request_id = 1;
  f.role = wire::Role::Observer;
  f.rank = rank;  // DeclareDead: the server
  zmq::message_t request =
      body.build ? wire::Encode(fbb, f, body.type, body.build(fbb)) : wire::EncodeSimple(fbb, f);
  const auto deadline = Clock::now() + std::chrono::seconds(timeout_sec);
  if (Status s = RequestReply(sock, monitor, g_key ? &*g_key : nullptr, request, deadline, "coordinator " + coordinator,
                              reply);
      !s.ok()) {
    if (s.code() == Code::kPermissionDenied && !g_key)
      return Status::PermissionDenied(s.message() + "; this command needs the job's " + g_key_needed +
                                      " (--key FILE, or --run-dir RUN_DIR of a job shardps-launch started)");
    return s.code() == Code::kTimeout ? Status::Timeout(s.message() + " within " + std::to_string(timeout_sec) + " s")
                                      : s;
  }
  Status s = wire::ParseHeader(*reply, *scratch, h);
  if (s.ok()) s = wire::ReplyStatus(*h);
  return s;
}

std::string Str(const flatbuffers::String* s) { return s ? s->str() : ""; }

const char* RoleName(wire::Role r) {
  switch (r) {
    case wire::Role::Server: return "server";
    case wire::Role::Worker: return "worker";
    case wire::Role::Coordinator: return "coordinator";
    default: return "observer";
  }
}

std::string Num(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

// What the status and top print besides the processes: every worker's
// clock, the live ones' range, who waits on whom.
struct WorkerClock {
  int rank;
  int64_t clock;
  bool alive;
};
struct StatusView {
  std::vector<WorkerClock> clocks;
  int64_t lo = -1, hi = -1;  // over live workers; -1: none
  std::vector<const wire::WaitInfo*> waits;
};

StatusView ViewOf(const wire::JobStatus& js) {
  StatusView v;
  if (js.processes())
    for (const auto* p : *js.processes()) {
      if (p->role() != wire::Role::Worker) continue;
      v.clocks.push_back({p->rank(), p->clock(), p->alive()});
      if (!p->alive() || p->clock() < 0) continue;
      v.lo = v.lo < 0 ? p->clock() : std::min(v.lo, p->clock());
      v.hi = std::max(v.hi, p->clock());
    }
  if (js.waits())
    for (const auto* w : *js.waits()) v.waits.push_back(w);
  return v;
}

// printf into a string.
__attribute__((format(printf, 2, 3))) void Appendf(std::string* out, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  const int n = std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n > 0) out->append(buf, std::min<size_t>(static_cast<size_t>(n), sizeof buf - 1));
}

// Each replica group's servers, primary first (a lost copy: none).
std::vector<std::vector<uint32_t>> GroupsOf(const wire::JobStatus& js) {
  std::vector<std::vector<uint32_t>> out;
  const uint32_t groups = js.num_groups() ? js.num_groups() : js.num_servers();
  const uint32_t stride = std::max<uint32_t>(1, js.group_replicas() ? js.group_replicas()->size() / std::max<uint32_t>(1, groups) : 1);
  if (!js.group_replicas()) return out;
  for (uint32_t i = 0; i < js.group_replicas()->size(); ++i) {
    if (i % stride == 0) out.emplace_back();
    if (const uint32_t s = js.group_replicas()->Get(i); s != 0xffffffffu) out.back().push_back(s);
  }
  return out;
}

// "replica groups (shard map v2, 2 copies): 0: server 0 + server 1 | 1: server 0 (one copy left)"
std::string GroupsText(const wire::JobStatus& js) {
  std::string s = "replica groups (shard map v" + std::to_string(js.map_version()) + ", " +
                  std::to_string(js.replicas()) + " copies):";
  const auto groups = GroupsOf(js);
  for (size_t g = 0; g < groups.size(); ++g) {
    s += (g ? " | " : " ") + std::to_string(g) + ":";
    for (size_t k = 0; k < groups[g].size(); ++k) s += (k ? " + server " : " server ") + std::to_string(groups[g][k]);
    if (groups[g].size() < js.replicas())
      s += groups[g].empty() ? " none"
           : groups[g].size() == 1 ? " (one copy left)"
                                   : " (" + std::to_string(groups[g].size()) + " of " + std::to_string(js.replicas()) + " copies)";
    if (js.group_joining() && g < js.group_joining()->size() && js.group_joining()->Get(g) != 0xffffffffu)
      s += " (filling server " + std::to_string(js.group_joining()->Get(g)) + ")";
    if (js.group_leaving() && g < js.group_leaving()->size() && js.group_leaving()->Get(g) != 0xffffffffu)
      s += " (then server " + std::to_string(js.group_leaving()->Get(g)) + "'s copy leaves)";
  }
  if (js.draining() && js.draining()->size()) {
    s += " | draining:";
    for (uint32_t r : *js.draining()) s += " server " + std::to_string(r);
  }
  return s;
}

// The status as `shardps-ctl status` prints it (and `top` shows it).
std::string StatusText(const wire::JobStatus& status, int64_t lo, int64_t hi, const std::vector<const wire::WaitInfo*>& waits) {
  const wire::JobStatus* js = &status;
  const auto consistency = static_cast<Consistency>(js->consistency());
  const std::string mode(ToString(consistency));
  std::string out;
  Appendf(&out, "job: %s%s, %u servers, %u workers, up %.1f s%s%s\n", mode.c_str(),
              consistency == Consistency::kBounded ? (" s=" + std::to_string(js->staleness())).c_str() : "",
              js->num_servers(), js->num_workers(), js->uptime_ms() / 1000.0, js->ready() ? "" : ", NOT READY (servers missing)",
              js->stopping() ? ", STOPPING" : "");
  Appendf(&out, "clocks: min %lld, max %lld\n", static_cast<long long>(lo), static_cast<long long>(hi));
  Appendf(&out, "%-11s %4s  %-16s %8s  %-7s %6s %7s %9s %9s %9s %9s  %s\n", "ROLE", "RANK", "HOST", "PID", "STATE",
              "HB(s)", "CLOCK", "PUSH/s", "PULL/s", "IN MB/s", "OUT MB/s", "METRICS");
  Appendf(&out, "%-11s %4d  %-16s %8u  %-7s %6s %7s %9s %9s %9s %9s  %s\n", "coordinator", 0, Str(js->host()).c_str(),
              js->pid(), "alive", "-", "-", "-", "-", "-", "-", Str(js->metrics_url()).c_str());
  if (js->processes())
    for (const auto* p : *js->processes()) {
      const bool server = p->role() == wire::Role::Server;
      char hb[32], clock[32];
      std::snprintf(hb, sizeof hb, p->heartbeat_age_ms() < 0 ? "-" : "%.1f", p->heartbeat_age_ms() / 1000.0);
      std::snprintf(clock, sizeof clock, server || p->clock() < 0 ? "-" : "%lld", static_cast<long long>(p->clock()));
      auto rate = [&](double v, double scale) { return server ? Num(v / scale) : std::string("-"); };
      Appendf(&out, "%-11s %4d  %-16s %8u  %-7s %6s %7s %9s %9s %9s %9s  %s\n", RoleName(p->role()), p->rank(),
                  Str(p->host()).c_str(), p->pid(), Str(p->state()).c_str(), hb, clock,
                  rate(p->pushes_per_sec(), 1).c_str(), rate(p->pulls_per_sec(), 1).c_str(),
                  rate(p->push_bytes_per_sec(), 1e6).c_str(), rate(p->pull_bytes_per_sec(), 1e6).c_str(),
                  Str(p->metrics_url()).c_str());
    }
  if (js->processes())  // servers with tiered tables (cold_tier)
    for (const auto* p : *js->processes()) {
      const wire::ColdTierStats* c = p->cold();
      if (p->role() != wire::Role::Server || !c) continue;
      const uint64_t looked = c->hits() + c->reads();
      Appendf(&out, "cold tier: server %d: %llu rows in memory, %llu on disk, hit rate %s %%, %s MB read, %s MB written, "
              "%llu rows moved down\n", p->rank(), static_cast<unsigned long long>(c->hot_rows()),
              static_cast<unsigned long long>(c->cold_rows()),
              looked ? Num(100.0 * static_cast<double>(c->hits()) / static_cast<double>(looked)).c_str() : "-",
              Num(static_cast<double>(c->bytes_read()) / 1e6).c_str(),
              Num(static_cast<double>(c->bytes_written()) / 1e6).c_str(),
              static_cast<unsigned long long>(c->moved_down()));
    }
  if (consistency == Consistency::kAsync) {
    Appendf(&out, "waiting: nobody (asynchronous)\n");
  } else if (waits.empty()) {
    Appendf(&out, "waiting: nobody\n");
  } else {
    Appendf(&out, "waiting:\n");
    for (const auto* w : waits)
      Appendf(&out, "  worker %d at clock %lld waits for worker %d at clock %lld (bound %u)\n", w->worker(),
                  static_cast<long long>(w->clock()), w->waits_for(), static_cast<long long>(w->their_clock()),
                  consistency == Consistency::kSync ? 0 : js->staleness());
  }
  if (js->replicas() > 1) Appendf(&out, "%s\n", GroupsText(*js).c_str());
  if (js->latest_snapshot_clock() >= 0)
    Appendf(&out, "latest snapshot: %s (clock %lld, %.2f s to write), %u taken in this run\n", Str(js->latest_snapshot()).c_str(),
                static_cast<long long>(js->latest_snapshot_clock()), js->latest_snapshot_ms() / 1000.0, js->snapshots_taken());
  else
    Appendf(&out, "latest snapshot: none in this run%s\n", Str(js->snapshot_dir()).empty() ? " (no snapshot directory)" : "");
  return out;
}

int CmdStatus(const std::string& coordinator, bool json, int timeout_sec) {
  zmq::message_t m;
  const wire::Header* h = nullptr;
  std::vector<uint64_t> scratch;
  Status s = Call(coordinator, wire::MsgType::GetStatus, timeout_sec, &m, &h, &scratch);
  if (!s.ok()) return Fail(s.ToString());
  const wire::JobStatus* js = h->body_as_JobStatus();
  if (!js) return Fail("the coordinator's reply has no status (is it an older shardps?)");
  const auto consistency = static_cast<Consistency>(js->consistency());
  const StatusView v = ViewOf(*js);
  const auto& clocks = v.clocks;
  const auto& waits = v.waits;
  const int64_t lo = v.lo, hi = v.hi;
  const std::string mode(ToString(consistency));

  if (json) {
    std::string o = "{\"coordinator\": " + JsonString(coordinator) + ", \"consistency\": " + JsonString(mode) +
                    ", \"staleness\": " + std::to_string(js->staleness()) +
                    ", \"num_servers\": " + std::to_string(js->num_servers()) +
                    ", \"num_workers\": " + std::to_string(js->num_workers()) +
                    ", \"uptime_s\": " + Num(js->uptime_ms() / 1000.0) +
                    ", \"ready\": " + (js->ready() ? "true" : "false") +
                    ", \"stopping\": " + (js->stopping() ? "true" : "false") +
                    ", \"min_clock\": " + std::to_string(lo) + ", \"max_clock\": " + std::to_string(hi) +
                    ", \"processes\": [";
    o += "{\"role\": \"coordinator\", \"rank\": 0, \"host\": " + JsonString(Str(js->host())) +
         ", \"pid\": " + std::to_string(js->pid()) + ", \"alive\": true, \"state\": \"alive\", \"endpoint\": " +
         JsonString(js->endpoint() ? Str(js->endpoint()) : coordinator) + ", \"metrics_url\": " + JsonString(Str(js->metrics_url())) + "}";
    if (js->processes())
      for (const auto* p : *js->processes()) {
        o += ", {\"role\": " + JsonString(RoleName(p->role())) + ", \"rank\": " + std::to_string(p->rank()) +
             ", \"host\": " + JsonString(Str(p->host())) + ", \"pid\": " + std::to_string(p->pid()) +
             ", \"alive\": " + (p->alive() ? "true" : "false") + ", \"state\": " + JsonString(Str(p->state())) +
             ", \"last_heartbeat_s\": " + (p->heartbeat_age_ms() < 0 ? "null" : Num(p->heartbeat_age_ms() / 1000.0)) +
             ", \"metrics_url\": " + JsonString(Str(p->metrics_url()));
        if (p->role() == wire::Role::Worker) {
          o += ", \"clock\": " + std::to_string(p->clock());
        } else {
          o += ", \"endpoint\": " + JsonString(Str(p->endpoint())) +
               ", \"pushes_per_s\": " + Num(p->pushes_per_sec()) + ", \"pulls_per_s\": " + Num(p->pulls_per_sec()) +
               ", \"push_bytes_per_s\": " + Num(p->push_bytes_per_sec()) +
               ", \"pull_bytes_per_s\": " + Num(p->pull_bytes_per_sec()) +
               ", \"pushes\": " + std::to_string(p->pushes()) + ", \"pulls\": " + std::to_string(p->pulls()) +
               ", \"parked_pulls\": " + std::to_string(p->parked_pulls());
          if (const wire::ColdTierStats* c = p->cold()) {
            const uint64_t looked = c->hits() + c->reads();
            o += ", \"cold_tier\": {\"hot_rows\": " + std::to_string(c->hot_rows()) +
                 ", \"cold_rows\": " + std::to_string(c->cold_rows()) + ", \"hits\": " + std::to_string(c->hits()) +
                 ", \"reads\": " + std::to_string(c->reads()) + ", \"hit_rate\": " +
                 (looked ? Num(static_cast<double>(c->hits()) / static_cast<double>(looked)) : std::string("null")) +
                 ", \"moved_down\": " + std::to_string(c->moved_down()) +
                 ", \"bytes_read\": " + std::to_string(c->bytes_read()) +
                 ", \"bytes_written\": " + std::to_string(c->bytes_written()) + "}";
          }
        }
        o += "}";
      }
    o += "], \"workers\": [";
    for (size_t i = 0; i < clocks.size(); ++i)
      o += (i ? ", " : "") + std::string("{\"rank\": ") + std::to_string(clocks[i].rank) +
           ", \"clock\": " + std::to_string(clocks[i].clock) + ", \"alive\": " + (clocks[i].alive ? "true" : "false") + "}";
    o += "], \"waiting\": [";
    for (size_t i = 0; i < waits.size(); ++i)
      o += (i ? ", " : "") + std::string("{\"worker\": ") + std::to_string(waits[i]->worker()) +
           ", \"clock\": " + std::to_string(waits[i]->clock()) + ", \"waits_for\": " + std::to_string(waits[i]->waits_for()) +
           ", \"their_clock\": " + std::to_string(waits[i]->their_clock()) + "}";
    o += "], \"shard_map\": {\"version\": " + std::to_string(js->map_version()) +
         ", \"replicas\": " + std::to_string(std::max<uint32_t>(1, js->replicas())) + ", \"groups\": [";
    const auto groups = GroupsOf(*js);
    for (size_t g = 0; g < groups.size(); ++g) {
      o += (g ? ", [" : "[");
      for (size_t k = 0; k < groups[g].size(); ++k) o += (k ? ", " : "") + std::to_string(groups[g][k]);
      o += "]";
    }
    o += "]";
    if (js->group_joining()) {  // re-replication under way: group -> the server being filled (-1: none)
      o += ", \"joining\": [";
      for (uint32_t g = 0; g < js->group_joining()->size(); ++g) {
        const uint32_t j = js->group_joining()->Get(g);
        o += (g ? ", " : "") + (j == 0xffffffffu ? std::string("-1") : std::to_string(j));
      }
      o += "]";
    }
    if (js->group_leaving()) {  // moves under way: group -> the server whose copy leaves (-1: none)
      o += ", \"leaving\": [";
      for (uint32_t g = 0; g < js->group_leaving()->size(); ++g) {
        const uint32_t l = js->group_leaving()->Get(g);
        o += (g ? ", " : "") + (l == 0xffffffffu ? std::string("-1") : std::to_string(l));
      }
      o += "]";
    }
    if (js->draining()) {
      o += ", \"draining\": [";
      for (uint32_t i = 0; i < js->draining()->size(); ++i) o += (i ? ", " : "") + std::to_string(js->draining()->Get(i));
      o += "]";
    }
    o += "}";
    o += ", \"snapshots\": {\"dir\": " + JsonString(Str(js->snapshot_dir())) +
         ", \"taken\": " + std::to_string(js->snapshots_taken()) +
         ", \"latest_clock\": " + std::to_string(js->latest_snapshot_clock()) +
         ", \"latest\": " + JsonString(Str(js->latest_snapshot())) +
         ", \"latest_seconds\": " + Num(js->latest_snapshot_ms() / 1000.0) + "}}";
    std::printf("%s\n", o.c_str());
    return 0;
  }

  std::fputs(StatusText(*js, lo, hi, waits).c_str(), stdout);
  return 0;
}

volatile std::sig_atomic_t g_stop_top = 0;

// `top`: the status redrawn every `interval` s until Ctrl-C (or once), with
// each worker's clocks per second since the frame before. A coordinator
// that does not answer is said in the frame, and asked again.
int CmdTop(const std::string& coordinator, double interval, bool once, int timeout_sec) {
  std::signal(SIGINT, [](int) { g_stop_top = 1; });
  std::signal(SIGTERM, [](int) { g_stop_top = 1; });
  const bool redraw = !once && isatty(STDOUT_FILENO);
  std::map<int, std::pair<int64_t, Clock::time_point>> before;  // worker -> (clock, when) in the last frame
  for (int frame = 0; !g_stop_top; ++frame) {
    zmq::message_t m;
    const wire::Header* h = nullptr;
    std::vector<uint64_t> scratch;
    std::string text;
    const std::time_t now = std::time(nullptr);
    char when[32];
    std::strftime(when, sizeof when, "%H:%M:%S", std::localtime(&now));
    Appendf(&text, "shardps-ctl top %s | %s%s\n", coordinator.c_str(), when,
            once ? "" : (" | every " + Num(interval) + " s, Ctrl-C to quit").c_str());
    Status s = Call(coordinator, wire::MsgType::GetStatus, timeout_sec, &m, &h, &scratch);
    const wire::JobStatus* js = s.ok() ? h->body_as_JobStatus() : nullptr;
    if (!js) {
      if (once) return Fail(s.ok() ? "the coordinator's reply has no status" : s.ToString());
      Appendf(&text, "coordinator not answering: %s (asking again)\n", s.ToString().c_str());
    } else {
      const StatusView v = ViewOf(*js);
      text += StatusText(*js, v.lo, v.hi, v.waits);
      std::string rates;
      const auto t = Clock::now();
      for (const auto& w : v.clocks) {
        auto it = before.find(w.rank);
        if (it != before.end() && w.clock >= it->second.first && t > it->second.second) {
          const double sec = std::chrono::duration<double>(t - it->second.second).count();
          Appendf(&rates, "%sworker %d %.1f", rates.empty() ? "" : ", ", w.rank, (w.clock - it->second.first) / sec);
        }
        before[w.rank] = {w.clock, t};
      }
      Appendf(&text, "clocks/s: %s\n", rates.empty() ? "- (from the next frame)" : rates.c_str());
    }
    if (redraw) {
      std::fputs("\x1b[H\x1b[J", stdout);  // home, clear to the end
    } else if (frame > 0) {
      std::fputs("\n", stdout);
    }
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
    if (once) break;
    for (auto end = Clock::now() + std::chrono::duration<double>(interval); !g_stop_top && Clock::now() < end;)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return 0;
}

int CmdSnapshot(const std::string& coordinator, int timeout_sec) {
  zmq::message_t m;
  const wire::Header* h = nullptr;
  std::vector<uint64_t> scratch;
  Status s = Call(coordinator, wire::MsgType::SnapshotNow, timeout_sec, &m, &h, &scratch);
  if (!s.ok()) return Fail("snapshot failed: " + s.ToString());
  std::printf("snapshot complete: %s (clock %lld)\n", Str(h->message()).c_str(), static_cast<long long>(h->clock()));
  return 0;
}

int CmdStop(const std::string& coordinator, int timeout_sec) {
  zmq::message_t m;
  const wire::Header* h = nullptr;
  std::vector<uint64_t> scratch;
  Status s = Call(coordinator, wire::MsgType::Stop, timeout_sec, &m, &h, &scratch);
  if (!s.ok()) return Fail("stop: " + s.ToString());
  if (h->clock() >= 0)
    std::printf("job stopped; latest snapshot %s (clock %lld)\n", Str(h->message()).c_str(), static_cast<long long>(h->clock()));
  else
    std::printf("job stopped\n");
  return 0;
}

int CmdRollback(const std::string& coordinator, int timeout_sec) {
  zmq::message_t m;
  const wire::Header* h = nullptr;
  std::vector<uint64_t> scratch;
  Status s = Call(coordinator, wire::MsgType::Rollback, timeout_sec, &m, &h, &scratch);
  if (!s.ok()) return Fail("rollback: " + s.ToString());
  std::printf("rolled back to %s (clock %lld): start every server and worker again\n", Str(h->message()).c_str(),
              static_cast<long long>(h->clock()));
  return 0;
}

// declare-dead / drain-server: an admin's request about server `server`
// (add-server, rebalance: about none, -1); prints the coordinator's answer.
int CmdServerAction(const std::string& coordinator, wire::MsgType type, const char* name, int server, int timeout_sec) {
  zmq::message_t m;
  const wire::Header* h = nullptr;
  std::vector<uint64_t> scratch;
  Status s = Call(coordinator, type, timeout_sec, &m, &h, &scratch, server);
  if (!s.ok()) return Fail(std::string(name) + ": " + s.ToString());
  std::printf("%s\n", Str(h->message()).c_str());
  return 0;
}

// move-group: server `from`'s copy of group `group` moves to server `to`.
int CmdMoveGroup(const std::string& coordinator, uint32_t group, uint32_t from, uint32_t to, int timeout_sec) {
  zmq::message_t m;
  const wire::Header* h = nullptr;
  std::vector<uint64_t> scratch;
  BodyOf body{wire::Body::MoveRequest, [&](flatbuffers::FlatBufferBuilder& b) {
                return wire::CreateMoveRequest(b, group, from, to).Union();
              }};
  Status s = Call(coordinator, wire::MsgType::MoveGroup, timeout_sec, &m, &h, &scratch, -1, body);
  if (!s.ok()) return Fail("move-group: " + s.ToString());
  std::printf("%s\n", Str(h->message()).c_str());
  return 0;
}

bool Resolve(const std::string& host, const std::string& port, addrinfo** res, std::string* err) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, res);
  if (rc != 0) *err = gai_strerror(rc);
  return rc == 0;
}

int CmdProbeListen(const std::string& address, int seconds) {
  addrinfo* res = nullptr;
  std::string err;
  if (!Resolve(address, "0", &res, &err)) return Fail("cannot resolve '" + address + "': " + err, 2);
  int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (fd < 0 || ::bind(fd, res->ai_addr, res->ai_addrlen) != 0 || ::listen(fd, 64) != 0) {
    const int e = errno;
    freeaddrinfo(res);
    return Fail("cannot listen on " + address + ": " + std::strerror(e), 1);
  }
  freeaddrinfo(res);
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  const int port = ntohs(ss.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                                                 : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  std::printf("%d\n", port);
  std::fflush(stdout);
  // Accept until the time is up or standard input closes (the launcher went).
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < end) {
    pollfd p[2] = {{fd, POLLIN, 0}, {0, POLLIN, 0}};
    if (::poll(p, 2, 200) <= 0) continue;
    if (p[0].revents & POLLIN) {
      int c = ::accept(fd, nullptr, nullptr);
      if (c >= 0) ::close(c);
    }
    if (p[1].revents & (POLLIN | POLLHUP)) {
      char b[64];
      if (::read(0, b, sizeof b) <= 0) break;
    }
  }
  ::close(fd);
  return 0;
}

// HOST:PORT ([v6]:PORT too); tcp:// prefix allowed.
int CmdProbeConnect(const std::vector<std::string>& targets, int timeout_ms) {
  int failed = 0;
  for (std::string t : targets) {
    if (t.rfind("tcp://", 0) == 0) t = t.substr(6);
    const size_t colon = t.rfind(':');
    if (colon == std::string::npos) {
      std::printf("fail %s: not HOST:PORT\n", t.c_str());
      ++failed;
      continue;
    }
    std::string host = t.substr(0, colon), port = t.substr(colon + 1), err;
    if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
    addrinfo* res = nullptr;
    if (!Resolve(host, port, &res, &err)) {
      std::printf("fail %s: cannot resolve: %s\n", t.c_str(), err.c_str());
      ++failed;
      continue;
    }
    int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int rc = ::connect(fd, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    int e = rc == 0 ? 0 : errno;
    if (rc != 0 && e == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, timeout_ms) <= 0) {
        e = ETIMEDOUT;
      } else {
        socklen_t len = sizeof e;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len);
      }
    }
    ::close(fd);
    if (e == 0) {
      std::printf("ok %s\n", t.c_str());
    } else {
      std::printf("fail %s: %s\n", t.c_str(), e == ETIMEDOUT ? "no answer in time (filtered or unroutable?)" : std::strerror(e));
      ++failed;
    }
  }
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace shardps

int main(int argc, char** argv) {
  using namespace shardps;
  CLI::App app{"shardps-ctl: status, snapshot and stop of a running shardps job"};
  app.require_subcommand(1);
  std::string coordinator, address;
  bool json = false;
  int timeout_sec = 30, snap_timeout = 600, stop_timeout = 600, seconds = 60, timeout_ms = 3000;
  std::vector<std::string> targets;
  std::string key_file;
  app.fallthrough();  // --key and --run-dir after the subcommand, too
  app.add_option("--key", key_file, "security on: this tool's key (admin.key for snapshot and stop; observer.key is enough for status); without it: the key --run-dir gives, else $SHARDPS_KEY");
  std::string run_dir;
  app.add_option("--run-dir", run_dir,
                 "a job shardps-launch started: its run directory (or its job.json) gives the coordinator and, with "
                 "security on, the key (admin.key or observer.key, as the command needs); COORDINATOR may then be left out");
  auto* status = app.add_subcommand("status", "every process, worker clocks, rates per server, who waits on whom");
  status->add_option("COORDINATOR", coordinator, "coordinator endpoint, e.g. tcp://10.0.0.1:5555, or every coordinator of a job with standbys: A,B (or --run-dir)");
  status->add_flag("--json", json, "one JSON object");
  status->add_option("--timeout-sec", timeout_sec)->check(CLI::Range(1, 3600))->capture_default_str();
  double interval = 1.0;
  bool once = false;
  auto* top = app.add_subcommand("top", "the status redrawn in place every second (clocks/s per worker too) until Ctrl-C");
  top->add_option("COORDINATOR", coordinator);
  top->add_option("--interval-sec", interval, "seconds between frames")->check(CLI::Range(0.1, 3600.0))->capture_default_str();
  top->add_flag("--once", once, "print one frame and exit");
  top->add_option("--timeout-sec", timeout_sec, "for each frame's answer")->check(CLI::Range(1, 3600))->capture_default_str();
  auto* snap = app.add_subcommand("snapshot", "take a snapshot now and wait until it is complete");
  snap->add_option("COORDINATOR", coordinator);
  snap->add_option("--timeout-sec", snap_timeout)->check(CLI::Range(1, 86400))->capture_default_str();
  auto* stop = app.add_subcommand("stop", "workers finish their step and leave, a final snapshot (if configured), every process exits 0");
  stop->add_option("COORDINATOR", coordinator);
  stop->add_option("--timeout-sec", stop_timeout)->check(CLI::Range(1, 86400))->capture_default_str();
  auto* rollback = app.add_subcommand("rollback", "after a server died: the job goes back to its newest complete snapshot (then start every server and worker again)");
  rollback->add_option("COORDINATOR", coordinator);
  rollback->add_option("--timeout-sec", timeout_sec)->check(CLI::Range(1, 3600))->capture_default_str();
  int dead_server = -1;
  int drain_server = -1;
  auto* drain = app.add_subcommand("drain-server", "move server SERVER's copies of its groups to other servers while the job runs (replicas >= 2), then let it exit 0");
  std::vector<std::string> drain_args, move_args, declare_args;  // [COORDINATOR] then numbers
  drain->add_option("ARGS", drain_args, "[COORDINATOR] SERVER: the rank of the server to drain")->required();
  drain->add_option("--timeout-sec", timeout_sec)->check(CLI::Range(1, 3600))->capture_default_str();
  auto* add = app.add_subcommand("add-server", "open one more server rank in the running job (replicas >= 2) and print it: the server started on it gets copies of groups moved onto it");
  add->add_option("COORDINATOR", coordinator);
  add->add_option("--timeout-sec", timeout_sec)->check(CLI::Range(1, 3600))->capture_default_str();
  auto* rebalance = app.add_subcommand("rebalance", "move copies of groups from the most to the least loaded live servers while the job runs (replicas >= 2)");
  rebalance->add_option("COORDINATOR", coordinator);
  rebalance->add_option("--timeout-sec", timeout_sec)->check(CLI::Range(1, 3600))->capture_default_str();
  uint32_t move_group = 0, move_from = 0, move_to = 0;
  auto* move = app.add_subcommand("move-group", "move server FROM's copy of group GROUP to server TO while the job runs (replicas >= 2): TO is filled with a copy, then FROM's copy leaves");
  move->add_option("ARGS", move_args,
                   "[COORDINATOR] GROUP FROM TO: the replica group, the server whose copy leaves, the server that takes a copy")
      ->required();
  move->add_option("--timeout-sec", timeout_sec)->check(CLI::Range(1, 3600))->capture_default_str();
  auto* declare = app.add_subcommand("declare-dead", "server SERVER's process ended: with replicas, its groups are served by their backups now (no rollback); fails, saying why, where a group would lose its last copy");
  declare->add_option("ARGS", declare_args, "[COORDINATOR] SERVER: the dead server's rank")->required();
  declare->add_option("--timeout-sec", timeout_sec)->check(CLI::Range(1, 3600))->capture_default_str();
  auto* listen = app.add_subcommand("probe-listen", "(launcher checks) listen on ADDRESS, print the port");
  listen->add_option("ADDRESS", address)->required();
  listen->add_option("--seconds", seconds)->check(CLI::Range(1, 3600))->capture_default_str();
  auto* connect = app.add_subcommand("probe-connect", "(launcher checks) TCP-connect to each HOST:PORT");
  connect->add_option("TARGETS", targets)->required();
  connect->add_option("--timeout-ms", timeout_ms)->check(CLI::Range(1, 600000))->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const bool probe = *listen || *connect;
  {
    std::vector<long> v;
    std::string err;
    if (*drain) {
      err = NumbersAfterCoordinator(drain_args, {{"SERVER", 4095}}, &coordinator, &v);
      if (err.empty()) drain_server = static_cast<int>(v[0]);
    } else if (*declare) {
      err = NumbersAfterCoordinator(declare_args, {{"SERVER", 4095}}, &coordinator, &v);
      if (err.empty()) dead_server = static_cast<int>(v[0]);
    } else if (*move) {
      err = NumbersAfterCoordinator(move_args, {{"GROUP", 1 << 20}, {"FROM", 4095}, {"TO", 4095}}, &coordinator, &v);
      if (err.empty()) {
        move_group = static_cast<uint32_t>(v[0]);
        move_from = static_cast<uint32_t>(v[1]);
        move_to = static_cast<uint32_t>(v[2]);
      }
    }
    if (!err.empty()) return Fail(err, 2);
  }
  const bool admin = !*status && !*top;  // everything else changes the job
  g_key_needed = admin ? "admin.key" : "observer.key";
  if (!run_dir.empty() && !probe) {
    RunDirJob job;
    if (Status s = ReadRunDir(run_dir, &job); !s.ok()) return Fail("--run-dir: " + s.message(), 2);
    if (coordinator.empty()) coordinator = job.coordinator;
    if (key_file.empty()) key_file = RunDirKey(job, admin);
    if (coordinator.empty())
      return Fail("--run-dir: '" + run_dir + "' names no coordinator yet (the job is " +
                  (job.state.empty() ? std::string("starting") : job.state) + ")", 2);
  }
  if (const char* env = std::getenv("SHARDPS_KEY"); key_file.empty() && run_dir.empty() && env) key_file = env;
  if (coordinator.empty() && !probe)
    return Fail("the coordinator's endpoint is missing: give COORDINATOR (tcp://HOST:PORT) or the job's run directory "
                "(--run-dir DIR)", 2);
  if (!key_file.empty() && !probe) {
    KeyFile k;
    if (Status s = LoadKeyFile(key_file, &k); !s.ok()) return Fail("--key: " + s.message(), 2);
    g_key = std::move(k);
  }
  if (*status) return CmdStatus(coordinator, json, timeout_sec);
  if (*top) return CmdTop(coordinator, interval, once, timeout_sec);
  if (*snap) return CmdSnapshot(coordinator, snap_timeout);
  if (*stop) return CmdStop(coordinator, stop_timeout);
  if (*rollback) return CmdRollback(coordinator, timeout_sec);
  if (*declare) return CmdServerAction(coordinator, wire::MsgType::DeclareDead, "declare-dead", dead_server, timeout_sec);
  if (*drain) return CmdServerAction(coordinator, wire::MsgType::DrainServer, "drain-server", drain_server, timeout_sec);
  if (*add) return CmdServerAction(coordinator, wire::MsgType::AddServer, "add-server", -1, timeout_sec);
  if (*move) return CmdMoveGroup(coordinator, move_group, move_from, move_to, timeout_sec);
  if (*rebalance) return CmdServerAction(coordinator, wire::MsgType::Rebalance, "rebalance", -1, timeout_sec);
  if (*listen) return CmdProbeListen(address, seconds);
  if (*connect) return CmdProbeConnect(targets, timeout_ms);
  return 2;
}
