// Small ZeroMQ helpers shared by every process.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "common/base/clock.h"
#include "shardps/status.h"

namespace shardps {

// Receives every frame of one multipart message (non-blocking when
// `dontwait`). Returns false when nothing was available.
// With `max_frames`, frames past that many are received and dropped at once
// (never held together), and *dropped (if given) counts them.
bool RecvMultipart(zmq::socket_t& s, std::vector<zmq::message_t>* frames, bool dontwait = true,
                   size_t max_frames = SIZE_MAX, size_t* dropped = nullptr);
// Sends all frames as one multipart message; frames are consumed.
// Returns Unavailable when the peer is unknown (ROUTER_MANDATORY) or gone.
Status SendMultipart(zmq::socket_t& s, std::vector<zmq::message_t>& frames);

// zmq::poll that treats an interrupted wait (a signal) as "nothing ready".
int Poll(zmq::pollitem_t* items, size_t n, Millis timeout);

// "tcp://127.0.0.1:0" -> "tcp://127.0.0.1:*" (port 0 means "any free port").
std::string BindSpec(const std::string& endpoint);
// The endpoint a bound socket listens on, as peers should dial it: a
// wildcard bind (tcp://0.0.0.0:P) is advertised as tcp://ADDR:P where ADDR
// is `advertise` if given, else this host's address on the interface that
// routes to `route_to` (an endpoint such as the coordinator's; "" = none),
// else 127.0.0.1. A non-wildcard bind is advertised as bound unless
// `advertise` overrides its host. Fails when `advertise` is not an address
// or host name that resolves.
Status AdvertisedEndpoint(zmq::socket_t& s, const std::string& advertise, const std::string& route_to,
                          std::string* out);
std::string LastEndpoint(zmq::socket_t& s);  // AdvertisedEndpoint without hints
// The local IPv4 address this host sends from to reach `endpoint`'s host
// (tcp://HOST:PORT or HOST), through the kernel's routing table.
Status LocalAddressTowards(const std::string& endpoint, std::string* addr);
// This host's name (gethostname), for status reports.
std::string HostName();
// An endpoint to connect to, checked before any wait on it: tcp://HOST:PORT
// whose HOST resolves (a name, IPv4, or [IPv6]) and whose PORT is a number
// in 1..65535; ipc:// and inproc:// endpoints pass as they are. Says what
// is wrong, naming the host that does not resolve. A list of coordinators
// (A,B,C) is checked endpoint by endpoint.
Status CheckConnectEndpoint(const std::string& endpoint);

// A job's coordinators, "A" or "A,B,C" (a leader and its standbys, which
// bind nothing until they lead: docs/fault-tolerance.md): each endpoint.
std::vector<std::string> CoordinatorEndpoints(const std::string& list);
// Connects `s` (a DEALER) to every coordinator of `list`; with more than
// one, a message goes only to a connection made (ZMQ_IMMEDIATE): to the
// one that leads; and ZMTP heartbeats drop a connection silent for 1.5 s
// (a stopped leader's). Throws zmq::error_t as connect does.
void ConnectCoordinators(zmq::socket_t& s, const std::string& list);

// Lets the process keep large freed blocks for reuse instead of returning
// them to the kernel, so a 16 MB message buffer does not page-fault anew on
// every message. Called by shardps's own binaries; embedders may call it.
void TuneAllocatorForLargeMessages();

}  // namespace shardps
