// The rdzv-conf parser (cli/rdzv_conf.h), which the launcher, `muster status`
// and `muster doctor` share.
#include "cli/rdzv_conf.h"

#include <string>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace muster::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

std::string Error(absl::string_view text,
                  RdzvConfScope scope = RdzvConfScope::kAll) {
  absl::StatusOr<RdzvConf> conf = ParseRdzvConf(text, scope);
  EXPECT_FALSE(conf.ok()) << text;
  if (conf.ok()) return "";
  EXPECT_EQ(conf.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(conf.status().message());
}

TEST(RdzvConfTest, EveryKey) {
  absl::StatusOr<RdzvConf> c = ParseRdzvConf(
      "join_timeout=900, last_call_timeout=0.5,close_timeout=2s,"
      "READ_TIMEOUT=7,connect_timeout=1.5,reconnect_timeout=0,"
      "preflight_timeout=250ms,keep_alive_interval=5,keep_alive_max_attempt=3,"
      "is_host=yes,tls_ca=/ca.pem,tls_cert=/c.pem,tls_key=/k.pem,"
      "token_file= /t ,");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->join_timeout, absl::Seconds(900));
  EXPECT_EQ(c->last_call_timeout, absl::Milliseconds(500));
  EXPECT_EQ(c->close_timeout, absl::Seconds(2));
  EXPECT_EQ(c->read_timeout, absl::Seconds(7));
  EXPECT_EQ(c->connect_timeout, absl::Milliseconds(1500));
  EXPECT_EQ(c->reconnect_timeout, absl::ZeroDuration());
  EXPECT_EQ(c->preflight_timeout, absl::Milliseconds(250));
  EXPECT_EQ(c->keep_alive_interval, absl::Seconds(5));
  EXPECT_EQ(c->keep_alive_max_attempt, 3);
  EXPECT_EQ(c->is_host, true);
  EXPECT_EQ(c->tls_ca, "/ca.pem");
  EXPECT_EQ(c->tls_cert, "/c.pem");
  EXPECT_EQ(c->tls_key, "/k.pem");
  EXPECT_EQ(c->token_file, "/t");
  EXPECT_THAT(c->warnings, IsEmpty());
}

TEST(RdzvConfTest, EmptyAndAliasAndLastWins) {
  absl::StatusOr<RdzvConf> empty = ParseRdzvConf("");
  ASSERT_TRUE(empty.ok());
  EXPECT_FALSE(empty->join_timeout.has_value());
  EXPECT_FALSE(empty->is_host.has_value());
  absl::StatusOr<RdzvConf> c = ParseRdzvConf(
      "timeout=5,join_timeout=7", RdzvConfScope::kAll, /*etcd_aliases=*/true);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->join_timeout, absl::Seconds(7));
  c = ParseRdzvConf("join_timeout=7,timeout=5", RdzvConfScope::kAll,
                    /*etcd_aliases=*/true);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->join_timeout, absl::Seconds(5));
}

// PyTorch's own test_launch_elastic passes the shell's quotes inside the
// value. torchrun's c10d backend reads join_timeout and last_call_timeout and
// nothing named 'join_timeout or timeout; so does muster, with a warning for
// each key it ignores.
TEST(RdzvConfTest, KeysTheC10dBackendDoesNotReadAreIgnored) {
  absl::StatusOr<RdzvConf> c =
      ParseRdzvConf("'join_timeout=5,last_call_timeout=1,timeout=5'");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->join_timeout.has_value());
  EXPECT_EQ(c->last_call_timeout, absl::Seconds(1));
  ASSERT_EQ(c->warnings.size(), 2u);
  EXPECT_THAT(c->warnings[0], HasSubstr("ignoring key ''join_timeout'"));
  EXPECT_THAT(c->warnings[1], HasSubstr("ignoring key 'timeout'"));
  EXPECT_THAT(c->warnings[1],
              HasSubstr("etcd backend reads it as join_timeout"));
  // --rdzv_conf=timeout=5 of test_launch_elastic_multiple_agents.
  c = ParseRdzvConf("timeout=5");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->join_timeout.has_value());
  // A key muster reads is still checked, whatever surrounds it.
  c = ParseRdzvConf("'join_timeout=5,last_call_timeout=1'");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("last_call_timeout=1'"));
  // With --rdzv-backend=etcd, timeout is join_timeout (torchrun's etcd
  // backend reads it) and so is checked.
  c = ParseRdzvConf("timeout=5'", RdzvConfScope::kAll, /*etcd_aliases=*/true);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("timeout=5'"));
}

TEST(RdzvConfTest, ApplyToTouchesOnlyWhatWasGiven) {
  agent::AgentConfig config;
  const agent::AgentConfig defaults;
  absl::StatusOr<RdzvConf> c = ParseRdzvConf(
      "keep_alive_interval=1,keep_alive_max_attempt=9,tls_ca=/ca.pem,"
      "is_host=1,token_file=/t");
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(c->ApplyTo(&config).ok());
  EXPECT_EQ(config.heartbeat_interval, absl::Seconds(1));
  EXPECT_EQ(config.heartbeat_max_missed, 9);
  EXPECT_EQ(config.security.tls_ca, "/ca.pem");
  EXPECT_EQ(config.join_timeout, defaults.join_timeout);
  EXPECT_EQ(config.last_call_timeout, defaults.last_call_timeout);
  EXPECT_TRUE(config.security.tls_cert.empty());
  EXPECT_TRUE(config.security.token.empty());  // token_file is the caller's
}

TEST(RdzvConfTest, UnknownKeysAreWarningsWithAGuess) {
  absl::StatusOr<RdzvConf> c =
      ParseRdzvConf("use_libuv=1,join_timout=5,keep_alive_intervall=1");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_THAT(c->warnings, SizeIs(3));
  EXPECT_THAT(c->warnings[0], HasSubstr("ignoring key 'use_libuv',"));
  EXPECT_THAT(c->warnings[1],
              HasSubstr("'join_timout' (did you mean join_timeout?)"));
  EXPECT_THAT(c->warnings[2], HasSubstr("(did you mean keep_alive_interval?)"));
  EXPECT_THAT(
      c->warnings[0],
      HasSubstr("its keys are join_timeout, "
                "last_call_timeout, close_timeout, read_timeout, "
                "connect_timeout, reconnect_timeout, preflight_timeout, "
                "keep_alive_interval, lease_timeout, keep_alive_max_attempt, "
                "is_host, "
                "tls_ca, tls_cert, tls_key, token_file"));
}

TEST(RdzvConfTest, MalformedValuesNameTheKeyAndTheFix) {
  EXPECT_EQ(Error("join_timeout=abc"),
            "join_timeout=abc: expected seconds > 0, e.g. join_timeout=30 or "
            "join_timeout=0.5");
  EXPECT_THAT(Error("join_timeout=0"),
              HasSubstr("join_timeout=0: expected seconds > 0"));
  EXPECT_THAT(Error("last_call_timeout=-1"),
              HasSubstr("last_call_timeout=-1: expected seconds >= 0"));
  EXPECT_EQ(Error("join_timeout"),
            "'join_timeout' is not KEY=VALUE; write e.g. join_timeout=900");
  EXPECT_THAT(Error("=5"), HasSubstr("is not KEY=VALUE"));
  EXPECT_EQ(Error("is_host=maybe"),
            "is_host=maybe: expected true, false, 1 or 0");
  EXPECT_EQ(Error("keep_alive_max_attempt=0"),
            "keep_alive_max_attempt=0: expected a whole number of heartbeats "
            "from 1 to 1000");
  EXPECT_THAT(Error("keep_alive_max_attempt=1001"), HasSubstr("1 to 1000"));
  EXPECT_EQ(Error("tls_ca="), "tls_ca= needs a file path");
}

TEST(RdzvConfTest, DurationsHaveBounds) {
  EXPECT_EQ(Error("keep_alive_interval=1e-9"),
            "keep_alive_interval=1e-9 is out of range: expected seconds from "
            "10ms to 1m");
  EXPECT_THAT(Error("keep_alive_interval=61"), HasSubstr("out of range"));
  EXPECT_EQ(Error("last_call_timeout=1ms"),
            "last_call_timeout=1ms is out of range: expected 0 or seconds "
            "from 10ms to 168h");
  EXPECT_THAT(Error("join_timeout=1e12"), HasSubstr("out of range"));
  EXPECT_THAT(Error("read_timeout=inf"), HasSubstr("read_timeout=inf"));
  EXPECT_THAT(Error("read_timeout=nan"), HasSubstr("read_timeout=nan"));
  absl::StatusOr<RdzvConf> edges = ParseRdzvConf(
      "keep_alive_interval=10ms,keep_alive_max_attempt=1000,"
      "join_timeout=168h,close_timeout=0");
  ASSERT_TRUE(edges.ok()) << edges.status();
  EXPECT_EQ(edges->join_timeout, absl::Hours(168));
}

TEST(RdzvConfTest, SecurityScopeReadsOnlyTheFiles) {
  // status and doctor take a PET_RDZV_CONF written for the launcher: its other
  // keys, even malformed ones, are the launcher's to judge.
  absl::StatusOr<RdzvConf> c =
      ParseRdzvConf("join_timeout=abc,tls_ca=/ca.pem,bare,use_libuv=1",
                    RdzvConfScope::kSecurityOnly);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->tls_ca, "/ca.pem");
  EXPECT_FALSE(c->join_timeout.has_value());
  EXPECT_THAT(c->warnings, IsEmpty());
  EXPECT_EQ(Error("tls_key", RdzvConfScope::kSecurityOnly),
            "tls_key= needs a file path");
  EXPECT_EQ(Error("token_file= ", RdzvConfScope::kSecurityOnly),
            "token_file= needs a file path");
}

}  // namespace

TEST(RdzvConfTest, LeaseIsAtLeastFourHeartbeats) {
  agent::AgentConfig config;
  absl::StatusOr<RdzvConf> c = ParseRdzvConf("lease_timeout=2");
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(c->ApplyTo(&config).ok());
  EXPECT_EQ(config.lease_timeout, absl::Seconds(2));
  // torchrun's keep-alive (5 s) without a lease: the default lease grows.
  agent::AgentConfig slow;
  c = ParseRdzvConf("keep_alive_interval=5");
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(c->ApplyTo(&slow).ok());
  EXPECT_EQ(slow.lease_timeout, absl::Seconds(20));
  // A lease given shorter than 4 heartbeats is refused, naming the fix.
  agent::AgentConfig bad;
  c = ParseRdzvConf("keep_alive_interval=1,lease_timeout=2");
  ASSERT_TRUE(c.ok());
  absl::Status s = c->ApplyTo(&bad);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(std::string(s.message()),
              ::testing::HasSubstr("raise lease_timeout"));
  // Out of bounds.
  EXPECT_FALSE(ParseRdzvConf("lease_timeout=0.5").ok());
  EXPECT_FALSE(ParseRdzvConf("lease_timeout=61").ok());
}

}  // namespace muster::cli
