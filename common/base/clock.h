// The clock every wait and timeout in shardps is measured on, and the unit
// most of them are given in.
#pragma once

#include <chrono>

namespace shardps {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

}  // namespace shardps
