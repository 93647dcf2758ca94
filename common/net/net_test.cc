#include "common/net/net.h"

#include <gtest/gtest.h>

#include <string>

namespace shardps {
namespace {

TEST(CheckConnectEndpoint, AcceptsWhatZeroMqCanConnectTo) {
  EXPECT_TRUE(CheckConnectEndpoint("tcp://127.0.0.1:5555").ok());
  EXPECT_TRUE(CheckConnectEndpoint("tcp://localhost:1").ok());
  EXPECT_TRUE(CheckConnectEndpoint("tcp://[::1]:65535").ok());
  EXPECT_TRUE(CheckConnectEndpoint("ipc:///tmp/x.sock").ok());
  EXPECT_TRUE(CheckConnectEndpoint("inproc://coordinator").ok());
}

TEST(CheckConnectEndpoint, SaysWhatIsWrongNamingTheHost) {
  Status s = CheckConnectEndpoint("tcp://no-such-host.invalid:5555");  // .invalid never resolves (RFC 2606)
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("'tcp://no-such-host.invalid:5555': host 'no-such-host.invalid' does not resolve (", 0),
            0u)
      << s.message();
  s = CheckConnectEndpoint("tcp://127.0.0.1:0");
  EXPECT_EQ(s.message(), "'tcp://127.0.0.1:0': port '0' is not a number in 1..65535");
  s = CheckConnectEndpoint("tcp://127.0.0.1:http");
  EXPECT_EQ(s.message(), "'tcp://127.0.0.1:http': port 'http' is not a number in 1..65535");
  s = CheckConnectEndpoint("127.0.0.1:5555");
  EXPECT_EQ(s.message(), "'127.0.0.1:5555' is not tcp://HOST:PORT (or ipc://PATH)");
}

}  // namespace
}  // namespace shardps
