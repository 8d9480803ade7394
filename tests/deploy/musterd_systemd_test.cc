// musterd as systemd runs it (Type=notify, WatchdogSec=): the notifications it
// sends to a real $NOTIFY_SOCKET, a datagram socket this test binds and reads
// with the sender's credentials, as systemd does; and its --config file.
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/rendezvous/client.h"
#include "tests/testing/ports.h"
#include "tests/testing/rendezvous.h"
#include "tests/testing/subprocess.h"

namespace muster {
namespace {

using ::muster::testing::BinPath;
using ::muster::testing::LoopbackEndpoint;
using ::muster::testing::MakeJoin;
using ::muster::testing::MakeTempDir;
using ::muster::testing::ReadPortFile;
using ::muster::testing::Subprocess;
using ::muster::testing::WaitUntil;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr absl::Duration kDeadline = absl::Seconds(20);

// One datagram from the notify socket.
struct Notification {
  std::string text;
  pid_t pid = 0;  // the sender, from SCM_CREDENTIALS
  absl::Time at;
};

// A bound AF_UNIX datagram socket, as systemd's $NOTIFY_SOCKET.
class NotifySocket {
 public:
  NotifySocket() {
    path_ = MakeTempDir("sdnotify") + "/notify";
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    EXPECT_GE(fd_, 0) << std::strerror(errno);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    EXPECT_LT(path_.size(), sizeof(addr.sun_path)) << path_;
    std::strncpy(addr.sun_path, path_.c_str(), sizeof(addr.sun_path) - 1);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0)
        << std::strerror(errno);
    // musterd runs as this test's user; a DynamicUser under systemd writes to a
    // socket that systemd made writable for it.
    chmod(path_.c_str(), 0666);
    int one = 1;
    EXPECT_EQ(setsockopt(fd_, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)), 0);
  }
  ~NotifySocket() {
    if (fd_ >= 0) close(fd_);
    unlink(path_.c_str());
  }
  const std::string& path() const { return path_; }

  // The next datagram, or nullopt when none came within timeout.
  std::optional<Notification> Receive(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (true) {
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) return std::nullopt;
      timeval tv = absl::ToTimeval(left);
      setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      char buffer[4096];
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred))];
      iovec iov{buffer, sizeof(buffer)};
      msghdr msg{.msg_name = nullptr,
                 .msg_namelen = 0,
                 .msg_iov = &iov,
                 .msg_iovlen = 1,
                 .msg_control = control,
                 .msg_controllen = sizeof(control),
                 .msg_flags = 0};
      ssize_t n = recvmsg(fd_, &msg, 0);
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
        ADD_FAILURE() << "recvmsg: " << std::strerror(errno);
        return std::nullopt;
      }
      Notification note;
      note.text.assign(buffer, static_cast<size_t>(n));
      note.at = absl::Now();
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr;
           c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
          ucred cred;
          std::memcpy(&cred, CMSG_DATA(c), sizeof(cred));
          note.pid = cred.pid;
        }
      }
      return note;
    }
  }

  // Datagrams until one contains `text` (returned), or nullopt at timeout.
  // Everything received on the way is appended to *seen.
  std::optional<Notification> ReceiveUntil(const std::string& text,
                                           absl::Duration timeout,
                                           std::vector<Notification>* seen) {
    const absl::Time deadline = absl::Now() + timeout;
    while (true) {
      std::optional<Notification> note = Receive(deadline - absl::Now());
      if (!note.has_value()) return std::nullopt;
      seen->push_back(*note);
      if (absl::StrContains(note->text, text)) return note;
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
};

std::string Describe(const std::vector<Notification>& notes) {
  std::string out;
  for (const Notification& n : notes) {
    absl::StrAppend(&out, "  pid ", n.pid, ": ", n.text, "\n");
  }
  return out;
}

// musterd exec'd by a shell that first exports WATCHDOG_PID=$$: systemd sets
// it to the service's main pid, and the exec keeps the shell's pid, so it is
// musterd's own. `watchdog_pid` other than "self" sets another value instead.
std::unique_ptr<Subprocess> StartMusterd(const NotifySocket& socket,
                                         const std::string& port_file,
                                         const std::string& watchdog_usec,
                                         const std::string& watchdog_pid) {
  const std::string pid_value =
      watchdog_pid == "self" ? "$$" : "'" + watchdog_pid + "'";
  return std::make_unique<Subprocess>(
      std::vector<std::string>{"/bin/sh", "-c",
                               absl::StrCat("export WATCHDOG_PID=", pid_value,
                                            "; exec \"$0\" \"$@\""),
                               BinPath("musterd"), "--listen=127.0.0.1:0",
                               "--port-file=" + port_file},
      std::map<std::string, std::string>{{"NOTIFY_SOCKET", socket.path()},
                                         {"WATCHDOG_USEC", watchdog_usec}});
}

TEST(MusterdSystemdTest, ReadyWatchdogStatusAndStopping) {
  NotifySocket socket;
  const std::string port_file = MakeTempDir("musterd-notify") + "/port";
  // WatchdogSec=1s: musterd must ping every 0.5 s.
  std::unique_ptr<Subprocess> musterd =
      StartMusterd(socket, port_file, "1000000", "self");
  const pid_t pid = musterd->pid();
  std::vector<Notification> seen;

  // READY=1 once it listens: the port file is written and the port answers.
  std::optional<Notification> ready =
      socket.ReceiveUntil("READY=1", kDeadline, &seen);
  ASSERT_TRUE(ready.has_value()) << "no READY=1; got:\n"
                                 << Describe(seen) << musterd->Output();
  EXPECT_EQ(ready->pid, pid) << "READY=1 must come from the main pid";
  const int port = ReadPortFile(port_file);
  ASSERT_GT(port, 0) << "READY=1 before the port file was written";
  EXPECT_THAT(ready->text,
              HasSubstr(absl::StrCat("STATUS=serving on 127.0.0.1:", port,
                                     ": 0 job(s), 0 agent(s)")));
  EXPECT_THAT(musterd->Output(), HasSubstr("systemd watchdog: 1s"));

  // WATCHDOG=1 at half the interval: about 6 pings in 3 s, never a gap that
  // would let systemd's watchdog fire.
  const absl::Time start = absl::Now();
  std::vector<absl::Time> pings;
  while (absl::Now() - start < absl::Milliseconds(3200)) {
    std::optional<Notification> n = socket.Receive(absl::Milliseconds(200));
    if (!n.has_value()) continue;
    seen.push_back(*n);
    EXPECT_EQ(n->pid, pid) << n->text;
    if (absl::StrContains(n->text, "WATCHDOG=1")) pings.push_back(n->at);
  }
  EXPECT_GE(pings.size(), 4u) << Describe(seen);
  EXPECT_LE(pings.size(), 9u) << Describe(seen);
  absl::Time previous = ready->at;
  absl::Duration longest;
  for (absl::Time t : pings) {
    longest = std::max(longest, t - previous);
    previous = t;
  }
  EXPECT_LT(longest, absl::Seconds(1)) << "a gap the watchdog would not "
                                          "forgive:\n"
                                       << Describe(seen);
  if (!pings.empty()) {
    const absl::Duration mean =
        (pings.back() - pings.front()) / std::max<size_t>(1, pings.size() - 1);
    EXPECT_GT(mean, absl::Milliseconds(350)) << Describe(seen);
    EXPECT_LT(mean, absl::Milliseconds(750)) << Describe(seen);
  }

  // STATUS= follows the rendezvous: an agent that joins shows.
  rendezvous::GrpcClientOptions options;
  options.endpoint = LoopbackEndpoint(port);
  options.connect_timeout = absl::Seconds(5);
  auto client = rendezvous::NewGrpcRendezvousClient(options);
  ASSERT_TRUE(client
                  ->Start(MakeJoin(
                      {.job_id = "notify", .min_nodes = 2, .max_nodes = 2}))
                  .ok());
  EXPECT_TRUE(
      socket
          .ReceiveUntil("STATUS=serving on 127.0.0.1:" + std::to_string(port) +
                            ": 1 job(s), 1 agent(s)",
                        kDeadline, &seen)
          .has_value())
      << Describe(seen);

  // SIGTERM: STOPPING=1, then a clean exit.
  musterd->Signal(SIGTERM);
  std::optional<Notification> stopping =
      socket.ReceiveUntil("STOPPING=1", kDeadline, &seen);
  ASSERT_TRUE(stopping.has_value()) << Describe(seen) << musterd->Output();
  EXPECT_EQ(stopping->pid, pid);
  EXPECT_THAT(stopping->text, HasSubstr("STATUS=shutting down (SIGTERM)"));
  EXPECT_EQ(musterd->WaitOrKill(kDeadline), 0) << musterd->Output();
  client.reset();
}

// WATCHDOG_PID names another process: the watchdog is not musterd's, and it
// must not ping (sd_watchdog_enabled's rule), while READY=1 still goes out.
TEST(MusterdSystemdTest, NoWatchdogPingsForAnotherPid) {
  NotifySocket socket;
  const std::string port_file = MakeTempDir("musterd-notify") + "/port";
  std::unique_ptr<Subprocess> musterd =
      StartMusterd(socket, port_file, "200000", "1");
  std::vector<Notification> seen;
  ASSERT_TRUE(socket.ReceiveUntil("READY=1", kDeadline, &seen).has_value())
      << Describe(seen) << musterd->Output();
  EXPECT_FALSE(
      socket.ReceiveUntil("WATCHDOG=1", absl::Milliseconds(1500), &seen)
          .has_value())
      << Describe(seen);
  musterd->Signal(SIGTERM);
  EXPECT_EQ(musterd->WaitOrKill(kDeadline), 0) << musterd->Output();
}

// A port that cannot be bound: no READY=1, a STATUS= that says why, exit 1.
TEST(MusterdSystemdTest, CannotServeSaysWhyAndSendsNoReady) {
  NotifySocket socket;
  const std::string holder_port = MakeTempDir("holder") + "/port";
  Subprocess holder({BinPath("musterd"), "--listen=127.0.0.1:0",
                     "--port-file=" + holder_port});
  ASSERT_TRUE(
      WaitUntil([&] { return ReadPortFile(holder_port) > 0; }, kDeadline))
      << holder.Output();
  Subprocess second(
      {BinPath("musterd"),
       absl::StrCat("--listen=127.0.0.1:", ReadPortFile(holder_port))},
      {{"NOTIFY_SOCKET", socket.path()}});
  EXPECT_EQ(second.WaitOrKill(kDeadline), 1) << second.Output();
  std::vector<Notification> seen;
  std::optional<Notification> status =
      socket.ReceiveUntil("STATUS=cannot serve", absl::Seconds(5), &seen);
  EXPECT_TRUE(status.has_value()) << Describe(seen) << second.Output();
  for (const Notification& n : seen)
    EXPECT_THAT(n.text, Not(HasSubstr("READY=1")));
  holder.Signal(SIGTERM);
  EXPECT_EQ(holder.WaitOrKill(kDeadline), 0);
}

std::string WriteFile(const std::string& dir, const std::string& name,
                      const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// --config: the file documented in deploy/systemd/musterd.conf.
TEST(MusterdConfigTest, ReadsSettingsAndTheCommandLineWins) {
  const std::string dir = MakeTempDir("musterd-config");
  const std::string config =
      WriteFile(dir, "musterd.conf",
                absl::StrCat("# a comment\nlisten = \"127.0.0.1:0\"\n"
                             "heartbeat-timeout = \"3s\"\nlog-level = debug\n"
                             "port-file = \"",
                             dir, "/port\"\n"));
  Subprocess musterd({BinPath("musterd"), "--config=" + config});
  ASSERT_TRUE(
      musterd.WaitForOutput("musterd listening on 127.0.0.1:", kDeadline))
      << musterd.Output();
  EXPECT_TRUE(
      WaitUntil([&] { return ReadPortFile(dir + "/port") > 0; }, kDeadline));
  musterd.Signal(SIGTERM);
  EXPECT_EQ(musterd.WaitOrKill(kDeadline), 0) << musterd.Output();
  // log-level = debug took effect.
  EXPECT_THAT(musterd.Output(), HasSubstr(" D [musterd] "));

  // The command line wins: --log-level=error silences the info lines.
  Subprocess quiet({BinPath("musterd"), "--config=" + config,
                    "--log-level=error", "--port-file=" + dir + "/port2"});
  EXPECT_TRUE(
      WaitUntil([&] { return ReadPortFile(dir + "/port2") > 0; }, kDeadline))
      << quiet.Output();
  quiet.Signal(SIGTERM);
  EXPECT_EQ(quiet.WaitOrKill(kDeadline), 0) << quiet.Output();
  EXPECT_THAT(quiet.Output(), Not(HasSubstr("listening on")));
}

TEST(MusterdConfigTest, TheShippedConfigParses) {
  // Every line of the shipped file is a comment or a default: musterd accepts
  // it as it is.
  const std::string shipped =
      ::muster::testing::SourceDir() + "/deploy/systemd/musterd.conf";
  const std::string dir = MakeTempDir("musterd-config");
  Subprocess musterd({BinPath("musterd"), "--config=" + shipped,
                      "--listen=127.0.0.1:0", "--port-file=" + dir + "/port"});
  EXPECT_TRUE(
      WaitUntil([&] { return ReadPortFile(dir + "/port") > 0; }, kDeadline))
      << musterd.Output();
  musterd.Signal(SIGTERM);
  EXPECT_EQ(musterd.WaitOrKill(kDeadline), 0) << musterd.Output();
}

TEST(MusterdConfigTest, BadFilesAreUsageErrors) {
  const std::string dir = MakeTempDir("musterd-config");
  // A misspelt key is not silently ignored.
  const std::string typo =
      WriteFile(dir, "typo.conf", "lisen = \"127.0.0.1:0\"\n");
  Subprocess a({BinPath("musterd"), "--config=" + typo});
  EXPECT_EQ(a.WaitOrKill(kDeadline), 2) << a.Output();
  EXPECT_THAT(a.Output(), HasSubstr("lisen"));
  // A missing file.
  Subprocess b({BinPath("musterd"), "--config=" + dir + "/absent.conf"});
  EXPECT_EQ(b.WaitOrKill(kDeadline), 2) << b.Output();
  EXPECT_THAT(b.Output(), HasSubstr("absent.conf"));
  // A bad value.
  const std::string bad =
      WriteFile(dir, "bad.conf", "heartbeat-timeout = \"soon\"\n");
  Subprocess c({BinPath("musterd"), "--config=" + bad, "--listen=127.0.0.1:0"});
  EXPECT_EQ(c.WaitOrKill(kDeadline), 2) << c.Output();
  EXPECT_THAT(c.Output(), HasSubstr("soon"));
}

}  // namespace
}  // namespace muster
