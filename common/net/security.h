// CURVE keys with roles (docs/security.md).
//
// A job's keys live in one directory made by `shardps-keygen DIR`:
//   server.key    the job's CURVE server key pair, held by the coordinator and
//                 every server (they listen with it, and dial the coordinator
//                 with it)
//   worker.key, observer.key, admin.key
//                 one key pair per client role, each with the servers' public
//                 key so a client knows whom it talks to
//   access        the public keys the job admits and their roles, one
//                 "ROLE PUBLIC-KEY [comment]" line each (like authorized_keys)
// A key file is text:
//   # comment
//   role worker
//   public <40 Z85 characters>
//   secret <40 Z85 characters>
//   server <40 Z85 characters: the servers' public key>
#pragma once

#include <map>
#include <string>

#include <zmq.hpp>

#include "shardps/status.h"

namespace shardps {

enum class KeyRole { kServer = 0, kWorker, kObserver, kAdmin };
std::string_view KeyRoleName(KeyRole r);
bool ParseKeyRole(std::string_view s, KeyRole* out);

struct KeyFile {
  KeyRole role = KeyRole::kWorker;
  std::string public_key;  // Z85, 40 characters
  std::string secret_key;  // Z85, 40 characters
  std::string server_key;  // Z85: the public key of the job's servers
};

// False, with the reason in *why, unless `z85` is a 40-character Z85 key.
bool ValidZ85Key(const std::string& z85, std::string* why);
// A fresh CURVE key pair (libzmq's zmq_curve_keypair).
Status GenerateKeyPair(std::string* public_key, std::string* secret_key);

// Reads a key file; every error names the file, the line and what is wrong.
// A key file that others can read (group/other permission bits) is refused:
// it holds a secret.
Status LoadKeyFile(const std::string& path, KeyFile* out);
// Writes a key file with mode 0600; refuses to replace an existing file.
Status SaveKeyFile(const std::string& path, const KeyFile& k);

// The admitted public keys and their roles.
struct AccessList {
  std::map<std::string, KeyRole> keys;  // Z85 public key -> role
};
Status LoadAccessList(const std::string& path, AccessList* out);
std::string FormatAccessLine(KeyRole role, const std::string& public_key, const std::string& comment);

// `key_path`'s directory + "/access": where a server-side process finds the
// access list when none is given.
std::string DefaultAccessPath(const std::string& key_path);

// CURVE on one socket. A listening socket (the coordinator's, a server's data
// socket) is a CURVE server whose peers the ZAP handler (common/net/zap.h) must
// admit; a dialing socket is a CURVE client that checks it reached the job's
// servers (server_key) and presents its own key pair.
// A listening process's security: off, or its server key and the access list.
struct SecurityOptions {
  bool enabled = false;
  KeyFile key;
  AccessList access;
};
// Loads `key_path` (a server key) and the access list (`access_path`, or
// the "access" file beside the key when empty).
Status LoadServerSecurity(const std::string& key_path, const std::string& access_path, SecurityOptions* out);

Status MakeCurveServer(zmq::socket_t& s, const KeyFile& k);
void MakeCurveClient(zmq::socket_t& s, const KeyFile& k);

}  // namespace shardps
