#include "tests/cluster.h"

#include "common/base/process.h"
#include "tests/etcd_process.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>

namespace shardps::testing {

std::string BinaryPath(const char* env_name) {
  const char* p = std::getenv(env_name);
  if (!p) {
    std::fprintf(stderr, "environment variable %s is not set (run through meson test)\n", env_name);
    std::abort();
  }
  return p;
}

static std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

pid_t LocalCluster::Spawn(const std::string& name, const std::vector<std::string>& argv) {
  std::string log = dir_ + "/" + name + ".log";
  pid_t pid = SpawnProcess(argv, log);
  if (pid > 0) {
    pids_.push_back(pid);
    logs_.push_back(log);
  }
  return pid;
}

Status LocalCluster::Start(const ClusterOptions& o) {
  if (!o.dir.empty()) {
    dir_ = o.dir;
    own_dir_ = false;
  } else {
    char tmpl[] = "/tmp/shardps-test-XXXXXX";
    if (!mkdtemp(tmpl)) return Status::Internal("mkdtemp failed");
    dir_ = tmpl;
  }
  std::vector<std::string> cargs = {BinaryPath("SHARDPS_COORDINATOR"),
                                    "--endpoint-file", dir_ + "/coordinator.endpoint",
                                    "--servers", std::to_string(o.servers),
                                    "--workers", std::to_string(o.workers),
                                    "--consistency", o.consistency,
                                    "--partitions", std::to_string(o.partitions),
                                    "--heartbeat-timeout-ms", std::to_string(o.heartbeat_timeout_ms)};
  if (o.consistency == "bounded") {
    cargs.push_back("--staleness");
    cargs.push_back(std::to_string(o.staleness));
  }
  cargs.insert(cargs.end(), o.coordinator_args.begin(), o.coordinator_args.end());
  if (!o.job_toml.empty()) {
    std::ofstream(dir_ + "/job.toml") << o.job_toml;
    cargs.push_back("--config");
    cargs.push_back(dir_ + "/job.toml");
  }
  std::vector<std::string> standby;  // with etcd: the standby's argv (on its own fixed endpoint)
  if (!o.etcd.empty()) {
    const std::string url = "etcd://" + o.etcd + "/tests/" + dir_.substr(dir_.rfind('/') + 1);
    const int leader_port = FreeLoopbackPort(), standby_port = FreeLoopbackPort();
    if (!leader_port || !standby_port) return Status::Internal("no free port on loopback");
    cargs.insert(cargs.end(), {"--store", url});
    standby = cargs;
    standby[2] = dir_ + "/standby.endpoint";  // (--endpoint-file: written once it leads)
    cargs.insert(cargs.end(), {"--bind", "tcp://127.0.0.1:" + std::to_string(leader_port)});
    standby.insert(standby.end(), {"--bind", "tcp://127.0.0.1:" + std::to_string(standby_port), "--standby"});
  }
  if (Spawn("coordinator", cargs) < 0) return Status::Internal("cannot start the coordinator");
  const std::string ep_file = dir_ + "/coordinator.endpoint";
  if (!WaitFor([&] { return access(ep_file.c_str(), R_OK) == 0; }, std::chrono::seconds(30))) {
    DumpLogs();
    return Status::Timeout("coordinator wrote no endpoint file within 30 s");
  }
  coordinator_ = ReadFile(ep_file);
  while (!coordinator_.empty() && coordinator_.back() == '\n') coordinator_.pop_back();
  if (!standby.empty()) {
    standby_ = SpawnProcess(standby, dir_ + "/standby.log");
    if (standby_ <= 0) return Status::Internal("cannot start the standby coordinator");
    logs_.push_back(dir_ + "/standby.log");
    coordinator_ += "," + standby[standby.size() - 2];
  }
  server_args_ = o.server_args;
  server_starts_.assign(o.servers, 1);
  for (int i = 0; i < o.servers; ++i) {
    std::vector<std::string> sargs = {BinaryPath("SHARDPS_SERVER"), "--coordinator", coordinator_,
                                      "--rank", std::to_string(i), "--heartbeat-ms", "200"};
    sargs.insert(sargs.end(), o.server_args.begin(), o.server_args.end());
    if (Spawn("server" + std::to_string(i), sargs) < 0) return Status::Internal("cannot start a server");
  }
  return Status::OK();
}

Status LocalCluster::StartServer(int rank) {
  if (rank < 0 || static_cast<size_t>(rank) > server_starts_.size()) return Status::InvalidArgument("no such server rank");
  std::vector<std::string> sargs = {BinaryPath("SHARDPS_SERVER"), "--coordinator", coordinator_,
                                    "--rank", std::to_string(rank), "--heartbeat-ms", "200"};
  sargs.insert(sargs.end(), server_args_.begin(), server_args_.end());
  const bool added = static_cast<size_t>(rank) == server_starts_.size();  // a rank opened by add-server
  if (added) {
    if (pids_.size() != static_cast<size_t>(rank) + 1)  // (pids_: the coordinator, then the servers)
      return Status::InvalidArgument("a server rank is added only while the cluster has no other process");
    server_starts_.push_back(0);
    pids_.push_back(0);
  }
  const std::string name = "server" + std::to_string(rank) +
                           (added ? "" : "." + std::to_string(server_starts_[rank] + 1));
  ++server_starts_[rank];
  const std::string log = dir_ + "/" + name + ".log";
  const pid_t pid = SpawnProcess(sargs, log);
  if (pid <= 0) return Status::Internal("cannot start a server");
  pids_[rank + 1] = pid;
  logs_.push_back(log);
  return Status::OK();
}

int LocalCluster::WaitServerExit(int rank, std::chrono::seconds timeout) {
  if (static_cast<size_t>(rank + 1) >= pids_.size()) return -1;
  const pid_t p = pids_[rank + 1];
  int st = 0;
  if (!WaitFor([&] { return waitpid(p, &st, WNOHANG) == p; }, timeout)) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

std::string LocalCluster::ServerEndpoint(int rank) {
  const std::string log = dir_ + "/server" + std::to_string(rank) + ".log";
  std::regex re("serving on (tcp://[^ \\n]+)");
  std::smatch m;
  std::string text;
  WaitFor([&] {
    text = ReadFile(log);
    return std::regex_search(text, m, re);
  }, std::chrono::seconds(30));
  return std::regex_search(text, m, re) ? m[1].str() : "";
}

std::unique_ptr<Client> ConnectClient(const LocalCluster& c, ClientRole role, int rank) {
  ClientOptions o;
  o.coordinator = c.coordinator();
  o.role = role;
  o.rank = rank;
  o.connect_timeout = std::chrono::seconds(60);
  o.request_timeout = std::chrono::seconds(60);
  o.heartbeat_interval = std::chrono::milliseconds(200);
  std::unique_ptr<Client> client;
  Status s = Client::Connect(o, &client);
  if (!s.ok()) {
    ADD_FAILURE() << "cannot connect to " << c.coordinator() << ": " << s.ToString();
    return nullptr;
  }
  return client;
}

std::string LocalCluster::Log(const std::string& name) const { return ReadFile(dir_ + "/" + name + ".log"); }

void LocalCluster::KillServer(int rank, int sig) {
  // pids_: coordinator first, then servers in rank order.
  if (static_cast<size_t>(rank + 1) >= pids_.size()) return;
  pid_t p = pids_[rank + 1];
  kill(p, sig);
  int st;
  waitpid(p, &st, 0);
}

void LocalCluster::KillCoordinator(int sig) {
  if (pids_.empty() || pids_[0] <= 0) return;
  kill(pids_[0], sig);
  int st;
  waitpid(pids_[0], &st, 0);
  pids_[0] = -1;  // (reaped: never signalled again)
}

void LocalCluster::DumpLogs() const {
  for (const auto& l : logs_) {
    std::string text = ReadFile(l);
    if (text.size() > 4000) text = "..." + text.substr(text.size() - 4000);
    std::fprintf(stderr, "==== %s ====\n%s\n", l.c_str(), text.c_str());
  }
}

LocalCluster::~LocalCluster() {
  if (standby_ > 0) pids_.push_back(standby_);
  std::erase_if(pids_, [](pid_t p) { return p <= 0; });
  for (pid_t p : pids_) kill(p, SIGTERM);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (pid_t p : pids_) {
    int st;
    while (waitpid(p, &st, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(p, SIGKILL);
        waitpid(p, &st, 0);
        break;
      }
      usleep(10000);
    }
  }
  if (own_dir_ && !dir_.empty() && !std::getenv("SHARDPS_KEEP_TEST_DIRS")) {
    std::string cmd = "rm -rf '" + dir_ + "'";
    if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir_.c_str());
  }
}

int RunCommand(const std::vector<std::string>& argv, std::string* output, int timeout_s) {
  std::string cmd = "timeout " + std::to_string(timeout_s);
  for (const auto& a : argv) {
    std::string q;
    for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    cmd += " '" + q + "'";
  }
  cmd += " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  output->clear();
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) output->append(buf, n);
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

namespace {
// GET http://HOST:PORT/metrics: the body, or "" on any failure.
std::string HttpGet(const std::string& host, int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  timeval tv{30, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string out;
  if (inet_pton(AF_INET, host.c_str(), &a.sin_addr) == 1 &&
      ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    const std::string req = "GET /metrics HTTP/1.0\r\nHost: " + host + "\r\n\r\n";
    if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size())) {
      char buf[65536];
      for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) out.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  return out;
}
}  // namespace

std::string MetricsOf(const LocalCluster& c, const std::string& role) {
  std::string out;
  int rc = RunCommand({BinaryPath("SHARDPS_CTL"), "status", c.coordinator(), "--json"}, &out);
  if (rc != 0) {
    ADD_FAILURE() << "shardps-ctl status: " << out;
    return "";
  }
  std::smatch m;
  if (!std::regex_search(out, m, std::regex("\"role\": ?\"" + role + R"("[^}]*"metrics_url": ?"http://([0-9.]+):(\d+))"))) {
    ADD_FAILURE() << "no " << role << " metrics_url in: " << out;
    return "";
  }
  return HttpGet(m[1], std::stoi(m[2]));
}

std::string ServerMetrics(const LocalCluster& c) { return MetricsOf(c, "server"); }

double MetricValue(const std::string& metrics, const std::string& series) {
  std::string quoted;  // the series literally, in a regex
  for (char c : series) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) quoted += '\\';
    quoted += c;
  }
  std::smatch m;
  if (!std::regex_search(metrics, m, std::regex("\n" + quoted + " ([0-9.e+-]+)"))) return -1;
  return std::stod(m[1]);
}

}  // namespace shardps::testing
