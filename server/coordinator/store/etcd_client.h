// EtcdClient: the few calls of etcd's v3 API the coordinator's state needs
// (etcd 3.4, Debian's etcd-server), over its JSON gateway (POST
// /v3/kv/range, /v3/kv/txn, /v3/lease/grant, /v3/lease/keepalive,
// /v3/lease/revoke; keys and values base64). Each call tries the cluster's
// members in turn from the last one that answered, each bounded by
// `timeout`; an error names every member tried and what it said.
//
// Thread: one at a time (the coordinator's loop).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "shardps/status.h"

namespace shardps {
struct JsonValue;
}

namespace shardps {

class EtcdClient {
 public:
  // `endpoints`: "HOST:PORT" each.
  EtcdClient(std::vector<std::string> endpoints, std::chrono::milliseconds timeout)
      : endpoints_(std::move(endpoints)), timeout_(timeout) {}

  // One comparison and the writes done when it holds. Key compare: the
  // key's value equals `value` (kValue), or the key does not exist
  // (kAbsent).
  struct Txn {
    enum Compare { kValue, kAbsent } compare = kValue;
    std::string key, value;
    std::vector<std::pair<std::string, std::string>> puts;  // key, value
    int64_t lease = 0;                                      // of the puts (0: none)
    std::vector<std::string> deletes;
  };

  Status Get(const std::string& key, std::string* value, bool* found);
  // *ok: the comparison held and the writes were made.
  Status Commit(const Txn& txn, bool* ok);
  Status Grant(int64_t ttl_sec, int64_t* lease);
  // *ttl: seconds the lease has left after the renewal (0: it lapsed).
  Status KeepAlive(int64_t lease, int64_t* ttl);
  Status Revoke(int64_t lease);

  static std::string Base64(const std::string& in);
  // False when `in` is not base64.
  static bool FromBase64(const std::string& in, std::string* out);

 private:
  // POSTs `body` to `path` on a member; *reply is the response's body.
  Status Post(const std::string& path, const std::string& body, std::string* reply);
  // Post, and the reply parsed.
  Status Call(const std::string& path, const std::string& body, JsonValue* v);

  std::vector<std::string> endpoints_;
  std::chrono::milliseconds timeout_;
  size_t good_ = 0;  // the member that answered last
};

}  // namespace shardps
