// The agent's Session client over musterd replicas: joins the
// leader among "H1:P1,H2:P2" and gives up a leader that goes silent. One
// musterd (a single HOST:PORT) gets the plain session of client.cc unchanged.
//
// Start makes passes over the replicas until connect_timeout: the one that
// led last first, the list's order next, a replica given up for silence
// last. Each replica gets up to kReplicaAnswer to accept the channel and
// answer the Join (any message, or a lease renewal); a standby refuses at
// once with UNAVAILABLE naming the leader (muster-leader), which is tried
// next; a refused port fails at once (ChannelWait::kFailFast). Between passes
// it waits 50 ms, doubling up to kPassBackoff.
//
// Silence: a SIGSTOPped (or cut-off) leader keeps its TCP connections open,
// and the stream's keepalive notices that only after ~20 s. While the lease
// is being renewed (the server counts this node in a round), renewals come
// every lease/4; no word for LeaderSilenceBound ends the session with
// UNAVAILABLE, so the agent reconnects, claiming its round, to the replica
// that leads now. Not while the agent waits for a round: musterd then renews
// nothing by design (lease_from_round_ready), and the keepalive is the bound.
#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "muster/common/logging.h"
#include "muster/common/net.h"
#include "muster/platform/net.h"
#include "muster/rendezvous/client.h"
#include "rendezvous/src/client/session_client.h"

namespace muster::rendezvous {

void ReplicaMemory::SetLeader(const std::string& endpoint) {
  absl::MutexLock lock(&mu_);
  leader_ = endpoint;
}
std::string ReplicaMemory::leader() const {
  absl::MutexLock lock(&mu_);
  return leader_;
}
void ReplicaMemory::Avoid(const std::string& endpoint, absl::Time until) {
  absl::MutexLock lock(&mu_);
  avoided_ = endpoint;
  avoid_until_ = until;
  if (leader_ == endpoint) leader_.clear();
}
bool ReplicaMemory::Avoided(const std::string& endpoint, absl::Time now) const {
  absl::MutexLock lock(&mu_);
  return endpoint == avoided_ && now < avoid_until_;
}

bool ReplicaMemory::AcceptEpoch(int64_t epoch) {
  absl::MutexLock lock(&mu_);
  if (epoch < newest_epoch_) return false;
  newest_epoch_ = epoch;
  return true;
}
int64_t ReplicaMemory::newest_epoch() const {
  absl::MutexLock lock(&mu_);
  return newest_epoch_;
}

absl::Duration LeaderSilenceBound(absl::Duration lease,
                                  absl::Duration heartbeat) {
  return std::max(lease * 45 / 100, lease / 4 + heartbeat + lease / 20);
}

namespace {

constexpr int kDefaultRendezvousPort = 29400;
// How long one replica of several gets, in a pass, to connect and answer the
// Join. A standby answers at once and a stopped port is refused at once; this
// bounds a frozen replica (its kernel still accepts the connection).
constexpr absl::Duration kReplicaAnswer = absl::Seconds(1);
// The longest wait between passes. A pass over standbys costs a few
// milliseconds and each refusal is a cheap call, so an agent looks four times
// a second: it joins a new leader within about 250 ms of its election, a
// small part of the 1.5 s the replicated lease leaves (defaults.h), at the
// cost of about 4 refused calls a second per standby per agent during an
// election (2.5 s at most).
constexpr absl::Duration kPassBackoff = absl::Milliseconds(250);

bool IsLoopback(const std::string& address) {
  return absl::StartsWith(address, "127.") || address == "::1";
}

// The replicas to try: the list, with a name that resolves to several
// addresses (a Kubernetes headless Service) expanded into one replica each.
// Not under TLS, where the certificate names the host, and not for loopback
// names (localhost's 127.0.0.1 and ::1 are one musterd).
std::vector<std::string> Expand(const std::vector<HostPort>& list, bool tls) {
  std::vector<std::string> out;
  auto add = [&out](const std::string& e) {
    if (std::find(out.begin(), out.end(), e) == out.end()) out.push_back(e);
  };
  for (const HostPort& hp : list) {
    HostPort target = hp;
    if (target.host.empty()) target.host = "127.0.0.1";
    if (!tls) {
      platform::Resolution r =
          platform::SystemNet().Resolve(target.host, absl::Seconds(2));
      if (r.ok && r.addresses.size() > 1 &&
          !std::all_of(r.addresses.begin(), r.addresses.end(), IsLoopback)) {
        for (const std::string& a : r.addresses) {
          if (!IsLoopback(a)) add(HostPort{a, target.port}.ToString());
        }
        continue;
      }
    }
    add(target.ToString());
  }
  return out;
}

class FollowingClient final : public RendezvousClient {
 public:
  explicit FollowingClient(GrpcClientOptions options)
      : options_(std::move(options)),
        memory_(options_.replicas != nullptr
                    ? options_.replicas
                    : std::make_shared<ReplicaMemory>()),
        silence_(
            LeaderSilenceBound(options_.lease, options_.heartbeat_interval)) {}

  ~FollowingClient() override { Close(""); }

  absl::Status Start(const v1::Join& join) override {
    absl::StatusOr<std::vector<HostPort>> list =
        ParseHostPortList(options_.endpoint, kDefaultRendezvousPort);
    if (!list.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad rendezvous endpoint: ", list.status().message()));
    }
    replicas_ = Expand(*list, options_.security.tls());
    // Pointed at one replica, a standby, the agent still reaches the leader
    // it named, and follows it from then on as among several.
    if (const std::string leader = memory_->leader();
        !leader.empty() && std::find(replicas_.begin(), replicas_.end(),
                                     leader) == replicas_.end()) {
      replicas_.insert(replicas_.begin(), leader);
    }
    if (replicas_.size() == 1) {
      // One musterd: the plain session, patient through refusals (an agent
      // may start before its musterd).
      GrpcClientOptions one = options_;
      one.endpoint = replicas_[0];
      std::unique_ptr<SessionClient> inner =
          NewSessionClient(std::move(one), store::ChannelWait::kPatient);
      absl::Status s = inner->Start(join);
      absl::MutexLock lock(&mu_);
      inner_ = std::move(inner);
      return s;
    }
    const absl::Time deadline = absl::Now() + options_.connect_timeout;
    // Why each replica failed last, in the order first tried.
    std::vector<std::pair<std::string, std::string>> why;
    absl::Duration backoff = absl::Milliseconds(50);
    while (true) {
      if (Pass(join, deadline, &why)) return absl::OkStatus();
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) break;
      absl::SleepFor(std::min(backoff, left));
      backoff = std::min(backoff * 2, kPassBackoff);
    }
    std::vector<std::string> parts;
    for (const auto& [replica, reason] : why)
      parts.push_back(absl::StrCat(replica, ": ", reason));
    return absl::UnavailableError(absl::StrCat(
        "no rendezvous replica of ", absl::StrJoin(replicas_, ","),
        " accepted this agent within ",
        absl::FormatDuration(options_.connect_timeout), " (",
        absl::StrJoin(parts, "; "),
        "); check that one musterd of the cluster leads (muster status "
        "--rdzv-endpoint=",
        options_.endpoint, ")"));
  }

  absl::Status Send(const v1::AgentMessage& msg) override {
    SessionClient* inner = Inner();
    if (inner == nullptr) {
      return absl::FailedPreconditionError(
          "RendezvousClient::Send before Start succeeded");
    }
    return inner->Send(msg);
  }

  absl::StatusOr<v1::ServerMessage> Next(absl::Duration timeout) override {
    SessionClient* inner = nullptr;
    std::optional<absl::StatusOr<v1::ServerMessage>> first;
    {
      absl::MutexLock lock(&mu_);
      first.swap(first_);
      inner = inner_.get();
    }
    if (first.has_value()) {
      if (absl::Status stale = CheckEpoch(*first); !stale.ok()) return stale;
      Observe(*first);
      return *std::move(first);
    }
    if (inner == nullptr) {
      return absl::FailedPreconditionError(
          "RendezvousClient::Next before Start succeeded");
    }
    const bool watch = replicas_.size() > 1;
    if (watch && armed_.load()) {
      const absl::Duration until_silent = SilentAt() - absl::Now();
      if (until_silent <= absl::ZeroDuration()) return GiveUpSilent(inner);
      timeout = std::min(timeout, until_silent);
    }
    absl::StatusOr<v1::ServerMessage> next = inner->Next(timeout);
    if (next.status().code() == absl::StatusCode::kDeadlineExceeded && watch &&
        armed_.load() && absl::Now() >= SilentAt()) {
      return GiveUpSilent(inner);
    }
    if (absl::Status stale = CheckEpoch(next); !stale.ok()) return stale;
    Observe(next);
    if (!next.ok() && next.status().code() == absl::StatusCode::kUnavailable &&
        !inner->leader().empty()) {
      // The leader stepped down and named its successor: go there first.
      memory_->SetLeader(inner->leader());
    }
    return next;
  }

  void SetRound(int64_t round) override {
    if (SessionClient* inner = Inner()) inner->SetRound(round);
  }
  void HeartbeatNow() override {
    if (SessionClient* inner = Inner()) inner->HeartbeatNow();
  }
  void CloseWith(const v1::Leave& leave) override {
    if (SessionClient* inner = Inner()) inner->CloseWith(leave);
  }

 private:
  SessionClient* Inner() const {
    absl::MutexLock lock(&mu_);
    return inner_.get();
  }

  absl::Time SilentAt() const {
    return absl::FromUnixMicros(last_heard_us_.load()) + silence_;
  }

  void Heard() { last_heard_us_.store(absl::ToUnixMicros(absl::Now())); }

  // Fencing: OK, or UNAVAILABLE for a message of an epoch older than the
  // newest this agent saw: a deposed leader's message, written before it
  // knew (perhaps sitting in a socket buffer while its process was paused).
  // Acting on it could undo what the newer leader decided; this session is
  // with the past, and the agent rejoins the current leader.
  absl::Status CheckEpoch(const absl::StatusOr<v1::ServerMessage>& msg) {
    if (!msg.ok() || memory_->AcceptEpoch(msg->epoch()))
      return absl::OkStatus();
    const int64_t newest = memory_->newest_epoch();
    MUSTER_LOG(WARNING) << "ignoring a message from musterd " << current_
                        << " of leadership epoch " << msg->epoch()
                        << ": a newer leader (epoch " << newest
                        << ") took over; rejoining the current leader";
    memory_->Avoid(current_, absl::Now() + silence_);
    if (SessionClient* inner = Inner()) inner->Abandon();
    armed_.store(false);
    return absl::UnavailableError(absl::StrCat(
        "musterd ", current_, " sent a message of leadership epoch ",
        msg->epoch(), ", older than epoch ", newest,
        " of a leader seen since: it was deposed"));
  }

  // What a message says about renewals: RoundReady and LeaseRenewed (seen by
  // the lease hook) start them; Restart, Waiting and the verdicts end them.
  void Observe(const absl::StatusOr<v1::ServerMessage>& msg) {
    if (!msg.ok()) return;
    Heard();
    switch (msg->kind_case()) {
      case v1::ServerMessage::kRestart:
      case v1::ServerMessage::kWaiting:
      case v1::ServerMessage::kJobSucceeded:
      case v1::ServerMessage::kJobFailed:
        armed_.store(false);
        break;
      case v1::ServerMessage::kRoundReady:
        // Its lease_seq renews the lease (Join.lease_from_round_ready): from
        // here the leader owes renewals, so its silence counts. Left unarmed,
        // a leader frozen before its first renewal went unnoticed until the
        // lease fence (7 s of a 10 s lease) instead of the silence bound.
        if (msg->round_ready().lease_seq() != 0) armed_.store(true);
        break;
      default:
        break;
    }
  }

  absl::Status GiveUpSilent(SessionClient* inner) {
    const std::string where = current_;
    memory_->Avoid(where, absl::Now() + options_.lease);
    inner->Abandon();
    armed_.store(false);
    return absl::UnavailableError(absl::StrCat(
        "lost the rendezvous server at ", where, ": no answer for ",
        absl::FormatDuration(silence_),
        " while it renewed this node's lease (a frozen or cut-off leader); "
        "trying the other replicas"));
  }

  // The order of one pass: the last leader, the list, the avoided replica.
  std::vector<std::string> Order() const {
    const absl::Time now = absl::Now();
    std::vector<std::string> order;
    const std::string leader = memory_->leader();
    if (!leader.empty() && !memory_->Avoided(leader, now))
      order.push_back(leader);
    std::vector<std::string> avoided;
    for (const std::string& r : replicas_) {
      if (r == leader) continue;
      (memory_->Avoided(r, now) ? avoided : order).push_back(r);
    }
    order.insert(order.end(), avoided.begin(), avoided.end());
    return order;
  }

  // One try of every replica; true when one accepted the Join (inner_ is
  // then its session).
  bool Pass(const v1::Join& join, absl::Time deadline,
            std::vector<std::pair<std::string, std::string>>* why) {
    std::vector<std::string> queue = Order();
    std::vector<std::string> tried;
    auto note = [why](const std::string& replica, absl::string_view reason) {
      for (auto& entry : *why) {
        if (entry.first == replica) {
          entry.second = std::string(reason);
          return;
        }
      }
      why->emplace_back(replica, std::string(reason));
    };
    while (!queue.empty()) {
      const std::string replica = queue.front();
      queue.erase(queue.begin());
      if (std::find(tried.begin(), tried.end(), replica) != tried.end())
        continue;
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) return false;
      tried.push_back(replica);
      std::string leader;
      absl::Status s =
          TryReplica(replica, join, std::min(kReplicaAnswer, left), &leader);
      if (s.ok()) return true;
      note(replica, s.message());
      MUSTER_LOG(DEBUG) << "replica " << replica << ": " << s.message();
      if (!leader.empty() && leader != replica) {
        // A standby named the leader: it is next (unless it was just given up
        // for silence, which the pass reaches last anyway).
        memory_->SetLeader(leader);
        if (!memory_->Avoided(leader, absl::Now()))
          queue.insert(queue.begin(), leader);
      }
    }
    return false;
  }

  // Opens a session at `replica` and waits up to `budget` for its first
  // answer. OK: it accepted (inner_ is set; a message it sent waits in
  // first_). Else why not, with the leader a standby named in `leader`.
  absl::Status TryReplica(const std::string& replica, const v1::Join& join,
                          absl::Duration budget, std::string* leader) {
    const absl::Time until = absl::Now() + budget;
    answered_.store(false);
    armed_.store(false);
    GrpcClientOptions one = options_;
    one.endpoint = replica;
    one.connect_timeout = budget;
    // A renewal answers the Join too (a claim of running workers is renewed
    // at once), and keeps the silence watch going.
    one.on_lease_renewed = [this,
                            hook = options_.on_lease_renewed](int64_t seq) {
      Heard();
      answered_.store(true);
      armed_.store(true);
      if (hook) hook(seq);
    };
    std::unique_ptr<SessionClient> inner =
        NewSessionClient(std::move(one), store::ChannelWait::kFailFast);
    absl::Status started = inner->Start(join);
    if (!started.ok()) {
      *leader = inner->leader();
      inner->Abandon();
      return started;
    }
    std::optional<absl::StatusOr<v1::ServerMessage>> first;
    while (!answered_.load()) {
      const absl::Duration left = until - absl::Now();
      if (left <= absl::ZeroDuration()) break;
      absl::StatusOr<v1::ServerMessage> next =
          inner->Next(std::min(left, absl::Milliseconds(10)));
      if (next.status().code() == absl::StatusCode::kDeadlineExceeded) continue;
      if (!next.ok() &&
          next.status().code() == absl::StatusCode::kUnavailable) {
        // A standby (or a leader shutting down, or refusing a rerun for a
        // moment): the next replica.
        *leader = inner->leader();
        inner->Abandon();
        return next.status();
      }
      // A message, or a refusal no other replica would mend (a bad Join, a
      // wrong token): this replica leads; Next reports it.
      first = std::move(next);
      break;
    }
    if (!first.has_value() && !answered_.load()) {
      inner->Abandon();
      return absl::DeadlineExceededError(absl::StrCat(
          "accepted the connection but did not answer the Join within ",
          absl::FormatDuration(budget), " (frozen?)"));
    }
    if (first.has_value() && first->ok() && first->value().has_round_ready() &&
        first->value().round_ready().lease_seq() != 0) {
      armed_.store(true);
    }
    Heard();
    memory_->SetLeader(replica);
    current_ = replica;
    MUSTER_LOG(INFO) << "joined at replica " << replica << " of "
                     << absl::StrJoin(replicas_, ",");
    absl::MutexLock lock(&mu_);
    inner_ = std::move(inner);
    first_ = std::move(first);
    return absl::OkStatus();
  }

  const GrpcClientOptions options_;
  const std::shared_ptr<ReplicaMemory> memory_;
  const absl::Duration silence_;
  // Set by Start before any other call; constant afterwards.
  std::vector<std::string> replicas_;
  std::string current_;
  // Whether the server renews this node's lease now (silence is watched), when
  // it was last heard from, and whether the replica being tried answered.
  std::atomic<bool> armed_{false};
  std::atomic<int64_t> last_heard_us_{0};
  std::atomic<bool> answered_{false};

  mutable absl::Mutex mu_;
  std::unique_ptr<SessionClient> inner_ ABSL_GUARDED_BY(mu_);
  // The accepting replica's first message (or refusal), for Next.
  std::optional<absl::StatusOr<v1::ServerMessage>> first_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

int CountReplicas(const std::string& endpoint, bool tls) {
  absl::StatusOr<std::vector<HostPort>> list =
      ParseHostPortList(endpoint, kDefaultRendezvousPort);
  if (!list.ok()) return 0;
  return static_cast<int>(Expand(*list, tls).size());
}

std::unique_ptr<RendezvousClient> NewGrpcRendezvousClient(
    GrpcClientOptions options) {
  return std::make_unique<FollowingClient>(std::move(options));
}

}  // namespace muster::rendezvous
