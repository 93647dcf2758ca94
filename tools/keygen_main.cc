// shardps-keygen DIR: the CURVE keys of one job (docs/security.md).
#include <CLI/CLI.hpp>

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "common/net/security.h"

int main(int argc, char** argv) {
  using namespace shardps;
  CLI::App app{"shardps-keygen: make a job's CURVE keys: DIR/server.key, worker.key, observer.key, admin.key and DIR/access"};
  std::string dir;
  std::vector<std::string> extra;
  app.add_option("DIR", dir, "directory to create (mode 700), or an existing one without keys in it")->required();
  app.add_option("--extra", extra,
                 "also make DIR/NAME.key of ROLE and list it, e.g. --extra host3:worker (repeatable): one key per host lets a host be struck from the access list alone");
  CLI11_PARSE(app, argc, argv);

  auto fail = [](const std::string& msg) {
    std::fprintf(stderr, "error: %s\n", msg.c_str());
    return 2;
  };
  std::vector<std::pair<std::string, KeyRole>> keys = {
      {"worker", KeyRole::kWorker}, {"observer", KeyRole::kObserver}, {"admin", KeyRole::kAdmin}};
  for (const auto& e : extra) {
    const size_t colon = e.find(':');
    KeyRole role;
    if (colon == std::string::npos || colon == 0 || !ParseKeyRole(e.substr(colon + 1), &role))
      return fail("--extra '" + e + "': expected NAME:ROLE with ROLE worker, observer or admin");
    const std::string name = e.substr(0, colon);
    if (name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != std::string::npos ||
        name[0] == '.')
      return fail("--extra '" + e + "': NAME may hold letters, digits, '.', '_' and '-' only");
    if (role == KeyRole::kServer) return fail("--extra '" + e + "': there is one server key per job (server.key)");
    for (const auto& [n, r] : keys)
      if (n == name || name == "server") return fail("--extra '" + e + "': '" + name + "' is taken");
    keys.emplace_back(name, role);
  }
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return fail("cannot create '" + dir + "': " + std::strerror(errno));
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return fail("'" + dir + "' is not a directory");
  for (const char* f : {"server.key", "access"}) {
    if (::stat((dir + "/" + f).c_str(), &st) == 0)
      return fail("'" + dir + "/" + f + "' exists: not replacing a job's keys (choose a new directory)");
  }
  for (const auto& [n, r] : keys)
    if (::stat((dir + "/" + n + ".key").c_str(), &st) == 0)
      return fail("'" + dir + "/" + n + ".key' exists: not replacing a job's keys (choose a new directory)");

  KeyFile server;
  server.role = KeyRole::kServer;
  if (Status s = GenerateKeyPair(&server.public_key, &server.secret_key); !s.ok()) return fail(s.message());
  server.server_key = server.public_key;
  std::string access = "# shardps access list: ROLE PUBLIC-KEY [comment]; strike a line to shut a key out\n";
  access += FormatAccessLine(KeyRole::kServer, server.public_key, "server.key");
  std::vector<std::pair<std::string, KeyFile>> files = {{"server", server}};
  for (const auto& [n, r] : keys) {
    KeyFile k;
    k.role = r;
    k.server_key = server.public_key;
    if (Status s = GenerateKeyPair(&k.public_key, &k.secret_key); !s.ok()) return fail(s.message());
    access += FormatAccessLine(r, k.public_key, n + ".key");
    files.emplace_back(n, k);
  }
  for (const auto& [n, k] : files)
    if (Status s = SaveKeyFile(dir + "/" + n + ".key", k); !s.ok()) return fail(s.message());
  // The access list holds public keys only; it is written last, so a
  // directory with an access list is complete.
  {
    std::ofstream f(dir + "/access.tmp", std::ios::trunc);
    f << access;
    if (!f.good()) return fail("cannot write '" + dir + "/access'");
  }
  if (std::rename((dir + "/access.tmp").c_str(), (dir + "/access").c_str()) != 0)
    return fail("cannot write '" + dir + "/access': " + std::strerror(errno));
  std::printf("%s: server.key", dir.c_str());
  for (const auto& [n, r] : keys) std::printf(", %s.key (%s)", n.c_str(), std::string(KeyRoleName(r)).c_str());
  std::printf(", access\n");
  return 0;
}
