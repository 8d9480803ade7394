// The musterd binary: flags, --port-file, a taken port, health, SIGTERM/SIGINT.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "muster/rendezvous/client.h"
#include "muster/v1/store.grpc.pb.h"
#include "tests/testing/rendezvous.h"
#include "tests/testing/subprocess.h"

namespace muster {
namespace {

using ::muster::testing::AwaitPortFile;
using ::muster::testing::BinPath;
using ::muster::testing::LoopbackChannel;
using ::muster::testing::LoopbackEndpoint;
using ::muster::testing::MakeJoin;
using ::muster::testing::MakeTempDir;
using ::muster::testing::PrepareContext;
using ::muster::testing::Subprocess;
using ::testing::HasSubstr;

constexpr absl::Duration kDeadline = absl::Seconds(20);

class Musterd {
 public:
  explicit Musterd(std::vector<std::string> extra = {}) {
    port_file_ = MakeTempDir("musterd") + "/port";
    std::vector<std::string> argv = {BinPath("musterd"), "--listen=127.0.0.1:0",
                                     "--port-file=" + port_file_};
    argv.insert(argv.end(), extra.begin(), extra.end());
    proc_ = std::make_unique<Subprocess>(argv);
    // musterd writes the port file once it serves.
    port_ = AwaitPortFile(port_file_, *proc_, kDeadline);
  }
  int port() const { return port_; }
  Subprocess& proc() { return *proc_; }

 private:
  std::string port_file_;
  int port_ = 0;
  std::unique_ptr<Subprocess> proc_;
};

grpc::health::v1::HealthCheckResponse::ServingStatus Health(int port) {
  auto stub = grpc::health::v1::Health::NewStub(LoopbackChannel(port));
  grpc::ClientContext context;
  PrepareContext(&context, /*token=*/"", absl::Seconds(5));
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  if (!stub->Check(&context, request, &response).ok()) {
    return grpc::health::v1::HealthCheckResponse::UNKNOWN;
  }
  return response.status();
}

TEST(MusterdTest, ServesWritesThePortAndStopsCleanlyOnSigterm) {
  Musterd d;
  ASSERT_GT(d.port(), 0) << d.proc().Output();
  EXPECT_TRUE(d.proc().WaitForOutput(
      absl::StrCat("musterd listening on 127.0.0.1:", d.port()), kDeadline))
      << d.proc().Output();
  EXPECT_EQ(Health(d.port()), grpc::health::v1::HealthCheckResponse::SERVING);
  const absl::Time start = absl::Now();
  d.proc().Signal(SIGTERM);
  EXPECT_EQ(d.proc().WaitOrKill(kDeadline), 0) << d.proc().Output();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_THAT(d.proc().Output(), HasSubstr("shutting down"));
}

TEST(MusterdTest, StopsCleanlyOnSigint) {
  Musterd d({"--log-level=debug", "--heartbeat-timeout=500ms"});
  ASSERT_GT(d.port(), 0) << d.proc().Output();
  d.proc().Signal(SIGINT);
  EXPECT_EQ(d.proc().WaitOrKill(kDeadline), 0) << d.proc().Output();
}

// An agent whose musterd dies (SIGKILL: no goodbye) learns it at once, with the
// endpoint named.
TEST(MusterdTest, KilledServerEndsTheAgentsSessionAsUnavailable) {
  Musterd d;
  ASSERT_GT(d.port(), 0) << d.proc().Output();
  rendezvous::GrpcClientOptions options;
  options.endpoint = LoopbackEndpoint(d.port());
  options.connect_timeout = absl::Seconds(5);
  auto client = rendezvous::NewGrpcRendezvousClient(options);
  ASSERT_TRUE(client
                  ->Start(MakeJoin(
                      {.job_id = "killed", .min_nodes = 2, .max_nodes = 2}))
                  .ok());
  auto waiting = client->Next(kDeadline);
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  EXPECT_TRUE(waiting->has_waiting());
  d.proc().Kill();
  const absl::Time killed = absl::Now();
  auto lost = client->Next(kDeadline);
  EXPECT_EQ(lost.status().code(), absl::StatusCode::kUnavailable)
      << lost.status();
  EXPECT_THAT(lost.status().message(),
              HasSubstr("lost the rendezvous server at " + options.endpoint));
  EXPECT_LT(absl::Now() - killed, absl::Seconds(2));
  client->Close("");
}

TEST(MusterdTest, TakenPortNamesThePortAndItsHolder) {
  Musterd first;
  ASSERT_GT(first.port(), 0) << first.proc().Output();
  Subprocess second(
      {BinPath("musterd"), absl::StrCat("--listen=127.0.0.1:", first.port())});
  EXPECT_EQ(second.WaitOrKill(kDeadline), 1) << second.Output();
  EXPECT_THAT(second.Output(),
              HasSubstr(absl::StrCat("127.0.0.1:", first.port())));
  EXPECT_THAT(second.Output(),
              HasSubstr(absl::StrCat("pid ", first.proc().pid())));
  EXPECT_THAT(second.Output(),
              ::testing::Not(HasSubstr("grpc:")));  // gRPC's noise stays out
}

TEST(MusterdTest, BadFlagsExitTwoWithAMessage) {
  {
    Subprocess d({BinPath("musterd"), "--no-such-flag"});
    EXPECT_EQ(d.WaitOrKill(kDeadline), 2);
    EXPECT_THAT(d.Output(), HasSubstr("--no-such-flag"));
  }
  {
    Subprocess d({BinPath("musterd"), "--heartbeat-timeout=soon"});
    EXPECT_EQ(d.WaitOrKill(kDeadline), 2);
    EXPECT_THAT(d.Output(), HasSubstr("--heartbeat-timeout"));
  }
  {
    Subprocess d({BinPath("musterd"), "--log-level=loud"});
    EXPECT_EQ(d.WaitOrKill(kDeadline), 2);
    EXPECT_THAT(d.Output(), HasSubstr("loud"));
  }
  {
    Subprocess d({BinPath("musterd"), "--listen=127.0.0.1:99999"});
    EXPECT_EQ(d.WaitOrKill(kDeadline), 2);
    EXPECT_THAT(d.Output(), HasSubstr("99999"));
  }
}

// Windows services are installed by musterd.exe itself; on Linux the flags
// say where the systemd unit is, and exit 1 without serving.
TEST(MusterdTest, ServiceFlagsOnLinuxPointAtSystemd) {
  {
    Subprocess d(
        {BinPath("musterd"), "--install-service", "--listen=127.0.0.1:0"});
    EXPECT_EQ(d.WaitOrKill(kDeadline), 1);
    EXPECT_THAT(d.Output(), HasSubstr("deploy/"));
  }
  {
    Subprocess d(
        {BinPath("musterd"), "--uninstall-service", "--service-name=rdzv"});
    EXPECT_EQ(d.WaitOrKill(kDeadline), 1);
    EXPECT_THAT(d.Output(), HasSubstr("systemctl disable --now rdzv"));
  }
  {
    Subprocess d(
        {BinPath("musterd"), "--install-service", "--uninstall-service"});
    EXPECT_EQ(d.WaitOrKill(kDeadline), 2);
    EXPECT_THAT(d.Output(), HasSubstr("exclude each other"));
  }
}

// --log-file: every line goes to the file as well; a path that cannot be
// opened is refused before serving.
TEST(MusterdTest, LogFileGetsTheLogAndABadOneExitsTwo) {
  const std::string dir = MakeTempDir("musterd-log");
  {
    Musterd d({"--log-file=" + dir + "/musterd.log"});
    ASSERT_GT(d.port(), 0) << d.proc().Output();
    d.proc().Signal(SIGTERM);
    EXPECT_EQ(d.proc().WaitOrKill(kDeadline), 0) << d.proc().Output();
  }
  std::ifstream in(dir + "/musterd.log");
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("musterd listening on 127.0.0.1:"));
  EXPECT_THAT(text.str(), HasSubstr("musterd stopped"));
  Subprocess bad({BinPath("musterd"), "--listen=127.0.0.1:0",
                  "--log-file=" + dir + "/no/such/dir/musterd.log"});
  EXPECT_EQ(bad.WaitOrKill(kDeadline), 2);
  EXPECT_THAT(bad.Output(), HasSubstr("--log-file="));
}

// Issue 11: --port-file replaces only an absent path or a regular file. A
// FIFO, a character device, a directory or a symlink is refused before
// serving (exit 2) and left as it was.
TEST(MusterdTest, PortFileRefusesWhatIsNotARegularFile) {
  const std::string dir = MakeTempDir("musterd-portfile");
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string link = dir + "/link";
  ASSERT_EQ(symlink("/dev/null", link.c_str()), 0);
  struct Case {
    std::string path;
    std::string what;
  };
  for (const Case& c : std::vector<Case>{{fifo, "a FIFO"},
                                         {"/dev/null", "a character device"},
                                         {dir, "a directory"},
                                         {link, "a symbolic link"}}) {
    Subprocess d(
        {BinPath("musterd"), "--listen=127.0.0.1:0", "--port-file=" + c.path});
    EXPECT_EQ(d.WaitOrKill(kDeadline), 2) << d.Output();
    EXPECT_THAT(d.Output(), HasSubstr(c.path + " is " + c.what));
    EXPECT_THAT(d.Output(), HasSubstr("does not exist or is a regular file"));
  }
  struct stat st;
  ASSERT_EQ(lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the FIFO was replaced";
  ASSERT_EQ(lstat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  ASSERT_EQ(lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
}

TEST(MusterdTest, VersionAndHelp) {
  {
    Subprocess d({BinPath("musterd"), "--version"});
    EXPECT_EQ(d.WaitOrKill(kDeadline), 0);
    EXPECT_THAT(d.Output(), HasSubstr("musterd "));
  }
  {
    Subprocess d({BinPath("musterd"), "--help"});
    EXPECT_EQ(d.WaitOrKill(kDeadline), 0);
    EXPECT_THAT(d.Output(), HasSubstr("--listen"));
    EXPECT_THAT(d.Output(), HasSubstr("--port-file"));
    // Issue 11: the Store's limits, with their defaults.
    for (const char* flag : {"--store-max-key-bytes", "--store-max-value-bytes",
                             "--store-max-keys", "--store-max-bytes"}) {
      EXPECT_THAT(d.Output(), HasSubstr(flag));
    }
    EXPECT_THAT(d.Output(), HasSubstr("268435456"));  // 256 MiB a round
  }
}

// Issue 11: one namespace took 600 values of 1 MB. A real musterd refuses the
// write past its quota with RESOURCE_EXHAUSTED naming the limit and its flag,
// keeps what it had, and stays up.
TEST(MusterdTest, StoreQuotaRefusesTheWritePastItOverGrpc) {
  Musterd d({"--store-max-bytes=3500000", "--store-max-value-bytes=1100000"});
  ASSERT_GT(d.port(), 0) << d.proc().Output();
  auto store = v1::Store::NewStub(LoopbackChannel(d.port()));
  auto set = [&](const std::string& key, size_t bytes) {
    v1::SetRequest request;
    request.set_prefix("job/1");
    request.set_key(key);
    request.set_value(std::string(bytes, 'v'));
    grpc::ClientContext context;
    PrepareContext(&context);
    v1::SetResponse response;
    return store->Set(&context, request, &response);
  };
  for (int i = 0; i < 3; ++i) {
    grpc::Status s = set(absl::StrCat("k", i), 1 << 20);
    ASSERT_TRUE(s.ok()) << i << ": " << s.error_message();
  }
  grpc::Status s = set("k3", 1 << 20);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("quota of 3500000 bytes"));
  EXPECT_THAT(s.error_message(), HasSubstr("--store-max-bytes"));
  // Past the value limit in one write.
  s = set("big", 1100001);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("limit of 1100000 bytes"));
  EXPECT_THAT(s.error_message(), HasSubstr("--store-max-value-bytes"));
  // Another job's namespace has its own quota, and musterd still serves.
  v1::SetRequest other;
  other.set_prefix("other/1");
  other.set_key("k");
  other.set_value("v");
  grpc::ClientContext context;
  PrepareContext(&context);
  v1::SetResponse response;
  EXPECT_TRUE(store->Set(&context, other, &response).ok());
  EXPECT_EQ(Health(d.port()), grpc::health::v1::HealthCheckResponse::SERVING);
}

}  // namespace
}  // namespace muster
