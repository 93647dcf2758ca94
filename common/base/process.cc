#include "common/base/process.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <spawn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

extern char** environ;

namespace shardps {

namespace {
constexpr int kMaxSpawned = 256;
std::atomic<pid_t> g_spawned[kMaxSpawned];

void Remember(pid_t pid) {
  for (auto& slot : g_spawned) {
    pid_t empty = 0;
    if (slot.compare_exchange_strong(empty, pid)) return;
  }
}

extern "C" void StopSpawnedAndDie(int sig) {
  for (auto& slot : g_spawned) {
    const pid_t p = slot.load();
    if (p > 0) kill(p, SIGTERM);
  }
  signal(sig, SIG_DFL);
  raise(sig);
}
}  // namespace

void ReapSpawned(pid_t pid, bool term) {
  if (pid <= 0) return;
  if (term) kill(pid, SIGTERM);
  int st;
  waitpid(pid, &st, 0);
  for (auto& slot : g_spawned) {
    pid_t p = pid;
    if (slot.compare_exchange_strong(p, 0)) break;
  }
}

void StopSpawnedOnSignal() {
  struct sigaction sa {};
  sa.sa_handler = StopSpawnedAndDie;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

pid_t SpawnProcess(const std::vector<std::string>& argv, const std::string& log) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> env;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "SHARDPS_DIE_WITH_PARENT=", 24) != 0) env.push_back(*e);
  char die[] = "SHARDPS_DIE_WITH_PARENT=1";
  env.push_back(die);
  env.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, args[0], &fa, nullptr, args.data(), env.data()) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  if (pid > 0) Remember(pid);
  return pid;
}

std::string SelfPath() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

std::string SiblingServerDir() {
  std::string p = SelfPath();
  p = p.substr(0, p.rfind('/'));  // build/tools
  return p.substr(0, p.rfind('/')) + "/server";
}

std::string WaitForFileLine(const std::string& path, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    std::ifstream f(path);
    std::string line;
    if (f && std::getline(f, line) && !line.empty()) return line;
    if (std::chrono::steady_clock::now() >= end) return "";
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

Status PinToCpus(const std::string& list) {
  cpu_set_t set;
  CPU_ZERO(&set);
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("CPU list '" + list + "': " + why + " (expected e.g. 3, 0,2 or 0-3)");
  };
  if (list.empty()) return bad("empty");
  size_t pos = 0;
  while (pos <= list.size()) {
    const size_t comma = std::min(list.find(',', pos), list.size());
    const std::string item = list.substr(pos, comma - pos);
    const size_t dash = item.find('-');
    auto num = [&](const std::string& t, long* v) {
      if (t.empty() || t.find_first_not_of("0123456789") != std::string::npos || t.size() > 6) return false;
      *v = std::stol(t);
      return *v < CPU_SETSIZE;
    };
    long lo, hi;
    if (dash == std::string::npos) {
      if (!num(item, &lo)) return bad("'" + item + "' is not a CPU number");
      hi = lo;
    } else if (!num(item.substr(0, dash), &lo) || !num(item.substr(dash + 1), &hi) || hi < lo) {
      return bad("'" + item + "' is not a CPU range");
    }
    for (long c = lo; c <= hi; ++c) CPU_SET(c, &set);
    pos = comma + 1;
  }
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set) && !CPU_ISSET(c, &allowed))
        return Status::InvalidArgument("CPU list '" + list + "': CPU " + std::to_string(c) +
                                       " is not available to this process (it may use " +
                                       std::to_string(CPU_COUNT(&allowed)) + " CPUs)");
  }
  if (sched_setaffinity(0, sizeof(set), &set) != 0)
    return Status::InvalidArgument("CPU list '" + list + "': sched_setaffinity failed: " + std::strerror(errno));
  return Status::OK();
}

}  // namespace shardps
