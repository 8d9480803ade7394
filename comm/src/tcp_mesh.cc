#include "comm/src/tcp_mesh.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "comm/src/os.h"
#include "muster/common/net.h"
#include "muster/common/status.h"

namespace muster::comm::internal {
namespace {

constexpr uint32_t kHelloMagic = 0x4d535452;  // "MSTR"

struct Hello {
  uint32_t magic;
  int32_t rank;
  uint64_t token;
};

uint64_t RandomToken() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

// "rank 2 (pid 4242 on host-a)" from a published address's fields.
std::string Describe(int r, const std::vector<std::string>& fields) {
  return fields.size() >= 5 ? absl::StrCat("rank ", r, " (pid ", fields[3],
                                           " on ", fields[4], ")")
                            : absl::StrCat("rank ", r);
}

// How often a rank waiting for its lower peers checks that their round goes
// on.
constexpr absl::Duration kRoundEndedCheckPeriod = absl::Milliseconds(100);

// OK while `own_key` (this rank's published address) is in the store.
absl::Status RoundEnded(store::Store& store, const std::string& own_key) {
  absl::StatusOr<std::string> mine = store.Get(own_key, absl::ZeroDuration());
  if (mine.ok()) return absl::OkStatus();
  if (absl::IsNotFound(mine.status())) {
    return absl::AbortedError(
        "the round ended while the peers connected (this rank's address "
        "is gone from the store: the launcher dropped the round's "
        "namespace; a peer was lost)");
  }
  return mine.status();
}

}  // namespace

bool TransferAll(const Socket& socket, void* buf, size_t n, bool write,
                 absl::Time deadline) {
  char* p = static_cast<char*>(buf);
  PollSet poll;
  while (n > 0) {
    const IoResult r = write ? socket.Send(p, n) : socket.Recv(p, n);
    if (r.kind == IoResult::kDone) {
      p += r.bytes;
      n -= r.bytes;
      continue;
    }
    if (r.kind != IoResult::kWouldBlock) return false;  // EOF or error.
    const int ms = PollMs(deadline);
    if (ms == 0) return false;
    poll.Clear();
    poll.Add(socket.handle(), write ? PollSet::kWrite : PollSet::kRead);
    if (!poll.Wait(ms).ok()) return false;
  }
  return true;
}

absl::StatusOr<std::vector<TcpMeshPeer>> ConnectTcpMesh(
    const TcpMeshOptions& options) {
  const int rank = options.rank;
  const int n = options.world_size;
  const std::string& what = options.what;
  const std::string& who = options.who;
  const uint64_t token = RandomToken();
  // The peers connected so far; a failed set-up closes them on return.
  std::vector<TcpMeshPeer> peers(n);

  // Listen on an ephemeral port of the backend's address (closed when the
  // set-up ends either way).
  int port = 0;
  MUSTER_ASSIGN_OR_RETURN(
      Socket listener,
      ListenTcp(options.bind_ip, std::max(n, 16), &port, what));

  // "ip port token pid host": everything a peer needs, and what names us in
  // its messages.
  MUSTER_RETURN_IF_ERROR(
      Annotate(options.store->Set(
                   absl::StrCat(options.key_root, rank),
                   absl::StrCat(options.bind_ip, " ", port, " ", token, " ",
                                CurrentProcessId(), " ", LocalHostname())),
               absl::StrCat(who, ": publishing the ", what, "'s address")));

  for (int r = rank + 1; r < n; ++r) {
    absl::StatusOr<std::string> value = options.store->Get(
        absl::StrCat(options.key_root, r),
        std::max(options.deadline - absl::Now(), absl::Milliseconds(1)));
    if (!value.ok()) {
      return Annotate(value.status(),
                      absl::StrCat(who, ": ", what, ": address of rank ", r));
    }
    std::vector<std::string> f = absl::StrSplit(*value, ' ');
    int peer_port = 0;
    uint64_t peer_token = 0;
    if (f.size() < 3 || !absl::SimpleAtoi(f[1], &peer_port) ||
        !absl::SimpleAtoi(f[2], &peer_token)) {
      return absl::InternalError(absl::StrCat(who, ": ", what,
                                              ": malformed address of rank ", r,
                                              ": '", *value, "'"));
    }
    MUSTER_ASSIGN_OR_RETURN(
        Socket socket, ConnectTcp(f[0], peer_port, options.deadline, what));
    peers[r] = TcpMeshPeer{std::move(socket), Describe(r, f)};
    Hello hello{kHelloMagic, rank, peer_token};
    if (!TransferAll(peers[r].socket, &hello, sizeof(hello), /*write=*/true,
                     options.deadline)) {
      return absl::UnavailableError(absl::StrCat(
          who, ": ", what, ": sending hello to rank ", r, " failed"));
    }
  }

  int missing = rank;
  PollSet poll;
  const std::string own_key = absl::StrCat(options.key_root, rank);
  while (missing > 0) {
    const int ms = std::min(
        PollMs(options.deadline),
        static_cast<int>(absl::ToInt64Milliseconds(kRoundEndedCheckPeriod)));
    if (ms == 0) break;
    poll.Clear();
    poll.Add(listener.handle(), PollSet::kRead);
    absl::StatusOr<int> ready = poll.Wait(ms);
    if (!ready.ok() || *ready <= 0) {
      // A lower rank that died before connecting never will: the round it
      // belonged to has ended, and the launcher dropped its Store namespace
      // (this rank's own address with it). Found here within the period,
      // instead of at the deadline (a Recover's: minutes).
      if (absl::Status ended = RoundEnded(*options.store, own_key);
          !ended.ok()) {
        return Annotate(ended, absl::StrCat(who, ": ", what, ": waiting for ",
                                            missing, " lower rank(s)"));
      }
      continue;
    }
    Socket socket = Accept(listener);
    if (!socket.valid()) continue;
    Hello hello{};
    const absl::Time hello_deadline =
        std::min(options.deadline, absl::Now() + absl::Seconds(10));
    if (!TransferAll(socket, &hello, sizeof(hello), /*write=*/false,
                     hello_deadline) ||
        hello.magic != kHelloMagic || hello.token != token || hello.rank < 0 ||
        hello.rank >= rank || peers[hello.rank].socket.valid()) {
      continue;  // Not one of ours: closed here.
    }
    absl::StatusOr<std::string> value = options.store->Get(
        absl::StrCat(options.key_root, hello.rank), absl::ZeroDuration());
    std::vector<std::string> f;
    if (value.ok()) f = absl::StrSplit(*value, ' ');
    peers[hello.rank] = TcpMeshPeer{std::move(socket), Describe(hello.rank, f)};
    --missing;
  }
  if (missing > 0) {
    std::vector<int> absent;
    for (int r = 0; r < rank; ++r) {
      if (!peers[r].socket.valid()) absent.push_back(r);
    }
    return absl::DeadlineExceededError(
        absl::StrCat(who, ": ", what, ": ranks ", absl::StrJoin(absent, ", "),
                     " did not connect in time"));
  }
  for (TcpMeshPeer& p : peers) {
    if (p.socket.valid()) p.socket.SetNoDelay();
  }
  return peers;
}

}  // namespace muster::comm::internal
