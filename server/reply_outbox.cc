#include "server/reply_outbox.h"

namespace shardps {

void ReplyOutbox::Remember(const zmq::message_t& id) {
  key_.assign(id.data<char>(), id.size());
  if (clients_.contains(key_)) return;
  if (clients_.size() >= kMaxClients) std::erase_if(clients_, [](const auto& c) { return !c.second.queued; });
  clients_.try_emplace(key_);
}

void ReplyOutbox::Take(std::pair<const std::string, Client>& c, std::vector<zmq::message_t>& frames) {
  c.second.replies.Add(frames, 1);
  if (!c.second.queued) {
    c.second.queued = true;
    queued_.push_back(&c);
  }
}

}  // namespace shardps
