#include "tests/testing/ports.h"

#include <fstream>

#include "gtest/gtest.h"
#include "muster/common/net.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/tcp_listener.h"

namespace muster::testing {
namespace {

TEST(TcpListenerTest, HoldsAPortUntilClosed) {
  TcpListener held("127.0.0.1");
  ASSERT_TRUE(held.ok());
  EXPECT_GT(held.port(), 0);
  EXPECT_TRUE(CanConnect("127.0.0.1", held.port(), absl::Seconds(5)));
  // A second socket cannot take it.
  TcpListener second("127.0.0.1", held.port());
  EXPECT_FALSE(second.ok());
}

TEST(TcpListenerTest, CloseFreesThePort) {
  TcpListener held("127.0.0.1");
  ASSERT_TRUE(held.ok());
  const int port = held.port();
  held.Close();
  EXPECT_FALSE(held.ok());
  TcpListener again("127.0.0.1", port);
  EXPECT_TRUE(again.ok());
  EXPECT_EQ(again.port(), port);
}

TEST(TcpListenerTest, TheWildcardAddressBlocksLoopbackTooAndBadAddressesFail) {
  TcpListener held("0.0.0.0");
  ASSERT_TRUE(held.ok());
  TcpListener loopback("127.0.0.1", held.port());
  EXPECT_FALSE(loopback.ok());
  EXPECT_FALSE(TcpListener("not-an-address").ok());
}

TEST(LoopbackEndpointTest, IsHostColonPort) {
  EXPECT_EQ(LoopbackEndpoint(29400), "127.0.0.1:29400");
}

TEST(ReadPortFileTest, ReadsThePortOrZero) {
  const std::string dir = MakeTempDir("ports");
  EXPECT_EQ(ReadPortFile(dir + "/absent"), 0);
  std::ofstream(dir + "/empty").flush();
  EXPECT_EQ(ReadPortFile(dir + "/empty"), 0);
  std::ofstream(dir + "/junk") << "soon\n";
  EXPECT_EQ(ReadPortFile(dir + "/junk"), 0);
  std::ofstream(dir + "/port") << "29400\n";
  EXPECT_EQ(ReadPortFile(dir + "/port"), 29400);
}

TEST(AwaitPortFileTest, ReturnsThePortOrZeroWhenTheProcessExitsFirst) {
  const std::string dir = MakeTempDir("ports");
  Subprocess writer({"/bin/sh", "-c", "sleep 0.2; echo 4242 > \"$0\"; sleep 30",
                     dir + "/port"});
  EXPECT_EQ(AwaitPortFile(dir + "/port", writer, absl::Seconds(30)), 4242);
  Subprocess quitter({"/bin/sh", "-c", "exit 3"});
  const absl::Time start = absl::Now();
  EXPECT_EQ(AwaitPortFile(dir + "/never", quitter, absl::Seconds(30)), 0);
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));  // not the whole timeout
}

}  // namespace
}  // namespace muster::testing
