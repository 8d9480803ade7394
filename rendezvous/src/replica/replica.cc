#include "rendezvous/src/replica/replica.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "muster/common/logging.h"
#include "muster/common/net.h"
#include "muster/common/probe.h"
#include "nlohmann/json.hpp"

namespace muster::rendezvous {
namespace {

using SteadyClock = std::chrono::steady_clock;

// Added to leadership_validity before a new leader acts: the two replicas'
// clocks may run at slightly different rates, and the old leader's last
// check may be a moment late.
constexpr absl::Duration kTakeOverMargin = absl::Milliseconds(250);
constexpr absl::Duration kEtcdTimeout = absl::Seconds(2);
constexpr absl::Duration kMirrorInterval = absl::Milliseconds(100);
constexpr int64_t kLoadPage = 1000;

SteadyClock::time_point SteadyAfter(SteadyClock::time_point t,
                                    absl::Duration d) {
  return t + absl::ToChronoNanoseconds(d);
}

int64_t Ms(SteadyClock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

std::string BindingJson(const JobBinding& b) {
  switch (b.state) {
    case JobBinding::State::kUnbound:
      return "unbound";
    case JobBinding::State::kNoToken:
      return "none";
    case JobBinding::State::kToken:
      return absl::StrCat("sha256:",
                          absl::BytesToHexString(absl::string_view(
                              reinterpret_cast<const char*>(b.digest.data()),
                              b.digest.size())));
  }
  return "unbound";
}

JobBinding BindingFromJson(const std::string& text) {
  JobBinding b;
  if (text == "none") {
    b.state = JobBinding::State::kNoToken;
  } else if (absl::StartsWith(text, "sha256:")) {
    const std::string bytes = absl::HexStringToBytes(text.substr(7));
    if (bytes.size() == b.digest.size()) {
      b.state = JobBinding::State::kToken;
      std::copy(bytes.begin(), bytes.end(), b.digest.begin());
    }
  }
  return b;
}

}  // namespace

const char* Replica::StateName(State state) {
  switch (state) {
    case State::kStarting:
      return "starting";
    case State::kCampaigning:
      return "campaigning";
    case State::kStandby:
      return "standby";
    case State::kWaiting:
      return "waiting";
    case State::kLeading:
      return "leading";
    case State::kDeposed:
      return "deposed";
    case State::kStopped:
      return "stopped";
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<Replica>> Replica::Start(ReplicaOptions options,
                                                        Server server) {
  if (options.prefix.empty() || options.prefix[0] != '/' ||
      absl::EndsWith(options.prefix, "/")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--etcd-prefix='", options.prefix,
        "': write a key prefix that starts with '/' and does not end with "
        "it, e.g. /muster"));
  }
  absl::StatusOr<HostPort> advertise =
      ParseHostPort(options.advertise_addr, -1);
  if (!advertise.ok() || advertise->host.empty() || advertise->port == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--advertise-addr='", options.advertise_addr,
        "': write the HOST:PORT agents and the other replicas reach this "
        "musterd at (not 0.0.0.0, not port 0)"));
  }
  if (advertise->host == "0.0.0.0" || advertise->host == "::") {
    return absl::InvalidArgumentError(
        absl::StrCat("--advertise-addr='", options.advertise_addr,
                     "': 0.0.0.0 cannot be reached; give this host's "
                     "address or name"));
  }
  if (options.election_ttl < absl::Seconds(1) ||
      options.election_ttl > absl::Seconds(60)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--election-ttl=", absl::FormatDuration(options.election_ttl),
        ": must be 1s to 60s (etcd grants at least 2s with its defaults)"));
  }
  if (options.renewal_timeout <= absl::ZeroDuration() ||
      options.give_up_after < options.election_ttl) {
    return absl::InvalidArgumentError(absl::StrCat(
        "replica timing: the renewal timeout (",
        absl::FormatDuration(options.renewal_timeout),
        ") must be positive and the silence a leader gives up after (",
        absl::FormatDuration(options.give_up_after),
        ") at least the election TTL (",
        absl::FormatDuration(options.election_ttl), ")"));
  }
  if (options.keepalive_interval <= absl::ZeroDuration() ||
      options.leadership_validity < 2 * options.keepalive_interval ||
      options.leadership_validity >= options.election_ttl) {
    return absl::InvalidArgumentError(
        absl::StrCat("replica timing: leadership validity ",
                     absl::FormatDuration(options.leadership_validity),
                     " must be at least two renewal intervals (",
                     absl::FormatDuration(options.keepalive_interval),
                     ") and shorter than the election TTL (",
                     absl::FormatDuration(options.election_ttl), ")"));
  }
  absl::StatusOr<std::unique_ptr<EtcdClient>> etcd =
      EtcdClient::Create(options.etcd);
  if (!etcd.ok()) return etcd.status();
  std::unique_ptr<Replica> r(
      new Replica(std::move(options), std::move(server), *std::move(etcd)));
  // Nothing is served until this replica leads.
  r->server_.stand_by("");
  r->thread_ = std::thread([p = r.get()] { p->Run(); });
  return r;
}

Replica::Replica(ReplicaOptions options, Server server,
                 std::unique_ptr<EtcdClient> etcd)
    : options_(std::move(options)),
      server_(std::move(server)),
      etcd_(std::move(etcd)) {}

Replica::~Replica() { Stop(); }

void Replica::Stop() {
  int64_t lease = 0;
  bool leading = false;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      // Someone else stops (or stopped) it; wait for the thread below.
    }
    stopping_ = true;
    lease = lease_;
    leading = state_ == State::kLeading || state_ == State::kWaiting;
  }
  if (thread_.joinable()) thread_.join();
  if (committer_ != nullptr) committer_->Stop();
  if (leading && lease != 0) {
    // Resign: the next leader need not wait for the lease to expire.
    server_.stand_by("");
    if (absl::Status s = etcd_->LeaseRevoke(lease, absl::Seconds(1)); !s.ok())
      MUSTER_LOG(WARNING) << "replica: could not resign (" << s.message()
                          << "); the other replicas wait for the lease";
  }
  absl::MutexLock lock(&mu_);
  if (state_ != State::kDeposed) state_ = State::kStopped;
}

Replica::State Replica::state() const {
  absl::MutexLock lock(&mu_);
  return state_;
}

std::string Replica::leader() const {
  absl::MutexLock lock(&mu_);
  return leader_;
}

std::vector<EtcdMemberHealth> Replica::EtcdHealth() {
  // One caller asks etcd; the others wait for its answer.
  absl::MutexLock lock(&health_mu_);
  if (absl::Now() - health_at_ >= absl::Seconds(2)) {
    health_ = etcd_->MemberHealth(absl::Milliseconds(500));
    health_at_ = absl::Now();
  }
  return health_;
}

int64_t Replica::committed_writes() const {
  return committer_ == nullptr ? 0 : committer_->writes();
}

void Replica::SetState(State state) {
  absl::MutexLock lock(&mu_);
  if (state_ == State::kDeposed) return;
  if (state_ != state) {
    MUSTER_LOG(INFO) << "replica " << options_.advertise_addr << ": "
                     << StateName(state_) << " -> " << StateName(state);
  }
  state_ = state;
}

bool Replica::SleepUnlessStopping(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(&stopping_), d);
}

void Replica::Run() {
  absl::Time last_complaint = absl::InfinitePast();
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_ || deposed_) return;
    }
    int64_t granted = 0;
    absl::StatusOr<int64_t> lease =
        etcd_->LeaseGrant(absl::ToInt64Seconds(absl::Ceil(options_.election_ttl,
                                                          absl::Seconds(1))),
                          kEtcdTimeout, &granted);
    if (!lease.ok()) {
      if (absl::Now() - last_complaint > absl::Seconds(10)) {
        last_complaint = absl::Now();
        MUSTER_LOG(ERROR) << "replica: cannot campaign: "
                          << lease.status().message();
      }
      if (SleepUnlessStopping(absl::Milliseconds(500))) return;
      continue;
    }
    {
      absl::MutexLock lock(&mu_);
      lease_ = *lease;
    }
    lease_ttl_seconds_ = granted;
    if (absl::Seconds(granted) <= options_.leadership_validity) {
      MUSTER_LOG(ERROR) << "replica: etcd granted a lease of " << granted
                        << "s, not longer than the leadership validity; "
                           "raise --election-ttl";
    }
    SetState(State::kCampaigning);
    if (Campaign()) return;
  }
}

bool Replica::Campaign() {
  int64_t lease;
  {
    absl::MutexLock lock(&mu_);
    lease = lease_;
  }
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return true;
    }
    etcdserverpb::TxnRequest txn;
    etcdserverpb::Compare* absent = txn.add_compare();
    absent->set_result(etcdserverpb::Compare::EQUAL);
    absent->set_target(etcdserverpb::Compare::CREATE);
    absent->set_key(LeaderKey());
    absent->set_create_revision(0);
    etcdserverpb::PutRequest* put = txn.add_success()->mutable_request_put();
    put->set_key(LeaderKey());
    put->set_value(options_.advertise_addr);
    put->set_lease(lease);
    txn.add_failure()->mutable_request_range()->set_key(LeaderKey());
    absl::StatusOr<etcdserverpb::TxnResponse> r = etcd_->Txn(txn, kEtcdTimeout);
    if (!r.ok()) {
      MUSTER_LOG(WARNING) << "replica: campaign: " << r.status().message();
      if (absl::StrContains(r.status().message(), "lease not found")) {
        return false;  // expired while etcd was away: a new one
      }
      if (SleepUnlessStopping(absl::Milliseconds(200))) return true;
      continue;
    }
    if (r->succeeded()) {
      leader_revision_ = r->header().revision();
      break;
    }
    const auto& kvs = r->responses(0).response_range().kvs();
    if (kvs.empty()) continue;  // gone between compare and read: again
    const mvccpb::KeyValue& kv = kvs[0];
    if (kv.lease() == lease) {  // a repeated transaction of ours had won
      leader_revision_ = kv.create_revision();
      break;
    }
    // Someone else leads: our lease is not needed while we stand by.
    (void)etcd_->LeaseRevoke(lease, absl::Milliseconds(500));
    {
      absl::MutexLock lock(&mu_);
      lease_ = 0;
    }
    StandBy(kv.value(), kv.lease());
    return false;
  }

  // Won. Renew the lease from now on; act only after the old leader, if
  // any, has surely stopped acting (replica.h): a leader whose lease
  // expired on its own stopped acting long ago (no renewal for the TTL, and
  // it acts for leadership_validity after one), but one whose lease was
  // revoked may act for up to leadership_validity after that.
  SetState(State::kWaiting);
  absl::Duration wait = options_.leadership_validity + kTakeOverMargin;
  if (last_leader_lease_ != 0) {
    etcdserverpb::RangeRequest get;
    get.set_key(RevokedKey());
    absl::StatusOr<etcdserverpb::RangeResponse> mark =
        etcd_->Range(get, kEtcdTimeout);
    if (mark.ok() &&
        (mark->kvs().empty() ||
         mark->kvs(0).value() != absl::StrCat(last_leader_lease_))) {
      wait = absl::ZeroDuration();  // it expired: nobody revoked it
    }
  }
  {
    absl::MutexLock lock(&mu_);
    leader_ = options_.advertise_addr;
  }
  MUSTER_LOG(INFO) << "replica " << options_.advertise_addr
                   << " won the election (revision " << leader_revision_
                   << "); serving in " << absl::FormatDuration(wait);
  Lead(wait);
  return true;
}

void Replica::StandBy(const std::string& leader, int64_t leader_lease) {
  SetState(State::kStandby);
  last_leader_lease_ = leader_lease;
  {
    absl::MutexLock lock(&mu_);
    leader_ = leader;
  }
  server_.stand_by(leader);
  MUSTER_LOG(INFO) << "replica " << options_.advertise_addr
                   << " stands by; the leader is " << leader;
  absl::StatusOr<HostPort> where = ParseHostPort(leader, -1);
  bool answered = false;
  for (;;) {
    if (SleepUnlessStopping(options_.probe_interval)) return;
    etcdserverpb::RangeRequest get;
    get.set_key(LeaderKey());
    absl::StatusOr<etcdserverpb::RangeResponse> now =
        etcd_->Range(get, kEtcdTimeout);
    if (!now.ok()) continue;  // etcd away: nothing can change meanwhile
    if (now->kvs().empty() || now->kvs(0).lease() != leader_lease) return;
    if (!where.ok()) continue;
    // A predecessor of this very replica (same address, killed and
    // restarted before its lease ran out) is gone: this process listens
    // there now.
    std::string evidence;
    if (leader == options_.advertise_addr) {
      evidence = "it is a previous run of this replica";
    } else {
      const ProbeResult probe =
          ProbeTcp(where->host, where->port, options_.probe_interval);
      if (probe.outcome == ProbeOutcome::kOpen) {
        answered = true;
      } else if (probe.outcome == ProbeOutcome::kRefused && answered) {
        evidence = absl::StrCat("its port refuses connections (", leader,
                                ": its process is gone)");
      }
    }
    if (evidence.empty()) continue;
    MUSTER_LOG(WARNING) << "replica " << options_.advertise_addr
                        << ": revoking the lease of leader " << leader << ": "
                        << evidence;
    // Marked first: whoever wins next must wait for the revoked leader to
    // stop acting (a lease that expired on its own needs no wait).
    etcdserverpb::PutRequest mark;
    mark.set_key(RevokedKey());
    mark.set_value(absl::StrCat(leader_lease));
    etcdserverpb::TxnRequest txn;
    *txn.add_success()->mutable_request_put() = mark;
    if (absl::StatusOr<etcdserverpb::TxnResponse> marked =
            etcd_->Txn(txn, kEtcdTimeout);
        !marked.ok()) {
      continue;  // no mark, no revocation: the lease will expire
    }
    (void)etcd_->LeaseRevoke(leader_lease, kEtcdTimeout);
    return;
  }
}

void Replica::Lead(absl::Duration wait) {
  int64_t lease;
  {
    absl::MutexLock lock(&mu_);
    lease = lease_;
  }
  const SteadyClock::time_point won = SteadyClock::now();
  const SteadyClock::time_point serve_at = SteadyAfter(won, wait);
  // The last renewal etcd answered: when it was sent (the leadership is
  // confirmed until then + leadership_validity) and when its answer came.
  SteadyClock::time_point confirmed_sent = won;
  SteadyClock::time_point confirmed_at = won;
  int failures = 0;     // renewals failed since the last answered one
  bool lapsed = false;  // the confirmation ran out during this silence
  const absl::Duration give_up = GiveUpAfter();
  bool serving = false;
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_ || deposed_) return;
    }
    const SteadyClock::time_point sent = SteadyClock::now();
    absl::StatusOr<int64_t> ttl =
        etcd_->LeaseKeepAlive(lease, options_.renewal_timeout);
    const SteadyClock::time_point now = SteadyClock::now();
    if (ttl.ok()) {
      // The gap (between two answers) and how long the gate was shut are
      // what a person checking a stall at 3 a.m. and bench/etcd_leader_kill.sh
      // read.
      if (lapsed) {
        MUSTER_LOG(WARNING)
            << "replica " << options_.advertise_addr
            << " confirmed its leadership again after a gap of "
            << Ms(now - confirmed_at) << " ms without a renewal answered ("
            << failures << " failed; unconfirmed for "
            << Ms(now -
                  SteadyAfter(confirmed_sent, options_.leadership_validity))
            << " ms, during which it acted on nothing)";
      } else if (failures > 0 ||
                 now - confirmed_at > absl::ToChronoNanoseconds(
                                          3 * options_.keepalive_interval)) {
        MUSTER_LOG(INFO) << "replica " << options_.advertise_addr
                         << ": lease renewed after a gap of "
                         << Ms(now - confirmed_at) << " ms (" << failures
                         << " renewals failed; the leadership stayed "
                            "confirmed)";
      }
      confirmed_sent = sent;
      confirmed_at = now;
      failures = 0;
      lapsed = false;
      server_.gate->SetValidUntil(
          SteadyAfter(sent, options_.leadership_validity));
    } else if (absl::IsNotFound(ttl.status())) {
      Depose(absl::AbortedError(absl::StrCat(
          "its election lease is gone (expired or revoked by a standby): ",
          ttl.status().message())));
      return;
    } else if (now - confirmed_at > absl::ToChronoNanoseconds(give_up)) {
      Depose(absl::UnavailableError(
          absl::StrCat("no renewal of its election lease answered for ",
                       Ms(now - confirmed_at), " ms (it gives up after ",
                       absl::FormatDuration(give_up),
                       "; the other replicas lead once the lease expires): ",
                       ttl.status().message())));
      return;
    } else {
      ++failures;
      const SteadyClock::time_point valid_until =
          SteadyAfter(confirmed_sent, options_.leadership_validity);
      if (!lapsed && now >= valid_until) {
        lapsed = true;
        MUSTER_LOG(WARNING)
            << "replica " << options_.advertise_addr
            << " cannot confirm its leadership: no lease renewal answered "
               "for "
            << Ms(now - confirmed_at) << " ms (unconfirmed since "
            << Ms(now - valid_until)
            << " ms ago); it acts on nothing until etcd answers or another "
               "replica leads, and gives up after "
            << absl::FormatDuration(give_up) << " (" << ttl.status().message()
            << ")";
      } else if (failures == 1) {
        MUSTER_LOG(WARNING) << "replica: lease renewal failed (the leadership "
                               "stays confirmed for "
                            << std::max<int64_t>(Ms(valid_until - now), 0)
                            << " ms): " << ttl.status().message();
      }
    }
    if (!serving && SteadyClock::now() >= serve_at && ttl.ok()) {
      if (absl::Status s = TakeOver(); !s.ok()) {
        Depose(s);
        return;
      }
      serving = true;
    }
    SteadyClock::time_point next =
        SteadyAfter(sent, options_.keepalive_interval);
    // Not a renewal later than needed to start serving on time.
    if (!serving && serve_at < next) next = serve_at;
    const auto after = SteadyClock::now();
    if (next > after && SleepUnlessStopping(absl::FromChrono(next - after)))
      return;
  }
}

absl::Duration Replica::GiveUpAfter() const {
  // Beyond etcd's own failover (renewals and commits time out meanwhile,
  // but the lease lives on: replica.h), and never before the lease surely
  // ended.
  return std::max(options_.give_up_after,
                  2 * absl::Seconds(std::max<int64_t>(lease_ttl_seconds_, 1)));
}

absl::Status Replica::LoadRange(
    const std::string& prefix, absl::string_view what, int64_t* revision,
    absl::FunctionRef<void(const mvccpb::KeyValue&)> each) {
  std::string from = prefix;
  const std::string end = PrefixRangeEnd(prefix);
  for (;;) {
    etcdserverpb::RangeRequest page;
    page.set_key(from);
    page.set_range_end(end);
    page.set_limit(kLoadPage);
    page.set_revision(*revision);
    absl::StatusOr<etcdserverpb::RangeResponse> r =
        etcd_->Range(page, absl::Seconds(10));
    if (!r.ok()) {
      return absl::UnavailableError(absl::StrCat(
          "cannot load ", what, " from etcd: ", r.status().message()));
    }
    if (*revision == 0) *revision = r->header().revision();
    for (const mvccpb::KeyValue& kv : r->kvs()) each(kv);
    if (!r->more() || r->kvs().empty()) return absl::OkStatus();
    from = r->kvs(r->kvs_size() - 1).key() + std::string(1, '\0');
  }
}

absl::Status Replica::TakeOver() {
  // The Store: every key under PREFIX/store/, page by page at one revision.
  const std::string store_prefix = StorePrefix();
  int64_t keys = 0;
  int64_t revision = 0;
  absl::Status loaded_store = LoadRange(
      store_prefix, "the Store", &revision, [&](const mvccpb::KeyValue& kv) {
        absl::string_view rest = kv.key();
        rest.remove_prefix(store_prefix.size());
        // <job>/<round>/<key>: the namespace is the first two parts.
        const size_t first = rest.find('/');
        const size_t second = first == absl::string_view::npos
                                  ? first
                                  : rest.find('/', first + 1);
        if (second == absl::string_view::npos) return;
        (void)server_.store->Set(rest.substr(0, second),
                                 rest.substr(second + 1), kv.value());
        ++keys;
        absl::string_view job = rest.substr(0, first);
        absl::MutexLock lock(&mu_);
        loaded_jobs_.try_emplace(std::string(job),
                                 absl::Now() + options_.forget_unclaimed_after);
      });
  if (!loaded_store.ok()) return loaded_store;
  // The closed namespaces (rounds that ended), oldest first, so that the
  // store keeps the newest as the leader that closed them did. Before the
  // committer is set: this closes them here only.
  std::vector<std::pair<int64_t, std::string>> closed;
  absl::Status loaded_closed =
      LoadRange(ClosedPrefix(), "the closed Store namespaces", &revision,
                [&](const mvccpb::KeyValue& kv) {
                  closed.emplace_back(kv.create_revision(),
                                      kv.key().substr(ClosedPrefix().size()));
                });
  if (!loaded_closed.ok()) return loaded_closed;
  std::sort(closed.begin(), closed.end());
  for (const auto& [unused, ns] : closed) {
    server_.store->DropNamespace(ns);
    // A job known only by its closed rounds is forgotten as the others.
    absl::MutexLock lock(&mu_);
    loaded_jobs_.try_emplace(ns.substr(0, ns.find('/')),
                             absl::Now() + options_.forget_unclaimed_after);
  }
  // The jobs: their rounds, restart counts and token bindings.
  etcdserverpb::RangeRequest jobs;
  jobs.set_key(JobsPrefix());
  jobs.set_range_end(PrefixRangeEnd(JobsPrefix()));
  jobs.set_revision(revision);
  absl::StatusOr<etcdserverpb::RangeResponse> r =
      etcd_->Range(jobs, absl::Seconds(10));
  if (!r.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot load the jobs from etcd: ", r.status().message()));
  }
  int loaded = 0;
  for (const mvccpb::KeyValue& kv : r->kvs()) {
    const std::string job_id = kv.key().substr(JobsPrefix().size());
    nlohmann::json doc = nlohmann::json::parse(kv.value(), nullptr, false);
    if (doc.is_discarded() || !doc.is_object()) continue;
    const std::string state = doc.value("state", "");
    const bool ended = state == "SUCCEEDED" || state == "FAILED";
    server_.coordinator->ResumeJob(job_id, doc.value("round", int64_t{0}),
                                   ended ? 0 : doc.value("restart_count", 0));
    server_.auth->Restore(job_id, BindingFromJson(doc.value("token", "")));
    mirrored_jobs_[job_id] = kv.value();
    {
      absl::MutexLock lock(&mu_);
      loaded_jobs_.try_emplace(job_id,
                               absl::Now() + options_.forget_unclaimed_after);
    }
    ++loaded;
  }
  EtcdCommitterOptions c;
  c.leader_key = LeaderKey();
  c.leader_revision = leader_revision_;
  c.store_prefix = store_prefix;
  c.closed_prefix = ClosedPrefix();
  c.commit_timeout = GiveUpAfter();
  c.on_failure = [this](const absl::Status& why) { Depose(why); };
  committer_ = std::make_unique<EtcdCommitter>(etcd_.get(), std::move(c));
  // Records past the store's bound (left by a leader lost before it erased
  // them) go now, oldest first, as the store forgot them.
  if (closed.size() > store::KvStore::kMaxClosedNamespaces) {
    for (size_t i = 0; i < closed.size() - store::KvStore::kMaxClosedNamespaces;
         ++i) {
      committer_->CommitKey(ClosedPrefix() + closed[i].second, "",
                            /*erase=*/true);
    }
  }
  server_.store->SetCommitter(committer_.get());
  SetState(State::kLeading);
  mirror_ready_.store(true);
  // Fencing token: every Session and Store answer from now on names this
  // leadership, so a client that saw it ignores an older leader's leftovers.
  server_.coordinator->SetEpoch(leader_revision_);
  server_.gate->Lead(leader_revision_);
  MUSTER_LOG(INFO) << "replica " << options_.advertise_addr << " leads: loaded "
                   << loaded << " jobs, " << keys << " Store keys and "
                   << closed.size() << " closed namespaces from etcd (revision "
                   << revision << "); agents re-announce their rounds";
  return absl::OkStatus();
}

void Replica::Depose(const absl::Status& why) {
  {
    absl::MutexLock lock(&mu_);
    if (deposed_) return;
    deposed_ = true;
    state_ = State::kDeposed;
  }
  server_.stand_by("");
  MUSTER_LOG(ERROR) << "replica " << options_.advertise_addr
                    << " lost the leadership: " << why.message()
                    << "; it serves nothing more";
  if (options_.on_deposed) {
    options_.on_deposed(why);
    return;
  }
  MUSTER_LOG(ERROR) << "musterd exits with " << kDeposedExitCode
                    << " so that a clean process (systemd, Kubernetes) "
                       "stands by and loads the state from etcd";
  std::fflush(nullptr);
  // No destructors: other threads still run, and nothing of this process's
  // state may be written anywhere any more.
  std::_Exit(kDeposedExitCode);
}

void Replica::Tick(absl::Time now) {
  if (!mirror_ready_.load() || !server_.gate->serving()) return;
  {
    absl::MutexLock lock(&mu_);
    if (state_ != State::kLeading) return;
  }
  std::vector<std::string> forget;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = loaded_jobs_.begin(); it != loaded_jobs_.end();) {
      if (it->second > now) {
        ++it;
        continue;
      }
      forget.push_back(it->first);
      it = loaded_jobs_.erase(it);
    }
  }
  for (const std::string& job : forget) {
    if (server_.coordinator->Status(job).jobs_size() != 0) continue;
    MUSTER_LOG(INFO) << "replica: no agent of job " << job
                     << " came back; dropping its Store keys";
    server_.store->DropNamespacesWithPrefix(absl::StrCat(job, "/"));
  }
  if (now - last_mirror_ < kMirrorInterval) return;
  last_mirror_ = now;
  std::map<std::string, std::string> jobs;
  const v1::GetStatusResponse status = server_.coordinator->Status("");
  for (const v1::JobStatus& s : status.jobs()) {
    nlohmann::json doc = {
        {"state", s.state()},
        {"round", s.round()},
        {"restart_count", s.restart_count()},
        {"min_nodes", s.min_nodes()},
        {"max_nodes", s.max_nodes()},
        {"token", BindingJson(server_.auth->BindingOf(s.job_id()))}};
    jobs[s.job_id()] = doc.dump();
  }
  for (const auto& [job, text] : jobs) {
    auto it = mirrored_jobs_.find(job);
    if (it != mirrored_jobs_.end() && it->second == text) continue;
    committer_->CommitKey(JobsPrefix() + job, text, /*erase=*/false);
  }
  for (const auto& [job, text] : mirrored_jobs_) {
    if (jobs.contains(job)) continue;
    // A job loaded from etcd whose agents have not come back yet is not in
    // the Coordinator's status, but it is not gone: erasing it would leave a
    // next leader, should this one be lost before they rejoin, without it
    // (its rounds would count from 1 again). It goes once forgotten.
    bool awaited = false;
    {
      absl::MutexLock lock(&mu_);
      awaited = loaded_jobs_.contains(job);
    }
    if (awaited) {
      jobs.emplace(job, text);
      continue;
    }
    committer_->CommitKey(JobsPrefix() + job, "", /*erase=*/true);
  }
  mirrored_jobs_ = std::move(jobs);
}

}  // namespace muster::rendezvous
