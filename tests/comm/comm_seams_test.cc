// The seams of libmuster_comm: the StoreFactory registry that Communicator::
// Init chooses its store through, and the portable OS interfaces its general
// code calls (sockets, polling and wake-ups; mapped and locked files; process
// and host facts), each against the real OS on loopback and /tmp.
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/src/os.h"
#include "comm/store/store_factory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/comm/communicator.h"
#include "muster/store/file_store.h"
#include "muster/store/in_memory_store.h"
#include "tests/testing/subprocess.h"

namespace muster::comm::internal {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// ---- The StoreFactory registry ----

TEST(StoreFactoryTest, TheBuiltInSchemesAreRegisteredInOrder) {
  for (const char* scheme : {"env", "tcp", "file"}) {
    const StoreFactory* f = FindStoreFactory(scheme);
    ASSERT_NE(f, nullptr) << scheme;
    EXPECT_EQ(f->scheme(), scheme);
  }
  EXPECT_EQ(FindStoreFactory("nfs"), nullptr);
  EXPECT_EQ(FindStoreFactory(""), nullptr);
  EXPECT_THAT(StoreFactoryUsages(),
              StartsWith("env://, tcp://HOST:PORT or file:///PATH"));
}

TEST(StoreFactoryTest, ASchemeCannotBeRegisteredTwice) {
  absl::Status again = RegisterStoreFactory(NewTcpStoreFactory());
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists) << again;
  EXPECT_THAT(again.message(), HasSubstr("tcp://"));
}

// A scheme over one in-process store: Init finds it by name and binds
// loopback because the factory says every rank is local.
class MemStoreFactory final : public StoreFactory {
 public:
  std::string scheme() const override { return "mem"; }
  std::string usage() const override { return "mem://NAME"; }
  absl::StatusOr<JobStore> Open(const StoreRequest& request) const override {
    absl::MutexLock lock(&mu_);
    addresses_.push_back(request.address);
    JobStore job;
    job.store = store_;
    job.rank = request.rank;
    job.world_size = request.world_size;
    job.all_local = true;
    return job;
  }
  std::vector<std::string> addresses() const {
    absl::MutexLock lock(&mu_);
    return addresses_;
  }

 private:
  const std::shared_ptr<store::Store> store_ =
      std::make_shared<store::InMemoryStore>();
  mutable absl::Mutex mu_;
  mutable std::vector<std::string> addresses_ ABSL_GUARDED_BY(mu_);
};

TEST(StoreFactoryTest, InitOpensTheStoreOfARegisteredScheme) {
  auto owned = std::make_unique<MemStoreFactory>();
  MemStoreFactory* factory = owned.get();
  ASSERT_TRUE(RegisterStoreFactory(std::move(owned)).ok());
  EXPECT_THAT(StoreFactoryUsages(), HasSubstr("or mem://NAME"));
  constexpr int kRanks = 3;
  std::vector<double> results(kRanks, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      CommOptions options;
      options.timeout = absl::Seconds(30);
      auto comm = Communicator::Init("mem://job7", r, kRanks, options);
      ASSERT_TRUE(comm.ok()) << comm.status();
      double x = r + 1;
      ASSERT_TRUE(
          (*comm)->AllReduce(&x, 1, DataType::kFloat64, ReduceOp::kSum).ok());
      results[r] = x;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_THAT(results, ::testing::Each(6.0));
  EXPECT_EQ(factory->addresses(), std::vector<std::string>(kRanks, "job7"));
  // The unknown-scheme message lists it too.
  auto bad = Communicator::Init("nfs://x", 0, 1);
  EXPECT_THAT(bad.status().message(), HasSubstr("file:///PATH or mem://NAME"));
}

TEST(StoreFactoryTest, StoresSayWhetherTheirClientsShareThisHost) {
  EXPECT_TRUE(store::InMemoryStore().HostLocal());
  const std::string path = testing::MakeTempDir("hostlocal") + "/store";
  auto file = store::FileStore::Open(path, 0);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE((*file)->HostLocal());
}

// ---- Sockets ----

struct Pair {
  Socket client;
  Socket server;
};

// PollSet::Wait's count, or -1 on an error.
int WaitCount(PollSet& poll, int ms) {
  absl::StatusOr<int> n = poll.Wait(ms);
  EXPECT_TRUE(n.ok()) << n.status();
  return n.ok() ? *n : -1;
}

Pair ConnectedPair() {
  int port = 0;
  absl::StatusOr<Socket> listener = ListenTcp("127.0.0.1", 4, &port, "test");
  EXPECT_TRUE(listener.ok()) << listener.status();
  EXPECT_GT(port, 0);
  absl::StatusOr<Socket> client =
      ConnectTcp("127.0.0.1", port, absl::Now() + absl::Seconds(5), "test");
  EXPECT_TRUE(client.ok()) << client.status();
  PollSet poll;
  poll.Add(listener->handle(), PollSet::kRead);
  EXPECT_EQ(WaitCount(poll, 5000), 1);
  EXPECT_TRUE(poll.Readable(0));
  Socket server = Accept(*listener);
  EXPECT_TRUE(server.valid());
  return Pair{std::move(*client), std::move(server)};
}

TEST(SocketTest, ALoopbackPairCarriesBytesAndReportsTheEnd) {
  Pair p = ConnectedPair();
  char buf[16] = {};
  EXPECT_EQ(p.server.Recv(buf, sizeof(buf)).kind, IoResult::kWouldBlock);
  const std::string a = "hello ";
  const std::string b = "world";
  ConstBuffer parts[2] = {{a.data(), a.size()}, {b.data(), b.size()}};
  IoResult sent = p.client.SendV(parts, 2);
  ASSERT_EQ(sent.kind, IoResult::kDone);
  EXPECT_EQ(sent.bytes, 11u);
  PollSet poll;
  poll.Add(p.server.handle(), PollSet::kRead);
  ASSERT_EQ(WaitCount(poll, 5000), 1);
  IoResult got = p.server.Recv(buf, sizeof(buf));
  ASSERT_EQ(got.kind, IoResult::kDone);
  EXPECT_EQ(std::string(buf, got.bytes), "hello world");
  p.client.Close();
  EXPECT_FALSE(p.client.valid());
  EXPECT_EQ(WaitCount(poll, 5000), 1);
  EXPECT_EQ(p.server.Recv(buf, sizeof(buf)).kind, IoResult::kClosed);
  // Writing to a connection the peer closed is an error, not SIGPIPE.
  IoResult w{};
  for (int i = 0; i < 100 && w.kind != IoResult::kError; ++i) {
    w = p.server.Send("x", 1);
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(w.kind, IoResult::kError);
  EXPECT_FALSE(w.ErrorText().empty());
}

TEST(SocketTest, AWakeupAndAShutdownEachEndAPollAtOnce) {
  Pair p = ConnectedPair();
  absl::StatusOr<std::unique_ptr<Wakeup>> wake = Wakeup::Create();
  ASSERT_TRUE(wake.ok()) << wake.status();
  PollSet poll;
  poll.Add((*wake)->handle(), PollSet::kRead);
  poll.Add(p.server.handle(), PollSet::kRead);
  EXPECT_EQ(WaitCount(poll, 0), 0);
  std::thread signaller([&] {
    absl::SleepFor(absl::Milliseconds(50));
    (*wake)->Signal();
  });
  absl::Time start = absl::Now();
  EXPECT_EQ(WaitCount(poll, 20000), 1);
  signaller.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_TRUE(poll.Ready(0));
  EXPECT_FALSE(poll.Ready(1));

  PollSet on_socket;
  on_socket.Add(p.server.handle(), PollSet::kRead);
  std::thread closer([&] {
    absl::SleepFor(absl::Milliseconds(50));
    p.server.Shutdown();
  });
  start = absl::Now();
  EXPECT_EQ(WaitCount(on_socket, 20000), 1);
  closer.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  char c;
  EXPECT_EQ(p.server.Recv(&c, 1).kind, IoResult::kClosed);
}

TEST(SocketTest, BadAddressesAndRefusedConnectionsAreNamed) {
  int port = 0;
  absl::StatusOr<Socket> bad = ListenTcp("not-an-ip", 4, &port, "monitor");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(bad.status().message(),
              HasSubstr("monitor: cannot use address 'not-an-ip'"));
  {
    absl::StatusOr<Socket> l = ListenTcp("127.0.0.1", 1, &port, "t");
    ASSERT_TRUE(l.ok());
  }  // Closed: nothing listens on `port` now.
  absl::StatusOr<Socket> refused =
      ConnectTcp("127.0.0.1", port, absl::Now() + absl::Seconds(5), "monitor");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(refused.status().message(),
              HasSubstr(absl::StrCat("monitor: connect to 127.0.0.1:", port)));
}

// ---- Files ----

TEST(FileTest, AMappedFileIsSeenByReadersAtOnce) {
  const std::string path = testing::MakeTempDir("mapped") + "/f";
  auto file = MappedFile::Create(path, "hello\n", "the test file");
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ((*file)->size(), 6u);
  (*file)->data()[0] = 'j';
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "jello");
  auto none = MappedFile::Create("/nonexistent-dir/f", "x", "the test file");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(none.status().message(),
              HasSubstr("cannot create the test file /nonexistent-dir/f"));
}

TEST(FileTest, ALockedFileRoundTripsAndNamesWhoHoldsIt) {
  const std::string path = testing::MakeTempDir("locked") + "/store";
  auto a = LockedFile::Open(path, "the store file");
  auto b = LockedFile::Open(path, "the store file");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE((*b)->LockHolders().empty());
  ASSERT_TRUE((*a)->Lock(LockedFile::Mode::kExclusive).ok());
  ASSERT_TRUE((*a)->WriteAll("first, longer text").ok());
  ASSERT_TRUE((*a)->WriteAll("second").ok());  // Replaces, never appends.
  EXPECT_THAT((*b)->LockHolders(),
              Contains(StartsWith(absl::StrCat("pid ", CurrentProcessId()))));
  (*a)->Unlock();
  EXPECT_TRUE((*b)->LockHolders().empty());
  ASSERT_TRUE((*b)->Lock(LockedFile::Mode::kShared).ok());
  absl::StatusOr<std::string> text = (*b)->ReadAll();
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "second");
  (*b)->Unlock();
  (*a)->Remove();
  EXPECT_FALSE(std::ifstream(path).good());
  auto none = LockedFile::Open("/nonexistent-dir/s", "the store file");
  EXPECT_THAT(none.status().message(),
              HasSubstr("cannot open the store file /nonexistent-dir/s"));
}

// ---- Host and processes ----

TEST(HostTest, AProcessIsKnownByItsIdAndStartToken) {
  const int64_t self = CurrentProcessId();
  const std::string token = ProcessStartToken(self);
  EXPECT_FALSE(token.empty());
  EXPECT_TRUE(ProcessRuns(self, token));
  EXPECT_FALSE(ProcessRuns(self, token + "0"));  // The id, reused.
  testing::Subprocess gone({"/bin/true"});
  const int64_t pid = gone.pid();
  ASSERT_EQ(gone.WaitOrKill(absl::Seconds(30)), 0);
  EXPECT_EQ(ProcessStartToken(pid), "");
  EXPECT_FALSE(ProcessRuns(pid, token));
}

TEST(HostTest, LoopbackIsListedAndANumericAddressResolves) {
  auto interfaces = ListNetworkInterfaces();
  ASSERT_TRUE(interfaces.ok()) << interfaces.status();
  bool lo = false;
  for (const NetworkInterface& i : *interfaces) {
    if (i.loopback && i.ip == "127.0.0.1") lo = true;
  }
  EXPECT_TRUE(lo);
  // Numeric, so no DNS is asked (the test machine has none).
  absl::StatusOr<std::string> local = ResolveHost("127.0.0.1");
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ(*local, "127.0.0.1");
}

}  // namespace
}  // namespace muster::comm::internal
