#include "muster/common/net.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/testing/tcp_listener.h"

namespace muster {
namespace {

TEST(ParseHostPortTest, HostAndPort) {
  auto hp = ParseHostPort("node1:29400", 1);
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->host, "node1");
  EXPECT_EQ(hp->port, 29400);
  EXPECT_EQ(hp->ToString(), "node1:29400");
}

TEST(ParseHostPortTest, DefaultPortAndIpv6) {
  auto hp = ParseHostPort("10.0.0.1", 29400);
  ASSERT_TRUE(hp.ok());
  EXPECT_EQ(hp->port, 29400);
  auto v6 = ParseHostPort("[::1]:5", 1);
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->ToString(), "[::1]:5");
}

TEST(ParseHostPortTest, BadPortsNamed) {
  for (const char* bad : {"h:abc", "h:70000", "h:-1", "h:0", "[::1"}) {
    auto hp = ParseHostPort(bad, 1);
    EXPECT_EQ(hp.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_TRUE(ParseHostPort("h:0", 1, /*allow_zero_port=*/true).ok());
  EXPECT_FALSE(ParseHostPort("h", -1).ok());
}

TEST(NetTest, LoopbackIsLocal) {
  EXPECT_TRUE(IsLocalHost("127.0.0.1"));
  EXPECT_TRUE(IsLocalHost("localhost"));
  EXPECT_TRUE(IsLocalHost(LocalHostname()));
  EXPECT_FALSE(IsLocalHost("192.0.2.77"));  // TEST-NET-1, never ours
}

TEST(NetTest, AdvertisedAddressIsNotDebianLoopbackAlias) {
  EXPECT_NE(DefaultAdvertisedAddress(), "127.0.1.1");
}

TEST(NetTest, FreePortListenConnectAndOwner) {
  auto port = PickFreePort("127.0.0.1");
  ASSERT_TRUE(port.ok());
  EXPECT_FALSE(CanConnect("127.0.0.1", *port, absl::Milliseconds(200)));
  testing::TcpListener listener("127.0.0.1", *port);
  ASSERT_TRUE(listener.ok());
  EXPECT_TRUE(CanConnect("127.0.0.1", *port, absl::Seconds(2)));
  std::string owner = DescribePortOwner(*port);
  EXPECT_NE(owner.find(absl::StrCat("pid ", getpid())), std::string::npos)
      << owner;
}

}  // namespace
}  // namespace muster
