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

TEST(ParseHostPortListTest, ReplicasInOrderWithDefaultPorts) {
  auto list = ParseHostPortList(" h1:1, [::1]:2 ,h3", 29400);
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ((*list)[0].ToString(), "h1:1");
  EXPECT_EQ((*list)[1].ToString(), "[::1]:2");
  EXPECT_EQ((*list)[2].ToString(), "h3:29400");
  EXPECT_EQ(JoinHostPorts(*list), "h1:1,[::1]:2,h3:29400");
  auto one = ParseHostPortList(":5", 29400);  // one entry: as ParseHostPort
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->size(), 1u);
}

TEST(ParseHostPortListTest, BadEntriesNamed) {
  auto empty = ParseHostPortList("h1:1,,h2:2", 29400);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("entry 2 is empty"),
            std::string::npos)
      << empty.status();
  auto port = ParseHostPortList("h1:1,h2:x", 29400);
  ASSERT_FALSE(port.ok());
  EXPECT_NE(port.status().message().find("entry 2"), std::string::npos);
  EXPECT_NE(port.status().message().find("port 'x'"), std::string::npos)
      << port.status();
  auto no_host = ParseHostPortList("h1:1,:2", 29400);
  ASSERT_FALSE(no_host.ok());
  EXPECT_NE(no_host.status().message().find("has no host"), std::string::npos);
  auto twice = ParseHostPortList("h1:1,h1:1", 29400);
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("h1:1 is listed twice"),
            std::string::npos)
      << twice.status();
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
