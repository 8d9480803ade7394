// libmuster_comm on Windows (under wine): two ranks as processes, each the
// ported tests/comm/comm_worker.exe, started with the platform's
// ProcessLauncher (job objects). Gloo runs on its libuv transport there.
//
//  * file:///C:/... init: every collective x dtype x op against the
//    reference on 2 ranks (AllReduce in shared memory, the rest on Gloo's
//    libuv mesh), and the store file is gone afterwards.
//  * a rank that dies (TerminateProcess) in the middle of an AllReduce, on
//    the direct mesh (4 KB), on Gloo's mesh (4 MB) and in shared memory: the
//    survivor's error names "peer rank 1" within 10 s (the worker checks)
//    and it exits 0.
//  * a store file left by a killed run is cleared with a warning that names
//    the dead rank and its pid; the new run finishes.
//  * a store file whose lock another process holds: init fails after
//    MUSTER_FILE_STORE_LOCK_TIMEOUT with an error naming that process.
//  * tcp://127.0.0.1:PORT (every collective, MUSTER_SHM=0: AllReduce on the
//    direct mesh and Gloo's libuv mesh) and env:// (MASTER_ADDR/MASTER_PORT):
//    rank 0 serves the store.
// clang-format off
#include <winsock2.h>
#include <windows.h>
// clang-format on

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "comm/src/os.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/platform/env.h"
#include "muster/platform/process.h"
#include "platform/windows/win_util.h"
#include "tests/windows/win_test_util.h"

namespace muster::comm {
namespace {

using platform::GroupStatus;
using platform::ProcessExit;
using platform::ProcessGroup;
using platform::ProcessLauncher;
using platform::ProcessSpec;
using ::testing::HasSubstr;
using wintest::ReadText;
using wintest::TempDir;
using wintest::WaitUntil;

// Generous: every wine process start costs seconds on a loaded machine.
constexpr absl::Duration kRunTimeout = absl::Seconds(240);

std::string WorkerPath() { return wintest::BesideTest(L"comm_worker.exe"); }

// One rank of comm_worker; stdout and stderr to <dir>/rank<R>.out|.err.
ProcessSpec Rank(const TempDir& dir, int rank, int world_size,
                 const std::string& init, std::vector<std::string> args,
                 std::map<std::string, std::string> env = {}) {
  ProcessSpec spec;
  spec.argv = {WorkerPath(), "--init=" + init, absl::StrCat("--rank=", rank),
               absl::StrCat("--world-size=", world_size)};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.env = platform::CurrentEnvironment();
  for (const auto& [k, v] : env) spec.env[k] = v;
  spec.name = absl::StrCat("rank ", rank);
  spec.stdout_route.console = false;
  spec.stdout_route.file = dir / absl::StrCat("rank", rank, ".out");
  spec.stderr_route.console = false;
  spec.stderr_route.file = dir / absl::StrCat("rank", rank, ".err");
  return spec;
}

std::string Output(const TempDir& dir, int rank) {
  return ReadText(dir / absl::StrCat("rank", rank, ".out")) +
         ReadText(dir / absl::StrCat("rank", rank, ".err"));
}

std::unique_ptr<ProcessGroup> Start(const std::vector<ProcessSpec>& specs) {
  auto group = ProcessLauncher::Default()->Start(specs, {});
  EXPECT_TRUE(group.ok()) << group.status();
  return group.ok() ? std::move(*group) : nullptr;
}

// Waits until all `n` processes of `group` ended, or `timeout`; then stops
// what is left (so nothing outlives the test).
GroupStatus WaitAll(ProcessGroup& group, size_t n, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  GroupStatus st = group.Poll();
  while (st.exits.size() < n && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
    st = group.Poll();
  }
  if (st.exits.size() < n) st = group.Stop(15, absl::Seconds(1));
  return st;
}

const ProcessExit* ExitOf(const GroupStatus& st, size_t index) {
  for (const ProcessExit& e : st.exits) {
    if (e.index == index) return &e;
  }
  return nullptr;
}

int ExitCode(const GroupStatus& st, size_t index) {
  const ProcessExit* e = ExitOf(st, index);
  return e == nullptr ? -1000 : e->exit_code;
}

// file:///C:/... for a Windows path.
std::string FileUri(const std::string& path) {
  return "file:///" + absl::StrReplaceAll(path, {{"\\", "/"}});
}

bool Exists(const std::string& path) {
  return GetFileAttributesW(platform::windows::Widen(path).c_str()) !=
         INVALID_FILE_ATTRIBUTES;
}

// Two ranks of `mode` with `init`: both exit 0 and print `line` ("rank
// R/2" + line).
void ExpectTwoRanksPass(const std::string& init, const std::string& mode,
                        const std::string& line,
                        const std::map<std::string, std::string>& env = {}) {
  TempDir dir;
  auto group = Start({Rank(dir, 0, 2, init, {"--mode=" + mode}, env),
                      Rank(dir, 1, 2, init, {"--mode=" + mode}, env)});
  ASSERT_NE(group, nullptr);
  GroupStatus st = WaitAll(*group, 2, kRunTimeout);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ExitCode(st, r), 0) << Output(dir, r);
    EXPECT_THAT(Output(dir, r),
                HasSubstr(absl::StrCat("rank ", r, "/2", line)));
  }
}

TEST(WinComm, FileInitEveryCollectiveOnTwoRanks) {
  TempDir dir;
  const std::string store = dir / "store";
  ExpectTwoRanksPass(FileUri(store), "check", ": all collectives OK");
  EXPECT_FALSE(Exists(store)) << "the last rank removes the store file";
}

// The victim (rank 1) terminates itself 300 ms into a loop of AllReduces.
// `shm`: through the ranks' shared segment (the default on one host), else
// (MUSTER_SHM=0) on the direct mesh (small) or Gloo's libuv mesh (large).
void ExpectKilledPeerNamed(int count, bool shm) {
  TempDir dir;
  const std::string store = dir / "store";
  const std::vector<std::string> args = {"--mode=kill", "--victim=1",
                                         absl::StrCat("--count=", count),
                                         "--timeout=60"};
  std::map<std::string, std::string> env;
  if (!shm) env["MUSTER_SHM"] = "0";
  auto group = Start({Rank(dir, 0, 2, FileUri(store), args, env),
                      Rank(dir, 1, 2, FileUri(store), args, env)});
  ASSERT_NE(group, nullptr);
  GroupStatus st = WaitAll(*group, 2, kRunTimeout);
  const std::string survivor = Output(dir, 0);
  EXPECT_EQ(ExitCode(st, 1), 9) << Output(dir, 1);
  // Exit 0: the error named "peer rank 1" and came within 10 s.
  EXPECT_EQ(ExitCode(st, 0), 0) << survivor;
  EXPECT_THAT(survivor, HasSubstr("AllReduce failed after"));
  EXPECT_THAT(survivor, HasSubstr("peer rank 1"));
}

TEST(WinComm, AKilledRankIsNamedOnTheDirectMesh) {
  ExpectKilledPeerNamed(1024, /*shm=*/false);
}

TEST(WinComm, AKilledRankIsNamedOnGloosLibuvMesh) {
  ExpectKilledPeerNamed(1 << 20, /*shm=*/false);
}

TEST(WinComm, AKilledRankIsNamedInSharedMemory) {
  ExpectKilledPeerNamed(1 << 20, /*shm=*/true);
}

TEST(WinComm, AStaleStoreFileFromAKilledRunIsNamedAndCleared) {
  TempDir dir;
  const std::string store = dir / "store";
  {
    // A run of 2 whose rank 0 is killed while it waits for rank 1: the file
    // stays behind with rank 0 registered.
    auto killed = Start({Rank(dir, 0, 2, FileUri(store), {"--mode=init"})});
    ASSERT_NE(killed, nullptr);
    ASSERT_TRUE(WaitUntil(
        [&] { return ReadText(store).find("__member/0") != std::string::npos; },
        absl::Seconds(60)))
        << Output(dir, 0);
    const int pid = killed->pids().at(0);
    ASSERT_TRUE(killed->Kill(0, "the test's crash"));
    WaitAll(*killed, 1, absl::Seconds(30));
    ASSERT_TRUE(Exists(store));
    auto group = Start({Rank(dir, 0, 2, FileUri(store), {"--mode=init"}),
                        Rank(dir, 1, 2, FileUri(store), {"--mode=init"})});
    ASSERT_NE(group, nullptr);
    GroupStatus st = WaitAll(*group, 2, kRunTimeout);
    const std::string all = Output(dir, 0) + Output(dir, 1);
    EXPECT_EQ(ExitCode(st, 0), 0) << all;
    EXPECT_EQ(ExitCode(st, 1), 0) << all;
    EXPECT_THAT(all, HasSubstr(absl::StrCat(
                         "was left behind by an earlier run whose ranks are "
                         "gone (rank 0 (pid ",
                         pid, "))")));
    EXPECT_THAT(all, HasSubstr("clearing it"));
  }
  EXPECT_FALSE(Exists(store));
}

TEST(WinComm, ALockedStoreFileNamesTheProcessHoldingTheLock) {
  TempDir dir;
  const std::string store = dir / "store";
  // This process holds the store's lock, as a hung rank would.
  auto file = internal::LockedFile::Open(store, "the store file");
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_TRUE((*file)->Lock(internal::LockedFile::Mode::kExclusive).ok());
  EXPECT_THAT((*file)->LockHolders(),
              testing::Contains(HasSubstr(
                  absl::StrCat("pid ", GetCurrentProcessId(), " ("))));
  auto group = Start({Rank(dir, 0, 2, FileUri(store), {"--mode=init"},
                           {{"MUSTER_FILE_STORE_LOCK_TIMEOUT", "2"}})});
  ASSERT_NE(group, nullptr);
  GroupStatus st = WaitAll(*group, 1, kRunTimeout);
  const std::string out = Output(dir, 0);
  EXPECT_EQ(ExitCode(st, 0), 2) << out;  // Initialization failed.
  EXPECT_THAT(out,
              HasSubstr(absl::StrCat("is locked by pid ", GetCurrentProcessId(),
                                     " (win_comm_test.exe)")));
  EXPECT_THAT(out, HasSubstr("was not released within 2s"));
  (*file)->Unlock();
  EXPECT_TRUE((*file)->LockHolders().empty());
}

// An ephemeral port on 127.0.0.1 that was free a moment ago.
int FreePort() {
  WSADATA data;
  WSAStartup(MAKEWORD(2, 2), &data);
  SOCKET s = socket(AF_INET, SOCK_STREAM, IPPROTO_TCP);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int len = sizeof(addr);
  bind(s, reinterpret_cast<sockaddr*>(&addr), len);
  getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len);
  closesocket(s);
  return ntohs(addr.sin_port);
}

TEST(WinComm, TcpInitEveryCollectiveOnTwoRanks) {
  // Without the shared segment: every AllReduce on the direct mesh or
  // Gloo's libuv mesh (the file:// test above runs them in shared memory).
  ExpectTwoRanksPass(absl::StrCat("tcp://127.0.0.1:", FreePort()), "check",
                     ": all collectives OK", {{"MUSTER_SHM", "0"}});
}

TEST(WinComm, EnvInitWithMasterAddrAndPort) {
  TempDir dir;
  const std::string port = absl::StrCat(FreePort());
  std::vector<ProcessSpec> specs;
  for (int r = 0; r < 2; ++r) {
    ProcessSpec spec = Rank(dir, r, 2, "env://", {"--mode=init"},
                            {{"MASTER_ADDR", "127.0.0.1"},
                             {"MASTER_PORT", port},
                             {"WORLD_SIZE", "2"},
                             {"RANK", absl::StrCat(r)}});
    // Rank and size from the environment, as under a launcher.
    spec.argv.erase(spec.argv.begin() + 2, spec.argv.begin() + 4);
    specs.push_back(spec);
  }
  auto group = Start(specs);
  ASSERT_NE(group, nullptr);
  GroupStatus st = WaitAll(*group, 2, kRunTimeout);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ExitCode(st, r), 0) << Output(dir, r);
    EXPECT_THAT(Output(dir, r), HasSubstr(absl::StrCat("rank ", r, "/2: up")));
  }
}

TEST(WinComm, FileUriNeedsAnAbsoluteWindowsPath) {
  EXPECT_EQ(internal::AbsolutePathFromUri("/C:/tmp/store"), "C:/tmp/store");
  EXPECT_EQ(internal::AbsolutePathFromUri("C:\\tmp\\store"), "C:\\tmp\\store");
  EXPECT_EQ(internal::AbsolutePathFromUri("/tmp/store"), "");
  EXPECT_EQ(internal::AbsolutePathFromUri("store"), "");
}

}  // namespace
}  // namespace muster::comm
