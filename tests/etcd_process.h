// A one-member etcd on loopback for a test (Debian's etcd-server): its own
// data directory, free ports, stopped with the object. Header-only: used by
// tests in tests/ and in server/coordinator/store/.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "common/base/process.h"

namespace shardps::testing {

// A TCP port free on loopback now (bound, read, closed); 0 if none.
inline int FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t n = sizeof a;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

class EtcdProcess {
 public:
  EtcdProcess() = default;
  EtcdProcess(const EtcdProcess&) = delete;
  EtcdProcess& operator=(const EtcdProcess&) = delete;
  ~EtcdProcess() { Stop(); }
  void Stop() {
    if (pid_ > 0) ReapSpawned(pid_);
    pid_ = -1;
  }
  // Starts etcd with its data under `dir` and waits (at most 15 s) for its
  // "ready to serve client requests"; "" when it serves, else why not (the
  // caller skips the test saying so).
  std::string Start(const std::string& dir) {
    if (access("/usr/bin/etcd", X_OK) != 0) return "no /usr/bin/etcd (Debian's etcd-server)";
    const int client = FreeLoopbackPort(), peer = FreeLoopbackPort();
    if (!client || !peer) return "no free port on loopback";
    endpoint_ = "127.0.0.1:" + std::to_string(client);
    const std::string peer_url = "http://127.0.0.1:" + std::to_string(peer), log = dir + "/etcd.log";
    pid_ = SpawnProcess({"/usr/bin/etcd", "--name", "t", "--data-dir", dir + "/etcd-data", "--listen-client-urls",
                         "http://" + endpoint_, "--advertise-client-urls", "http://" + endpoint_, "--listen-peer-urls",
                         peer_url, "--initial-advertise-peer-urls", peer_url, "--initial-cluster", "t=" + peer_url},
                        log);
    if (pid_ <= 0) return "cannot start /usr/bin/etcd";
    for (int i = 0; i < 150; ++i) {
      std::ifstream f(log);
      std::stringstream text;
      text << f.rdbuf();
      if (text.str().find("ready to serve client requests") != std::string::npos) return "";
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return "etcd did not serve within 15 s (" + log + ")";
  }
  const std::string& endpoint() const { return endpoint_; }  // HOST:PORT
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  std::string endpoint_;
};

}  // namespace shardps::testing
