// Envelopes: several messages to one peer sent as one ZeroMQ message
// (docs/protocol.md, "Envelopes"). A client puts every data request it
// has ready for a server into one, a server every reply it has ready for a
// client: on the small-request path the cost is per ZeroMQ message (a
// hand-off to ZeroMQ's I/O thread and a few system calls on each side), not
// per byte, so a worker's step of a few dozen small requests costs a few
// messages instead of a few dozen.
//
// Frames of an envelope: its header (type Envelope, `parts` = the number of
// frames of each message it carries), then each message's frames, header
// first, in the order they were added. The receiver handles them in that
// order, each as if it had come alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <flatbuffers/flatbuffers.h>
#include <zmq.hpp>

#include "shardps/status.h"

namespace shardps::wire {

struct Header;

// At most this many messages, and frames after the envelope's header, in
// one envelope; a message of more frames than that goes alone.
constexpr size_t kMaxEnvelopeParts = 64;
constexpr size_t kMaxEnvelopeFrames = 256;

// The messages for one peer, gathered until they are sent.
class EnvelopeBuilder {
 public:
  bool empty() const { return parts_.empty(); }
  size_t parts() const { return parts_.size(); }
  // Whether a message of `frames` frames may join the ones held (an empty
  // builder takes any one).
  bool Fits(size_t frames) const {
    return empty() || (parts_.size() < kMaxEnvelopeParts && frames_.size() + frames <= kMaxEnvelopeFrames);
  }
  // Takes the frames of one message from frames[first] on (its header
  // first). REQUIRES: Fits(frames.size() - first).
  void Add(std::vector<zmq::message_t>& frames, size_t first = 0);
  // Appends the frames to send to *out: the message itself when one is
  // held, else an envelope of them all. Empties the builder.
  void Take(flatbuffers::FlatBufferBuilder& fbb, std::vector<zmq::message_t>* out);

 private:
  std::vector<zmq::message_t> frames_;
  std::vector<uint32_t> parts_;
};

// The frame counts of the messages envelope `h` carries, checked against
// the `after` frames that follow its header: BadMessage naming what does not
// add up (no parts, an empty one, more than the limits, a sum other than
// `after`).
Status EnvelopeParts(const Header& h, size_t after, std::vector<uint32_t>* counts);

// Hands each message of an envelope (`counts` from EnvelopeParts) to
// fn(std::vector<zmq::message_t>&), its frames moved out of `frames` from
// frames[first] on; with a `prefix` (a ROUTER's routing id), a copy of it
// first.
template <typename Fn>
void ForEachMessage(std::vector<zmq::message_t>& frames, size_t first, const std::vector<uint32_t>& counts,
                    const zmq::message_t* prefix, Fn&& fn) {
  std::vector<zmq::message_t> part;
  for (uint32_t n : counts) {
    part.clear();
    if (prefix) part.emplace_back(prefix->data(), prefix->size());
    for (size_t i = first; i < first + n; ++i) part.push_back(std::move(frames[i]));
    first += n;
    fn(part);
  }
}

}  // namespace shardps::wire
