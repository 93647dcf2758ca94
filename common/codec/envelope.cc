#include "common/codec/envelope.h"

#include <string>

#include "common/codec/wire.h"

namespace shardps::wire {

void EnvelopeBuilder::Add(std::vector<zmq::message_t>& frames, size_t first) {
  parts_.push_back(static_cast<uint32_t>(frames.size() - first));
  for (size_t i = first; i < frames.size(); ++i) frames_.push_back(std::move(frames[i]));
}

void EnvelopeBuilder::Take(flatbuffers::FlatBufferBuilder& fbb, std::vector<zmq::message_t>* out) {
  if (parts_.size() > 1) {
    fbb.Clear();
    auto parts = fbb.CreateVector(parts_);
    HeaderBuilder b(fbb);
    b.add_version(kProtocolVersion);
    b.add_type(MsgType::Envelope);
    b.add_parts(parts);
    fbb.Finish(b.Finish());
    out->emplace_back(fbb.GetBufferPointer(), fbb.GetSize());
  }
  for (auto& f : frames_) out->push_back(std::move(f));
  frames_.clear();
  parts_.clear();
}

Status EnvelopeParts(const Header& h, size_t after, std::vector<uint32_t>* counts) {
  counts->clear();
  const auto* parts = h.parts();
  if (!parts || parts->size() == 0) return Status::BadMessage("an envelope that names no messages (parts)");
  if (parts->size() > kMaxEnvelopeParts || after > kMaxEnvelopeFrames)
    return Status::BadMessage("an envelope of " + std::to_string(parts->size()) + " messages in " +
                              std::to_string(after) + " frames: at most " + std::to_string(kMaxEnvelopeParts) +
                              " messages in " + std::to_string(kMaxEnvelopeFrames) + " frames");
  uint64_t sum = 0;
  for (uint32_t n : *parts) {
    if (n == 0) return Status::BadMessage("an envelope's message of 0 frames (each has its header)");
    sum += n;
    counts->push_back(n);
  }
  if (sum != after)
    return Status::BadMessage("an envelope whose messages have " + std::to_string(sum) + " frames, followed by " +
                              std::to_string(after));
  return Status::OK();
}

}  // namespace shardps::wire
