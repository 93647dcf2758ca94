// ReplyOutbox: the replies a server has ready for each client that sends
// envelopes, gathered so that they leave in one message per client
// (docs/protocol.md, "Envelopes"). A client is known by its routing id
// once it sent an envelope (Remember); the replies to others are not
// taken (Add returns false: the caller sends them alone).
//
// Thread: the server's event loop only.
#pragma once

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <flatbuffers/flatbuffers.h>
#include <zmq.hpp>

#include "common/codec/envelope.h"

namespace shardps {

class ReplyOutbox {
 public:
  // At most this many clients are known; past it, those with nothing
  // gathered are forgotten (their replies go alone until they send an
  // envelope again).
  static constexpr size_t kMaxClients = 4096;

  // The client of routing id `id` gets its replies in envelopes.
  void Remember(const zmq::message_t& id);
  // Takes a reply (frames[0] the routing id) to a client that gets
  // envelopes; false, taking nothing, for any other. `send` sends what was
  // gathered for every client first when this one's envelope is full.
  template <typename Send>
  bool Add(std::vector<zmq::message_t>& frames, Send&& send) {
    if (clients_.empty() || frames.size() < 2) return false;
    key_.assign(frames[0].data<char>(), frames[0].size());
    auto it = clients_.find(key_);
    if (it == clients_.end()) return false;
    if (!it->second.replies.Fits(frames.size() - 1)) Flush(send);
    Take(*it, frames);
    return true;
  }
  // Hands each client's gathered replies to send(frames) as one message
  // (routing id first), in the order the clients got their first reply.
  template <typename Send>
  void Flush(Send&& send) {
    for (auto* e : queued_) {
      out_.clear();
      out_.emplace_back(e->first.data(), e->first.size());
      e->second.replies.Take(fbb_, &out_);
      e->second.queued = false;
      send(out_);
    }
    queued_.clear();
  }
  bool empty() const { return queued_.empty(); }
  size_t clients() const { return clients_.size(); }

 private:
  struct Client {
    wire::EnvelopeBuilder replies;
    bool queued = false;  // in queued_
  };
  void Take(std::pair<const std::string, Client>& c, std::vector<zmq::message_t>& frames);

  std::unordered_map<std::string, Client> clients_;
  std::vector<std::pair<const std::string, Client>*> queued_;  // holding replies, in order
  std::string key_;                                           // scratch: a routing id looked up
  std::vector<zmq::message_t> out_;                           // scratch: a message being sent
  flatbuffers::FlatBufferBuilder fbb_;
};

}  // namespace shardps
