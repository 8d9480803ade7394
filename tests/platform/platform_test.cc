// The POSIX platform layer on the real OS: atomic writes of regular files
// only, locks, modification times, PATH lookup, helper commands with a
// deadline, signal names, and stop requests delivered to the watcher.
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/platform/env.h"
#include "muster/platform/files.h"
#include "muster/platform/host.h"
#include "muster/platform/process.h"
#include "muster/platform/signals.h"
#include "muster/platform/stop_requests.h"

namespace muster::platform {
namespace {

using ::testing::HasSubstr;

class TempDir {
 public:
  TempDir() {
    auto dir = MakeTempDirectory("muster-platform-test-");
    EXPECT_TRUE(dir.ok()) << dir.status();
    path_ = dir.value_or("/nonexistent");
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const {
    return path_ + "/" + name;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Replaces `file` twice, the second time with mode 0600: the last contents
// and the mode stand, nothing is left beside it, and a FIFO is refused.
void ExpectAtomicReplace(const TempDir& dir, Durability durability) {
  const std::string file = dir / "port";
  ASSERT_TRUE(WriteFileAtomically(file, "29400\n", 0644, durability).ok());
  EXPECT_EQ(Slurp(file), "29400\n");
  ASSERT_TRUE(WriteFileAtomically(file, "1\n", 0600, durability).ok());
  EXPECT_EQ(Slurp(file), "1\n");
  struct stat st {};
  ASSERT_EQ(stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 1);
  const std::string fifo = dir / "fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  absl::Status s = WriteFileAtomically(fifo, "x", 0600, durability);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("is a FIFO"));
}

TEST(FilesTest, WriteFileAtomicallyReplacesRegularFilesOnly) {
  TempDir dir;
  ExpectAtomicReplace(dir, Durability::kDurable);
  EXPECT_EQ(DescribeNonRegularFile(dir / "fifo"), "a FIFO");
  EXPECT_EQ(DescribeNonRegularFile(dir.path()), "a directory");
  EXPECT_EQ(DescribeNonRegularFile(dir / "absent"), "");
  EXPECT_EQ(WriteFileAtomically(dir / "no/such/dir/f", "x").code(),
            absl::StatusCode::kInternal);
}

// kVolatile (no flush to the disk) replaces the file as atomically, with the
// same checks: what the agent's control channel uses.
TEST(FilesTest, WriteFileAtomicallyVolatileReplacesAsTheDurableOne) {
  TempDir dir;
  ExpectAtomicReplace(dir, Durability::kVolatile);
}

TEST(FilesTest, ModificationTimeAndLocks) {
  TempDir dir;
  EXPECT_FALSE(ModificationTime(dir / "absent").has_value());
  const std::string file = dir / "f";
  ASSERT_TRUE(WriteFileAtomically(file, "x").ok());
  auto mtime = ModificationTime(file);
  ASSERT_TRUE(mtime.has_value());
  EXPECT_LT(absl::AbsDuration(*mtime - absl::Now()), absl::Minutes(5));

  auto first = FileLock::TryLock(dir / "lock");
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = FileLock::TryLock(dir / "lock");
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  first->reset();
  EXPECT_TRUE(FileLock::TryLock(dir / "lock").ok());
}

TEST(HostTest, RandomBytesAreFreshEachTime) {
  uint8_t a[32] = {}, b[32] = {};
  ASSERT_TRUE(RandomBytes(a, sizeof(a)).ok());
  ASSERT_TRUE(RandomBytes(b, sizeof(b)).ok());
  const uint8_t zero[32] = {};
  EXPECT_NE(std::memcmp(a, b, sizeof(a)), 0);
  EXPECT_NE(std::memcmp(a, zero, sizeof(a)), 0);
}

TEST(HostTest, RaiseOpenFileLimitRaisesTheSoftLimitToTheHardOne) {
  struct rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  if (saved.rlim_max != RLIM_INFINITY && saved.rlim_max <= 256) {
    GTEST_SKIP() << "hard limit " << saved.rlim_max
                 << " leaves nothing to raise";
  }
  struct rlimit low = saved;
  low.rlim_cur = 256;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  const OpenFileLimit limit = RaiseOpenFileLimit();
  struct rlimit now;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &now), 0);
  EXPECT_EQ(limit.before, 256);
  EXPECT_EQ(now.rlim_cur, saved.rlim_max);
  if (saved.rlim_max != RLIM_INFINITY) {
    EXPECT_EQ(limit.now, static_cast<int64_t>(saved.rlim_max));
  }
  // Never lowers: a second call finds it raised already.
  const OpenFileLimit again = RaiseOpenFileLimit();
  EXPECT_EQ(again.before, limit.now);
  EXPECT_EQ(again.now, limit.now);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
}

TEST(HostTest, HugePageMallocTunablesAddsToWhatIsSetAndKeepsAChoice) {
  EXPECT_EQ(HugePageMallocTunables(nullptr), "glibc.malloc.hugetlb=1");
  EXPECT_EQ(HugePageMallocTunables(""), "glibc.malloc.hugetlb=1");
  EXPECT_EQ(HugePageMallocTunables("glibc.malloc.arena_max=2"),
            "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1");
  // The operator's own value (0 turns it off), or the one set before the exec.
  EXPECT_EQ(HugePageMallocTunables("glibc.malloc.hugetlb=0"), std::nullopt);
  EXPECT_EQ(HugePageMallocTunables("a=1:glibc.malloc.hugetlb=1"), std::nullopt);
}

TEST(EnvTest, FindExecutableAsExecvp) {
  auto sh = FindExecutable("sh", "/nonexistent:/bin:/usr/bin");
  ASSERT_TRUE(sh.ok()) << sh.status();
  EXPECT_THAT(*sh, HasSubstr("/sh"));
  auto missing = FindExecutable("muster-no-such-tool", "/bin");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("not found in PATH (/bin)"));
  EXPECT_EQ(FindExecutable("", "/bin").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GetEnv("MUSTER_PLATFORM_TEST_UNSET"), std::nullopt);
  EXPECT_EQ(CurrentEnvironment().count("MUSTER_PLATFORM_TEST_UNSET"), 0u);
  EXPECT_GT(ProcessId(), 0);
}

TEST(CommandTest, OutputExitCodeAndTimeout) {
  CommandSpec echo;
  echo.argv = {"sh", "-c", "printf hello; exit 3"};
  echo.env = {{"PATH", "/bin:/usr/bin"}};
  auto r = RunCommand(echo);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->output, "hello");
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_FALSE(r->timed_out);

  CommandSpec slow;
  slow.argv = {"sleep", "30"};
  slow.timeout = absl::Milliseconds(200);
  const absl::Time start = absl::Now();
  r = RunCommand(slow);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->timed_out);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));

  CommandSpec missing;
  missing.argv = {"muster-no-such-tool"};
  EXPECT_EQ(RunCommand(missing).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(FilesTest, ListDirectoryNamesSortedWithoutDots) {
  TempDir dir;
  ASSERT_TRUE(WriteFileAtomically(dir / "b", "").ok());
  ASSERT_TRUE(WriteFileAtomically(dir / "a", "").ok());
  std::filesystem::create_directory(dir / "c");
  EXPECT_THAT(ListDirectory(dir.path()), ::testing::ElementsAre("a", "b", "c"));
  EXPECT_TRUE(ListDirectory(dir / "absent").empty());
  EXPECT_TRUE(ListDirectory(dir / "a").empty());  // a file, not a directory
}

TEST(SignalsTest, Names) {
  EXPECT_EQ(SignalName(kSignalTerminate), "SIGTERM");
  EXPECT_EQ(SignalName(kSignalKill), "SIGKILL");
  EXPECT_EQ(SignalNumber("term"), kSignalTerminate);
  EXPECT_EQ(SignalNumber("SIGINT"), kSignalInterrupt);
  EXPECT_EQ(SignalNumber("nope"), -1);
}

TEST(StopRequestsTest, ASignalReachesTheWatcher) {
  StopRequests stops({SIGUSR2});
  absl::Notification got;
  int seen = 0;
  stops.StartWatcher([&](int sig) {
    seen = sig;
    got.Notify();
  });
  ASSERT_EQ(kill(getpid(), SIGUSR2), 0);
  ASSERT_TRUE(got.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(seen, SIGUSR2);
}

}  // namespace
}  // namespace muster::platform
