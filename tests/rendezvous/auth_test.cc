// The authorization decisions, as a table: credential x access x job binding
// -> allowed, UNAUTHENTICATED or PERMISSION_DENIED; then the registry's
// binding lifetime, round credentials, token files and secrets.
#include "muster/rendezvous/auth.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace muster::rendezvous {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Code = absl::StatusCode;

constexpr char kToken[] = "job-token-0123456789abcdef";
constexpr char kOther[] = "someone-else-0123456789abcdef";
constexpr char kAdmin[] = "admin-token-0123456789abcdef";
constexpr char kPrefix[] = "jobA/3";

Credential None() { return {}; }
Credential Bearer(const std::string& s) {
  return {Credential::Kind::kBearer, s};
}
Credential Malformed() { return {Credential::Kind::kMalformed, ""}; }

JobBinding Unbound() { return {}; }
JobBinding NoToken() { return {JobBinding::State::kNoToken, {}}; }
JobBinding WithToken() {
  return {JobBinding::State::kToken, HashSecret(kToken)};
}

struct Row {
  std::string name;
  bool require_token;
  Credential credential;
  Access access;
  JobBinding job;
  Code want;
};

std::vector<Row> Table() {
  const std::string round_cred = DeriveStoreCredential(kToken, kPrefix);
  const std::string other_round_cred = DeriveStoreCredential(kToken, "jobA/4");
  std::vector<Row> rows = {
      // A job with a token: only its token (or what derives from it) opens it.
      {"token/join/none", false, None(), Access::kJoin, WithToken(),
       Code::kUnauthenticated},
      {"token/join/right", false, Bearer(kToken), Access::kJoin, WithToken(),
       Code::kOk},
      {"token/join/wrong", false, Bearer(kOther), Access::kJoin, WithToken(),
       Code::kPermissionDenied},
      {"token/join/admin", false, Bearer(kAdmin), Access::kJoin, WithToken(),
       Code::kPermissionDenied},
      {"token/join/round-cred", false, Bearer(round_cred), Access::kJoin,
       WithToken(), Code::kPermissionDenied},
      {"token/status/none", false, None(), Access::kStatus, WithToken(),
       Code::kUnauthenticated},
      {"token/status/right", false, Bearer(kToken), Access::kStatus,
       WithToken(), Code::kOk},
      {"token/status/wrong", false, Bearer(kOther), Access::kStatus,
       WithToken(), Code::kPermissionDenied},
      {"token/status/admin", false, Bearer(kAdmin), Access::kStatus,
       WithToken(), Code::kOk},
      {"token/status/round-cred", false, Bearer(round_cred), Access::kStatus,
       WithToken(), Code::kPermissionDenied},
      {"token/store/none", false, None(), Access::kStore, WithToken(),
       Code::kUnauthenticated},
      {"token/store/right", false, Bearer(kToken), Access::kStore, WithToken(),
       Code::kOk},
      {"token/store/wrong", false, Bearer(kOther), Access::kStore, WithToken(),
       Code::kPermissionDenied},
      {"token/store/admin", false, Bearer(kAdmin), Access::kStore, WithToken(),
       Code::kPermissionDenied},
      {"token/store/own-round", false, Bearer(round_cred), Access::kStore,
       WithToken(), Code::kOk},
      {"token/store/other-round", false, Bearer(other_round_cred),
       Access::kStore, WithToken(), Code::kPermissionDenied},
      {"token/store/malformed", false, Malformed(), Access::kStore, WithToken(),
       Code::kUnauthenticated},
      // Same under --require-token.
      {"require/token/store/none", true, None(), Access::kStore, WithToken(),
       Code::kUnauthenticated},
      {"require/token/join/right", true, Bearer(kToken), Access::kJoin,
       WithToken(), Code::kOk},
      // A job started without a token behaves as before tokens existed...
      {"notoken/join/none", false, None(), Access::kJoin, NoToken(), Code::kOk},
      {"notoken/status/none", false, None(), Access::kStatus, NoToken(),
       Code::kOk},
      {"notoken/store/none", false, None(), Access::kStore, NoToken(),
       Code::kOk},
      // ...but an agent with a token does not silently join it.
      {"notoken/join/token", false, Bearer(kToken), Access::kJoin, NoToken(),
       Code::kPermissionDenied},
      {"notoken/status/token", false, Bearer(kToken), Access::kStatus,
       NoToken(), Code::kOk},
      // A job not (yet) known.
      {"unbound/join/none", false, None(), Access::kJoin, Unbound(), Code::kOk},
      {"unbound/join/token", false, Bearer(kToken), Access::kJoin, Unbound(),
       Code::kOk},
      {"require/unbound/join/none", true, None(), Access::kJoin, Unbound(),
       Code::kUnauthenticated},
      {"require/unbound/join/token", true, Bearer(kToken), Access::kJoin,
       Unbound(), Code::kOk},
      {"unbound/status/none", false, None(), Access::kStatus, Unbound(),
       Code::kOk},
      {"require/unbound/status/none", true, None(), Access::kStatus, Unbound(),
       Code::kOk},
      {"unbound/store/none", false, None(), Access::kStore, Unbound(),
       Code::kOk},
      // --require-token: nobody plants keys in the namespace of a job that has
      // not started (a pre-seeded Gloo address would redirect its workers).
      {"require/unbound/store/none", true, None(), Access::kStore, Unbound(),
       Code::kUnauthenticated},
      {"require/unbound/store/token", true, Bearer(kToken), Access::kStore,
       Unbound(), Code::kPermissionDenied},
      {"unbound/join/malformed", false, Malformed(), Access::kJoin, Unbound(),
       Code::kUnauthenticated},
      {"notoken/store/malformed", false, Malformed(), Access::kStore, NoToken(),
       Code::kUnauthenticated},
  };
  return rows;
}

TEST(DecideTest, Table) {
  for (const Row& row : Table()) {
    AuthPolicy policy;
    policy.require_token = row.require_token;
    policy.admin_digest = HashSecret(kAdmin);
    absl::Status got =
        Decide(policy, row.credential, row.access, "jobA", row.job, kPrefix);
    EXPECT_EQ(got.code(), row.want) << row.name << ": " << got;
    // No message ever carries a secret.
    for (const char* secret : {kToken, kOther, kAdmin}) {
      EXPECT_THAT(std::string(got.message()), Not(HasSubstr(secret)))
          << row.name;
    }
    if (!got.ok()) {
      EXPECT_THAT(std::string(got.message()), HasSubstr("job"))
          << row.name << " names the job or the namespace";
    }
  }
}

TEST(DecideTest, AdminWithoutAdminTokenConfiguredIsJustAnotherToken) {
  AuthPolicy policy;  // no --admin-token-file
  EXPECT_EQ(Decide(policy, Bearer(kAdmin), Access::kStatus, "jobA", WithToken())
                .code(),
            Code::kPermissionDenied);
}

TEST(DecideTest, RoundCredentialIsBoundToTheExactPrefixAndToken) {
  const std::string cred = DeriveStoreCredential(kToken, "jobA/3");
  EXPECT_EQ(cred, DeriveStoreCredential(HashSecret(kToken), "jobA/3"));
  EXPECT_NE(cred, DeriveStoreCredential(kToken, "jobA/30"));
  EXPECT_NE(cred, DeriveStoreCredential(kOther, "jobA/3"));
  EXPECT_THAT(cred, ::testing::StartsWith("mst1."));
  EXPECT_EQ(cred.size(), 5u + 64u);
  AuthPolicy policy;
  EXPECT_EQ(Decide(policy, Bearer(cred), Access::kStore, "jobA", WithToken(),
                   "jobA/30")
                .code(),
            Code::kPermissionDenied);
}

TEST(ParseAuthorizationTest, Forms) {
  EXPECT_EQ(ParseAuthorization(nullptr, 0).kind, Credential::Kind::kNone);
  std::string v = "Bearer abc";
  Credential c = ParseAuthorization(&v, 1);
  EXPECT_EQ(c.kind, Credential::Kind::kBearer);
  EXPECT_EQ(c.secret, "abc");
  for (std::string bad : {"Basic abc", "Bearer ", "bearer abc", "abc", ""}) {
    EXPECT_EQ(ParseAuthorization(&bad, 1).kind, Credential::Kind::kMalformed)
        << bad;
  }
  std::string two[] = {"Bearer a", "Bearer b"};
  EXPECT_EQ(ParseAuthorization(two, 2).kind, Credential::Kind::kMalformed);
}

TEST(JobOfStorePrefixTest, UpToTheLastSlash) {
  EXPECT_EQ(JobOfStorePrefix("jobA/3"), "jobA");
  EXPECT_EQ(JobOfStorePrefix("team/jobA/3"), "team/jobA");
  EXPECT_EQ(JobOfStorePrefix("jobA"), "jobA");
  EXPECT_EQ(JobOfStorePrefix("jobA/"), "jobA");
}

TEST(JobAuthRegistryTest, FirstJoinBindsUntilForgotten) {
  JobAuthRegistry registry(AuthPolicy{});
  EXPECT_TRUE(registry.Check(Bearer(kOther), Access::kJoin, "jobA").ok());
  registry.Bind("jobA", Bearer(kToken));
  // A second Bind does not rebind.
  registry.Bind("jobA", Bearer(kOther));
  EXPECT_TRUE(registry.Check(Bearer(kToken), Access::kJoin, "jobA").ok());
  EXPECT_EQ(registry.Check(Bearer(kOther), Access::kJoin, "jobA").code(),
            Code::kPermissionDenied);
  EXPECT_EQ(registry.CheckStore(None(), "jobA/1").code(),
            Code::kUnauthenticated);
  EXPECT_TRUE(
      registry
          .CheckStore(Bearer(DeriveStoreCredential(kToken, "jobA/1")), "jobA/1")
          .ok());
  // Another job is not affected.
  EXPECT_TRUE(registry.CheckStore(None(), "jobB/1").ok());
  EXPECT_EQ(registry.Size(), 1);
  registry.Forget("jobA/");  // the Coordinator's on_round_end("<job>/")
  EXPECT_EQ(registry.Size(), 0);
  EXPECT_TRUE(registry.Check(Bearer(kOther), Access::kJoin, "jobA").ok());
}

TEST(JobAuthRegistryTest, TokenlessJobIsOpenButRefusesTokenAgents) {
  JobAuthRegistry registry(AuthPolicy{});
  registry.Bind("jobA", None());
  EXPECT_TRUE(registry.Check(None(), Access::kJoin, "jobA").ok());
  EXPECT_TRUE(registry.CheckStore(None(), "jobA/1").ok());
  EXPECT_EQ(registry.Check(Bearer(kToken), Access::kJoin, "jobA").code(),
            Code::kPermissionDenied);
}

TEST(SecretsTest, DigestsAndRandomSecrets) {
  EXPECT_TRUE(SecretEquals(HashSecret("a"), HashSecret("a")));
  EXPECT_FALSE(SecretEquals(HashSecret("a"), HashSecret("b")));
  // SHA-256 itself (FIPS 180-2's "abc" vector): digests stored by an earlier
  // build must still match.
  const Digest abc = HashSecret("abc");
  EXPECT_EQ(absl::BytesToHexString(absl::string_view(
                reinterpret_cast<const char*>(abc.data()), abc.size())),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    std::string s = NewRandomSecret();
    EXPECT_EQ(s.size(), 64u);
    EXPECT_EQ(s.find_first_not_of("0123456789abcdef"), std::string::npos);
    seen.insert(s);
  }
  EXPECT_EQ(seen.size(), 100u);
}

TEST(TokenFileTest, CleansAndRefuses) {
  const std::string dir = ::testing::TempDir();
  const std::string path = absl::StrCat(dir, "/token-", getpid());
  { std::ofstream(path) << kToken << "\n"; }
  absl::StatusOr<std::string> t = ReadTokenFile(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, kToken);
  { std::ofstream(path) << "short\n"; }
  t = ReadTokenFile(path);
  EXPECT_EQ(t.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(t.status().message()), Not(HasSubstr("short\n")));
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("openssl rand"));
  { std::ofstream(path) << "two words-0123456789abcdef\n"; }
  EXPECT_EQ(ReadTokenFile(path).status().code(), Code::kInvalidArgument);
  std::remove(path.c_str());
  EXPECT_EQ(ReadTokenFile(path).status().code(), Code::kNotFound);
  EXPECT_EQ(CleanToken("", "MUSTER_RDZV_TOKEN").status().code(),
            Code::kInvalidArgument);
}

}  // namespace
}  // namespace muster::rendezvous
