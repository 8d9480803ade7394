#include "comm/src/peer_monitor.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "comm/src/tcp_mesh.h"
#include "muster/common/logging.h"
#include "muster/common/status.h"

namespace muster::comm::internal {
namespace {

constexpr char kGoodbye = 'B';
constexpr char kAbort = 'A';
// The longest abort text sent or accepted.
constexpr uint32_t kMaxText = 16 * 1024;
// How often the socket thread looks at the operation's deadline.
constexpr absl::Duration kDeadlineTick = absl::Milliseconds(100);
// A store wait is re-armed this often, which bounds how long Stop can block on
// a store that does not answer.
constexpr absl::Duration kStoreChunk = absl::Seconds(10);
// TCP keepalive on the idle connections: a machine that vanished (no EOF
// ever comes) is named after about 10 s + 3 x 5 s.
constexpr absl::Duration kKeepaliveIdle = absl::Seconds(10);
constexpr absl::Duration kKeepaliveInterval = absl::Seconds(5);
constexpr int kKeepaliveProbes = 3;

}  // namespace

PeerMonitor::PeerMonitor(PeerMonitorOptions options)
    : options_(std::move(options)),
      who_(absl::StrCat("rank ", options_.rank, "/", options_.world_size)),
      goodbye_(options_.world_size, false) {}

absl::StatusOr<std::unique_ptr<PeerMonitor>> PeerMonitor::Start(
    PeerMonitorOptions options) {
  std::unique_ptr<PeerMonitor> monitor(new PeerMonitor(std::move(options)));
  absl::Status connected = monitor->Connect();
  if (!connected.ok()) {
    // Nothing runs yet: close what is open.
    for (Peer& p : monitor->peers_) p.socket.Close();
    {
      absl::MutexLock lock(&monitor->mu_);
      monitor->stopped_ = true;
    }
    return connected;
  }
  absl::StatusOr<std::unique_ptr<Wakeup>> wake = Wakeup::Create();
  if (!wake.ok()) {
    return absl::UnavailableError(
        absl::StrCat("peer monitor: ", wake.status().message()));
  }
  monitor->wake_ = std::move(*wake);
  PeerMonitor* m = monitor.get();
  m->socket_thread_ = std::thread([m] { m->SocketLoop(); });
  m->store_thread_ = std::thread([m] { m->StoreLoop(); });
  return monitor;
}

absl::Status PeerMonitor::Connect() {
  peers_.resize(options_.world_size);
  TcpMeshOptions mesh;
  mesh.rank = options_.rank;
  mesh.world_size = options_.world_size;
  mesh.bind_ip = options_.bind_ip;
  mesh.store = options_.store;
  mesh.key_root = options_.key_prefix + "monitor/";
  mesh.deadline = options_.deadline;
  mesh.who = who_;
  mesh.what = "peer monitor";
  MUSTER_ASSIGN_OR_RETURN(std::vector<TcpMeshPeer> connected,
                          ConnectTcpMesh(mesh));
  for (int r = 0; r < options_.world_size; ++r) {
    peers_[r] = Peer{r, std::move(connected[r].socket),
                     std::move(connected[r].name), "", false};
    if (peers_[r].socket.valid()) {
      peers_[r].socket.SetKeepalive(kKeepaliveIdle, kKeepaliveInterval,
                                    kKeepaliveProbes);
    }
  }
  return absl::OkStatus();
}

PeerMonitor::~PeerMonitor() { Stop(); }

void PeerMonitor::SetDeadline(absl::Time deadline) {
  deadline_ns_.store(deadline == absl::InfiniteFuture()
                         ? 0
                         : std::max<int64_t>(1, absl::ToUnixNanos(deadline)),
                     std::memory_order_relaxed);
}

bool PeerMonitor::PeerShutDown(int peer) const {
  absl::MutexLock lock(&mu_);
  return peer >= 0 && peer < static_cast<int>(goodbye_.size()) &&
         goodbye_[peer];
}

void PeerMonitor::TellPeers(const absl::Status& why) {
  std::string text = why.ToString();
  if (text.size() > kMaxText) text.resize(kMaxText);
  std::string message(1, kAbort);
  const uint32_t size = static_cast<uint32_t>(text.size());
  message.append(reinterpret_cast<const char*>(&size), sizeof(size));
  message += text;
  absl::MutexLock lock(&send_mu_);
  for (Peer& p : peers_) {
    if (!p.socket.valid()) continue;
    // The connections are idle: the message fits in the socket buffer. A
    // peer that is too far behind to take it learns otherwise.
    (void)p.socket.Send(message.data(), message.size());
  }
}

void PeerMonitor::Verdict(const absl::Status& status) {
  if (stopping_.load() || verdict_given_.exchange(true)) return;
  MUSTER_LOG(DEBUG) << who_ << ": peer monitor: " << status;
  if (options_.on_abort) options_.on_abort(status);
}

bool PeerMonitor::Drain(Peer& p) {
  char buf[4096];
  while (true) {
    const IoResult r = p.socket.Recv(buf, sizeof(buf));
    if (r.kind == IoResult::kDone) {
      p.inbox.append(buf, r.bytes);
      continue;
    }
    if (r.kind == IoResult::kWouldBlock) break;
    // EOF or error: the connection ended. Handle what came before it.
    while (!p.inbox.empty()) {
      if (p.inbox[0] == kGoodbye) {
        p.said_goodbye = true;
        p.inbox.erase(0, 1);
        continue;
      }
      break;  // An abort message is handled below, complete or not.
    }
    if (!p.inbox.empty() && p.inbox[0] == kAbort && p.inbox.size() > 5) {
      uint32_t size = 0;
      std::memcpy(&size, p.inbox.data() + 1, sizeof(size));
      const std::string text = p.inbox.substr(5, size);
      Verdict(absl::AbortedError(
          absl::StrCat("aborted because peer ", p.name, " failed: ", text)));
    }
    if (p.said_goodbye) {
      absl::MutexLock lock(&mu_);
      goodbye_[p.rank] = true;
    } else if (r.TimedOut()) {
      Verdict(absl::AbortedError(absl::StrCat(
          "peer ", p.name,
          " stopped answering (TCP keepalive timed out): its machine may be "
          "down or unreachable")));
    } else {
      Verdict(absl::AbortedError(absl::StrCat(
          "peer ", p.name,
          " was lost: its connection closed without a goodbye (the process "
          "exited or was killed)",
          r.kind == IoResult::kError ? absl::StrCat(": ", r.ErrorText())
                                     : "")));
    }
    return false;
  }
  // Complete messages.
  while (!p.inbox.empty()) {
    if (p.inbox[0] == kGoodbye) {
      p.said_goodbye = true;
      p.inbox.erase(0, 1);
      absl::MutexLock lock(&mu_);
      goodbye_[p.rank] = true;
      continue;
    }
    if (p.inbox[0] == kAbort) {
      if (p.inbox.size() < 5) break;
      uint32_t size = 0;
      std::memcpy(&size, p.inbox.data() + 1, sizeof(size));
      if (size > kMaxText) size = kMaxText;
      if (p.inbox.size() < 5 + size) break;
      const std::string text = p.inbox.substr(5, size);
      p.inbox.erase(0, 5 + size);
      Verdict(absl::AbortedError(
          absl::StrCat("aborted because peer ", p.name, " failed: ", text)));
      continue;
    }
    // Garbage: not a peer of ours any more.
    p.inbox.clear();
    break;
  }
  return true;
}

void PeerMonitor::SocketLoop() {
  PollSet poll;
  std::vector<int> ranks;
  while (!stopping_.load()) {
    poll.Clear();
    ranks.clear();
    poll.Add(wake_->handle(), PollSet::kRead);
    ranks.push_back(-1);
    for (Peer& p : peers_) {
      if (!p.socket.valid()) continue;
      poll.Add(p.socket.handle(), PollSet::kRead);
      ranks.push_back(p.rank);
    }
    int timeout_ms = static_cast<int>(absl::ToInt64Milliseconds(kDeadlineTick));
    const int64_t deadline = deadline_ns_.load(std::memory_order_relaxed);
    if (deadline != 0) {
      timeout_ms =
          std::min(timeout_ms, PollMs(absl::FromUnixNanos(deadline)) + 1);
    }
    const absl::StatusOr<int> rv = poll.Wait(timeout_ms);
    if (stopping_.load()) break;
    if (rv.ok() && *rv > 0) {
      for (size_t i = 1; i < poll.size(); ++i) {
        if (!poll.Ready(i)) continue;
        Peer& p = peers_[ranks[i]];
        if (!Drain(p)) {
          absl::MutexLock lock(&send_mu_);
          p.socket.Close();
        }
      }
    }
    const int64_t now_deadline = deadline_ns_.load(std::memory_order_relaxed);
    if (now_deadline != 0 && absl::Now() > absl::FromUnixNanos(now_deadline)) {
      Verdict(
          absl::DeadlineExceededError("the operation ran past its timeout"));
      deadline_ns_.store(0);
    }
  }
}

std::string PeerMonitor::StopKey() const {
  return absl::StrCat(options_.key_prefix, "monitor_stop/", options_.rank);
}

void PeerMonitor::StoreLoop() {
  const std::string key = StopKey();
  while (!stopping_.load()) {
    absl::Status s = options_.store->Wait({key}, kStoreChunk);
    if (stopping_.load() || s.ok()) return;
    if (absl::IsDeadlineExceeded(s)) continue;
    if (absl::IsAborted(s)) {
      Verdict(absl::AbortedError(absl::StrCat(
          "the launcher ended this round (the round's store namespace was "
          "dropped: a worker failed, a node was lost, or the job ended): ",
          s.message())));
      return;
    }
    // The store is unreachable for now (musterd restarting, or the rank that
    // served it has exited): nothing to conclude; look again later.
    MUSTER_LOG(DEBUG) << who_ << ": peer monitor: store wait: " << s;
    store_stop_.WaitForNotificationWithTimeout(absl::Seconds(1));
  }
}

void PeerMonitor::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  {
    // Goodbye first: a peer that sees it knows the EOF that follows is not a
    // crash.
    absl::MutexLock lock(&send_mu_);
    for (Peer& p : peers_) {
      if (!p.socket.valid()) continue;
      const char bye = kGoodbye;
      (void)p.socket.Send(&bye, 1);
    }
  }
  stopping_.store(true);
  if (wake_ != nullptr) wake_->Signal();
  store_stop_.Notify();
  if (store_thread_.joinable()) {
    // Wakes the store thread's wait. If the store is gone, the wait ends by
    // itself within kStoreChunk, or at once with UNAVAILABLE.
    (void)options_.store->Set(StopKey(), "stop");
    store_thread_.join();
  }
  if (socket_thread_.joinable()) socket_thread_.join();
  absl::MutexLock lock(&send_mu_);
  for (Peer& p : peers_) p.socket.Close();
  wake_.reset();
}

void PeerMonitor::CrashForTesting() {
  stopping_.store(true);  // Our own thread must not report the peers' EOF.
  absl::MutexLock lock(&send_mu_);
  for (Peer& p : peers_) p.socket.Shutdown();
}

}  // namespace muster::comm::internal
