#include "common/net/security.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/net/net.h"

namespace shardps {

std::string_view KeyRoleName(KeyRole r) {
  switch (r) {
    case KeyRole::kServer: return "server";
    case KeyRole::kWorker: return "worker";
    case KeyRole::kObserver: return "observer";
    case KeyRole::kAdmin: return "admin";
  }
  return "?";
}

bool ParseKeyRole(std::string_view s, KeyRole* out) {
  for (KeyRole r : {KeyRole::kServer, KeyRole::kWorker, KeyRole::kObserver, KeyRole::kAdmin}) {
    if (s == KeyRoleName(r)) {
      *out = r;
      return true;
    }
  }
  return false;
}

bool ValidZ85Key(const std::string& z85, std::string* why) {
  if (z85.size() != 40) {
    *why = "a key is 40 Z85 characters, this one has " + std::to_string(z85.size());
    return false;
  }
  uint8_t bin[32];
  if (zmq_z85_decode(bin, z85.c_str()) == nullptr) {
    *why = "not Z85 text";
    return false;
  }
  return true;
}

Status GenerateKeyPair(std::string* public_key, std::string* secret_key) {
  if (!zmq_has("curve")) return Status::Internal("this libzmq was built without CURVE support");
  char pub[41], sec[41];
  if (zmq_curve_keypair(pub, sec) != 0)
    return Status::Internal(std::string("zmq_curve_keypair failed: ") + zmq_strerror(zmq_errno()));
  *public_key = pub;
  *secret_key = sec;
  return Status::OK();
}

namespace {

// Splits "word rest" at the first run of blanks.
void SplitWord(const std::string& line, std::string* word, std::string* rest) {
  size_t b = line.find_first_not_of(" \t");
  if (b == std::string::npos) {
    word->clear();
    rest->clear();
    return;
  }
  size_t e = line.find_first_of(" \t", b);
  *word = line.substr(b, e == std::string::npos ? std::string::npos : e - b);
  if (e == std::string::npos) {
    rest->clear();
    return;
  }
  size_t r = line.find_first_not_of(" \t", e);
  *rest = r == std::string::npos ? "" : line.substr(r);
  while (!rest->empty() && (rest->back() == ' ' || rest->back() == '\t' || rest->back() == '\r')) rest->pop_back();
}

Status OpenText(const std::string& path, std::string_view what, std::ifstream* f) {
  f->open(path);
  if (!*f)
    return Status::InvalidArgument(std::string(what) + " '" + path + "' cannot be read: " + std::strerror(errno));
  return Status::OK();
}

}  // namespace

Status LoadKeyFile(const std::string& path, KeyFile* out) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0)
    return Status::InvalidArgument("key file '" + path + "': " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument("key file '" + path + "' is not a regular file");
  if (st.st_mode & (S_IRWXG | S_IRWXO))
    return Status::InvalidArgument("key file '" + path + "' holds a secret key but others may read it (mode " +
                                   [&] {
                                     char b[8];
                                     std::snprintf(b, sizeof b, "%03o", st.st_mode & 0777);
                                     return std::string(b);
                                   }() +
                                   "): chmod 600 it");
  std::ifstream f;
  if (Status s = OpenText(path, "key file", &f); !s.ok()) return s;
  KeyFile k;
  bool have_role = false;
  std::string line, word, rest;
  for (int n = 1; std::getline(f, line); ++n) {
    if (line.size() > 4096) return Status::InvalidArgument(path + ":" + std::to_string(n) + ": line too long");
    SplitWord(line, &word, &rest);
    if (word.empty() || word[0] == '#') continue;
    const std::string where = path + ":" + std::to_string(n) + ": ";
    std::string why;
    if (word == "role") {
      if (!ParseKeyRole(rest, &k.role))
        return Status::InvalidArgument(where + "unknown role '" + rest + "' (server, worker, observer or admin)");
      have_role = true;
    } else if (word == "public" || word == "secret" || word == "server") {
      if (!ValidZ85Key(rest, &why)) return Status::InvalidArgument(where + word + " key: " + why);
      (word == "public" ? k.public_key : word == "secret" ? k.secret_key : k.server_key) = rest;
    } else {
      return Status::InvalidArgument(where + "unknown entry '" + word + "' (role, public, secret, server)");
    }
  }
  for (auto [have, name] : {std::pair{have_role, "role"}, {!k.public_key.empty(), "public"},
                            {!k.secret_key.empty(), "secret"}, {!k.server_key.empty(), "server"}})
    if (!have) return Status::InvalidArgument("key file '" + path + "' has no '" + name + "' line");
  // The public key must be the secret key's: a mixed-up file would fail every
  // handshake with no better explanation.
  char derived[41];
  if (zmq_curve_public(derived, k.secret_key.c_str()) != 0 || k.public_key != derived)
    return Status::InvalidArgument("key file '" + path + "': the public key is not the secret key's");
  *out = std::move(k);
  return Status::OK();
}

Status SaveKeyFile(const std::string& path, const KeyFile& k) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == EEXIST) return Status::Conflict("'" + path + "' exists; not replacing a key");
    return Status::InvalidArgument("cannot create '" + path + "': " + std::strerror(errno));
  }
  std::ostringstream os;
  os << "# shardps " << KeyRoleName(k.role) << " key: secret, keep it mode 600\n"
     << "role " << KeyRoleName(k.role) << "\npublic " << k.public_key << "\nsecret " << k.secret_key
     << "\nserver " << k.server_key << "\n";
  const std::string text = os.str();
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) {
    ::unlink(path.c_str());
    return Status::Internal("write to '" + path + "' failed");
  }
  return Status::OK();
}

Status LoadAccessList(const std::string& path, AccessList* out) {
  // It decides who gets in: nobody but its owner may change it.
  struct stat st{};
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & (S_IWGRP | S_IWOTH)))
    return Status::InvalidArgument("access list '" + path + "' may be changed by others (group/other write " +
                                   "permission): chmod go-w it");
  std::ifstream f;
  if (Status s = OpenText(path, "access list", &f); !s.ok()) return s;
  AccessList a;
  std::string line, word, rest, key, comment;
  for (int n = 1; std::getline(f, line); ++n) {
    if (line.size() > 4096) return Status::InvalidArgument(path + ":" + std::to_string(n) + ": line too long");
    SplitWord(line, &word, &rest);
    if (word.empty() || word[0] == '#') continue;
    const std::string where = path + ":" + std::to_string(n) + ": ";
    KeyRole role;
    if (!ParseKeyRole(word, &role))
      return Status::InvalidArgument(where + "unknown role '" + word + "' (server, worker, observer or admin)");
    SplitWord(rest, &key, &comment);
    std::string why;
    if (!ValidZ85Key(key, &why)) return Status::InvalidArgument(where + "public key: " + why);
    auto [it, fresh] = a.keys.emplace(key, role);
    if (!fresh && it->second != role)
      return Status::InvalidArgument(where + "key listed twice with different roles (" +
                                     std::string(KeyRoleName(it->second)) + " and " + word + ")");
  }
  if (a.keys.empty()) return Status::InvalidArgument("access list '" + path + "' admits no key");
  *out = std::move(a);
  return Status::OK();
}

std::string FormatAccessLine(KeyRole role, const std::string& public_key, const std::string& comment) {
  std::string s = std::string(KeyRoleName(role)) + " " + public_key;
  if (!comment.empty()) s += " " + comment;
  return s + "\n";
}

std::string DefaultAccessPath(const std::string& key_path) {
  const size_t slash = key_path.rfind('/');
  return slash == std::string::npos ? "access" : key_path.substr(0, slash) + "/access";
}

Status LoadServerSecurity(const std::string& key_path, const std::string& access_path, SecurityOptions* out) {
  SecurityOptions o;
  if (Status s = LoadKeyFile(key_path, &o.key); !s.ok()) return s;
  if (o.key.role != KeyRole::kServer)
    return Status::InvalidArgument("key file '" + key_path + "' is a " + std::string(KeyRoleName(o.key.role)) +
                                   " key; the coordinator and servers listen with the job's server key (server.key)");
  if (o.key.server_key != o.key.public_key)
    return Status::InvalidArgument("key file '" + key_path + "': a server key's 'server' line must be its own public key");
  const std::string ap = access_path.empty() ? DefaultAccessPath(key_path) : access_path;
  if (Status s = LoadAccessList(ap, &o.access); !s.ok()) return s;
  o.enabled = true;
  *out = std::move(o);
  return Status::OK();
}

Status MakeCurveServer(zmq::socket_t& s, const KeyFile& k) {
  s.set(zmq::sockopt::curve_server, 1);
  s.set(zmq::sockopt::curve_secretkey, k.secret_key);
  // Every connection is put to the ZAP handler (ZapHandler, started before
  // the socket binds and alive until it closes). Without
  // ZMQ_ZAP_ENFORCE_DOMAIN (93) libzmq would admit a CURVE peer when no
  // handler answers, with whatever User-Id the peer's own metadata claims;
  // with it, the handshake fails. zmq.h defines the name only for draft
  // builds, but libzmq 4.3 accepts the option in every build: refused, the
  // process does not start.
  s.set(zmq::sockopt::zap_domain, "shardps");
  const int on = 1;
  if (zmq_setsockopt(s.handle(), 93 /* ZMQ_ZAP_ENFORCE_DOMAIN */, &on, sizeof on) != 0)
    return Status::Internal(std::string("this libzmq does not enforce ZAP (ZMQ_ZAP_ENFORCE_DOMAIN: ") +
                            zmq_strerror(zmq_errno()) + "); security needs libzmq 4.3 or later");
  return Status::OK();
}

void MakeCurveClient(zmq::socket_t& s, const KeyFile& k) {
  s.set(zmq::sockopt::curve_serverkey, k.server_key);
  s.set(zmq::sockopt::curve_publickey, k.public_key);
  s.set(zmq::sockopt::curve_secretkey, k.secret_key);
}

}  // namespace shardps
