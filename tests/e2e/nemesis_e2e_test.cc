// The nemesis test (issue 35): three musterd replicas over a 3-member etcd
// cluster run two 3-node jobs (one under --recovery=restart, one under
// --recovery=in-place) and serve 8 Store clients while a seeded schedule
// applies faults one at a time, with pauses between them:
//   leader-kill     kill -9 of the musterd leader, then it starts again;
//   leader-pause    SIGSTOP of the leader for 1-5 s, SIGCONT once another
//                   replica took over (the resumed one must act on nothing);
//   etcd-pause      SIGSTOP of one etcd member for 1-5 s, then SIGCONT;
//   leader-cut      the leader cut from etcd by iptables in its network
//                   namespace while its agents still reach it; the rules are
//                   removed once another leads, and the replica started again
//                   if it exited (skipped, saying why, without root or
//                   network namespaces: then everything runs on loopback);
//   replica-restart SIGTERM of a replica chosen at random, then a new one.
// No fault touches an agent or a worker, so at the end:
//   - no worker restarted: one start per rank per job, and the in-place
//     job's workers never saw a recovery;
//   - every agent exits 0 once the finish flag is written;
//   - no acknowledged write was lost: each client's acknowledged writes to
//     keys of its own that nobody writes again are all read back, and the
//     shared keys' final reads are part of the checked history;
//   - the Store history is linearizable (tests/testing/linearizability.h).
//
// MUSTER_NEMESIS_SEED repeats a run's schedule and the clients' choices (the
// seed is printed and in every failure message; timings differ from run to
// run); MUSTER_NEMESIS_SECONDS (default 60) is how long faults are applied.
// The last line, "nemesis-summary ...", is what bench/nemesis.sh tabulates.
//
// The Store clients use the C++ GrpcStore given all three replicas; their
// namespace is the round of a one-node job of its own (nemesis-store), whose
// round no fault should end. How each answer is recorded:
//   OK (and NOT_FOUND of a Get that does not wait)    -> kOk
//   ABORTED (namespace dropped), INVALID_ARGUMENT     -> kNotApplied
//   UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED, others -> kUnknown (pending
//                                                        forever)
// A write that GrpcStore had sent to a leader that then failed is reported
// (UNAVAILABLE: unknown), and only reads are repeated on the next leader; its
// option repeat_sets_in_flight (off here) would repeat a Set. musterd keeps no
// per-client record (request ids are per stream): a repeated write may apply
// twice. Before fa8bdfc GrpcStore repeated Set, CompareSet and Delete, and
// this test caught it (a Set applied again after another client's Delete; a
// Delete answering "absent" after its own first attempt deleted the key). So
// the history is checked twice, to tell a client's repeat from a server's
// fault:
//   as sent      each Set, CompareSet or Delete in flight across a fault
//                also gets a first attempt of unknown outcome: what the
//                replicas did; a failure is theirs (fencing, a lost or stale
//                write);
//   as answered  the ops as the clients saw them; a failure here only is a
//                wrong answer from a repeat, which a worker would see too.
// Both must hold. etcd's own record of the namespace (every PUT and DELETE)
// is read at the end: a value PUT twice is a repeat seen from the other side.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "muster/store/grpc_store.h"
#include "tests/doctor/netns.h"
#include "tests/testing/etcd.h"
#include "tests/testing/files.h"
#include "tests/testing/linearizability.h"
#include "tests/testing/netns_star.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/wait.h"

namespace muster {
namespace {

using ::muster::testing::BinPath;
using ::muster::testing::EtcdCluster;
using ::muster::testing::KvOp;
using ::muster::testing::LinearizabilityResult;
using ::muster::testing::NetnsStar;
using ::muster::testing::ReadLines;
using ::muster::testing::Subprocess;
using ::muster::testing::WaitUntil;

constexpr int kReplicas = 3;
constexpr int kNodes = 3;
constexpr int kClients = 8;
constexpr char kRestartJob[] = "nemesis-restart";
constexpr char kInPlaceJob[] = "nemesis-inplace";
// A one-node job whose round's Store namespace the clients use: musterd
// serves the namespaces of jobs that joined, and a new leader drops the keys
// of a job no agent claims (replica.cc), so the namespace must be a live
// round's. Its round never ends while the clients run (a round that did
// would drop the namespace: ABORTED answers, counted as a failure).
constexpr char kStoreJob[] = "nemesis-store";
// The shared keys every client reads and writes. Few, so that clients
// contend; every value is a decimal integer, so Add always applies.
const char* const kKeys[] = {"k0", "k1", "k2", "k3", "k4"};
// Per-client keys written once each, read back at the end: a lost
// acknowledged write shows as a count, apart from the checker's verdict.
constexpr char kOwnKeyPrefix[] = "own-";
// The smallest value StoreClient::Fresh makes.
constexpr int64_t kFreshBase = int64_t{1000000000} * 1000;

std::string Tail(const std::string& text, size_t n = 4000) {
  return text.size() <= n ? text : "..." + text.substr(text.size() - n);
}

// GET `path` at host:port within `timeout` (connect, send and read): the
// whole response, or "" when nothing answered in time. tests/testing/http.h
// reaches loopback only; the replicas may listen in network namespaces.
std::string HttpGetAt(const std::string& host, int port,
                      const std::string& path, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (fd < 0) return "";
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  std::string out;
  auto await = [&](short events) {
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) return false;
    pollfd p{fd, events, 0};
    return poll(&p, 1, static_cast<int>(ms)) == 1;
  };
  if (inet_pton(AF_INET, host.c_str(), &a.sin_addr) == 1 &&
      (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 ||
       (errno == EINPROGRESS && await(POLLOUT)))) {
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    const std::string req =
        absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: ", host,
                     "\r\nConnection: close\r\n\r\n");
    if (err == 0 &&
        write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[4096];
      while (await(POLLIN)) {
        const ssize_t n = read(fd, buf, sizeof(buf));
        if (n <= 0) break;
        out.append(buf, static_cast<size_t>(n));
      }
    }
  }
  close(fd);
  return out;
}

// ---------------------------------------------------------------------------
// The Store clients.

KvOp::Outcome OutcomeOf(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kOk:
      return KvOp::Outcome::kOk;
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kInvalidArgument:
      return KvOp::Outcome::kNotApplied;
    default:
      return KvOp::Outcome::kUnknown;
  }
}

// What the clients recorded, shared by their threads.
class History {
 public:
  void Add(KvOp op, const absl::Status& status) {
    absl::MutexLock lock(&mu_);
    ++codes_[absl::StatusCodeToString(status.code())];
    ops_.push_back(std::move(op));
  }
  std::vector<KvOp> ops() const {
    absl::MutexLock lock(&mu_);
    return ops_;
  }
  std::string Codes() const {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> parts;
    for (const auto& [code, n] : codes_)
      parts.push_back(absl::StrCat(code, " ", n));
    return absl::StrJoin(parts, ", ");
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<KvOp> ops_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> codes_ ABSL_GUARDED_BY(mu_);
};

// One client: a GrpcStore of its own (its own stream, as a worker has) doing
// a seeded random mix of ops with short think times until stopped.
class StoreClient {
 public:
  StoreClient(int id, uint64_t seed, std::string endpoints, std::string prefix,
              History* history)
      : id_(id),
        rng_(seed),
        endpoints_(std::move(endpoints)),
        prefix_(std::move(prefix)),
        history_(history) {}

  // Connects (30 s at most); false with the reason in *why.
  bool Connect(std::string* why) {
    store::GrpcStoreOptions o;
    o.endpoint = endpoints_;
    o.prefix = prefix_;
    o.connect_timeout = absl::Seconds(30);
    absl::StatusOr<std::unique_ptr<store::Store>> s = store::NewGrpcStore(o);
    if (!s.ok()) {
      *why = s.status().ToString();
      return false;
    }
    store_ = *std::move(s);
    return true;
  }

  // The ops until *stop; each blocks at most GrpcStore's own limits (its
  // failover timeout plus a margin).
  void Run(const std::atomic<bool>* stop) {
    while (!stop->load()) {
      OneOp();
      std::uniform_int_distribution<int> think(0, 20);
      absl::SleepFor(absl::Milliseconds(think(rng_)));
    }
  }

  // A final Get of `key`, recorded (after every other op of the history).
  KvOp Read(const std::string& key) {
    KvOp op = Begin(KvOp::Kind::kGet, key);
    absl::StatusOr<std::string> v = store_->Get(key, absl::ZeroDuration());
    if (!v.ok() && v.status().code() == absl::StatusCode::kNotFound) {
      op.outcome = KvOp::Outcome::kOk;
      op.found = false;
      End(op, absl::OkStatus());
    } else {
      op.outcome = OutcomeOf(v.status());
      if (v.ok()) {
        op.found = true;
        op.result = *v;
      }
      End(op, v.status());
    }
    return op;
  }

  // The own keys whose Set was acknowledged, with their values.
  const std::map<std::string, std::string>& acknowledged_own() const {
    return own_acked_;
  }

 private:
  KvOp Begin(KvOp::Kind kind, const std::string& key) {
    KvOp op;
    op.client = id_;
    op.kind = kind;
    op.key = key;
    op.invoked = absl::Now();
    return op;
  }
  void End(KvOp& op, const absl::Status& s) {
    op.returned = absl::Now();
    history_->Add(op, s);
  }
  // A value no other op writes: ((client + 1) * 10^9 + sequence) * 1000. The
  // factor tells a Set's or CompareSet's value in etcd from an Add's result
  // (Add's deltas are 1 to 9).
  std::string Fresh() {
    return absl::StrCat((static_cast<int64_t>(id_ + 1) * 1000000000 + ++seq_) *
                        1000);
  }

  void OneOp() {
    std::uniform_int_distribution<int> pick_key(0, std::size(kKeys) - 1);
    std::uniform_int_distribution<int> pick(0, 99);
    const std::string key = kKeys[pick_key(rng_)];
    const int p = pick(rng_);
    if (p < 5) {
      // An own key, written once: it must be there at the end if acked.
      const std::string own = absl::StrCat(kOwnKeyPrefix, id_, "-", seq_ + 1);
      KvOp op = Begin(KvOp::Kind::kSet, own);
      op.value = Fresh();
      absl::Status s = store_->Set(own, op.value);
      op.outcome = OutcomeOf(s);
      End(op, s);
      if (s.ok()) own_acked_[own] = op.value;
    } else if (p < 30) {
      KvOp op = Begin(KvOp::Kind::kGet, key);
      absl::StatusOr<std::string> v = store_->Get(key, absl::ZeroDuration());
      absl::Status s = v.status();
      if (s.code() == absl::StatusCode::kNotFound) {
        s = absl::OkStatus();
        op.found = false;
      } else if (v.ok()) {
        op.found = true;
        op.result = *v;
        seen_[key] = *v;
      }
      op.outcome = OutcomeOf(s);
      End(op, v.status());
    } else if (p < 50) {
      KvOp op = Begin(KvOp::Kind::kSet, key);
      op.value = Fresh();
      absl::Status s = store_->Set(key, op.value);
      op.outcome = OutcomeOf(s);
      End(op, s);
      if (s.ok()) seen_[key] = op.value;
    } else if (p < 65) {
      KvOp op = Begin(KvOp::Kind::kAdd, key);
      op.delta = std::uniform_int_distribution<int>(1, 9)(rng_);
      absl::StatusOr<int64_t> v = store_->Add(key, op.delta);
      op.outcome = OutcomeOf(v.status());
      if (v.ok()) {
        op.result = absl::StrCat(*v);
        seen_[key] = op.result;
      }
      End(op, v.status());
    } else if (p < 85) {
      KvOp op = Begin(KvOp::Kind::kCompareSet, key);
      // Mostly the last value this client saw (a swap that may succeed),
      // sometimes "absent", sometimes a value that never existed.
      const int how = pick(rng_);
      op.expected = how < 70 ? seen_[key] : how < 85 ? "" : "-1";
      op.value = Fresh();
      absl::StatusOr<std::string> v =
          store_->CompareSet(key, op.expected, op.value);
      op.outcome = OutcomeOf(v.status());
      if (v.ok()) {
        op.result = *v;
        seen_[key] = *v;
      }
      End(op, v.status());
    } else {
      KvOp op = Begin(KvOp::Kind::kDelete, key);
      absl::StatusOr<bool> v = store_->Delete(key);
      op.outcome = OutcomeOf(v.status());
      if (v.ok()) {
        op.found = *v;
        seen_[key] = "";
      }
      End(op, v.status());
    }
  }

  const int id_;
  std::mt19937_64 rng_;
  const std::string endpoints_;
  const std::string prefix_;
  History* const history_;
  std::unique_ptr<store::Store> store_;
  int64_t seq_ = 0;
  std::map<std::string, std::string> seen_;  // key -> last value seen
  std::map<std::string, std::string> own_acked_;
};

// ---------------------------------------------------------------------------
// The cluster: etcd, replicas, agents.

enum class Fault {
  kLeaderKill,
  kLeaderPause,
  kEtcdPause,
  kLeaderCut,
  kReplicaRestart
};

const char* FaultName(Fault f) {
  switch (f) {
    case Fault::kLeaderKill:
      return "leader-kill";
    case Fault::kLeaderPause:
      return "leader-pause";
    case Fault::kEtcdPause:
      return "etcd-pause";
    case Fault::kLeaderCut:
      return "leader-cut";
    case Fault::kReplicaRestart:
      return "replica-restart";
  }
  return "?";
}

struct Replica {
  std::string addr;  // where it listens (a spoke's address, or loopback)
  int port = 0;
  int http = 0;
  std::unique_ptr<Subprocess> proc;
  std::string past;      // the output of its earlier processes
  bool stopped = false;  // SIGSTOPped now: asking it would hang
  std::string endpoint() const { return absl::StrCat(addr, ":", port); }
};

// The restart job's worker: logs its start and waits for the finish flag.
constexpr char kRestartWorker[] = R"(#!/bin/bash
echo "start $RANK $MUSTER_ROUND $$ $TORCHELASTIC_RESTART_COUNT $MUSTER_STORE_PREFIX" >> "$NEMESIS_STARTS"
for i in $(seq 1 3000); do
  [ -e "$NEMESIS_FINISH" ] && exit 0
  sleep 0.2
done
exit 3
)";

class NemesisE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* seed = std::getenv("MUSTER_NEMESIS_SEED");
    seed_ = seed != nullptr && *seed != '\0' ? std::strtoull(seed, nullptr, 10)
                                             : std::random_device{}();
    const char* secs = std::getenv("MUSTER_NEMESIS_SECONDS");
    if (secs != nullptr && *secs != '\0') {
      length_ = absl::Seconds(std::max(1, std::atoi(secs)));
    }
    rng_.seed(seed_);
    tag_ =
        absl::StrCat("[nemesis seed ", seed_, ": MUSTER_NEMESIS_SEED=", seed_,
                     " repeats the schedule] ");
    dir_ = testing::MakeTempDir("nemesis");
    std::cout << "nemesis: seed " << seed_ << " (MUSTER_NEMESIS_SEED=" << seed_
              << " repeats it), " << length_ << " of faults, files in " << dir_
              << " (history, etcd's record, every process's output)"
              << std::endl;
    ASSERT_FALSE(EtcdCluster::Binary().empty())
        << tag_ << "no etcd binary: apt-get install etcd-server";

    // The replicas in network namespaces where this process may make them,
    // so that one can be cut from etcd while its agents reach it.
    no_netns_ = testing::NetnsUnavailable();
    if (no_netns_.empty()) {
      absl::StatusOr<std::unique_ptr<NetnsStar>> star =
          NetnsStar::Create(kReplicas);
      if (star.ok()) {
        star_ = *std::move(star);
      } else {
        no_netns_ = std::string(star.status().message());
      }
    }
    if (!no_netns_.empty()) {
      std::cout << "nemesis: fault leader-cut SKIPPED (the replicas run on "
                   "loopback): needs root and network namespaces with "
                   "iptables: "
                << no_netns_ << std::endl;
    }
    etcd_ = star_ != nullptr
                ? std::make_unique<EtcdCluster>(3, NetnsStar::HubAddr(),
                                                std::vector<std::string>{})
                : std::make_unique<EtcdCluster>(3);
    ASSERT_TRUE(etcd_->ok()) << tag_ << etcd_->Logs();

    for (int i = 0; i < kReplicas; ++i) {
      replicas_[i].addr =
          star_ != nullptr ? NetnsStar::SpokeAddr(i) : "127.0.0.1";
      replicas_[i].port = testing::FreePort();
      replicas_[i].http = testing::FreePort();
      ASSERT_TRUE(StartReplica(i)) << tag_ << Logs();
    }
    ASSERT_GE(AwaitLeader(absl::Seconds(30)), 0) << tag_ << "no replica leads\n"
                                                 << Logs();
    std::vector<std::string> eps;
    for (const Replica& r : replicas_) eps.push_back(r.endpoint());
    endpoints_ = absl::StrJoin(eps, ",");
  }

  void TearDown() override {
    stop_clients_ = true;
    for (std::thread& t : threads_) t.join();
    // Every process's whole output, for a post-mortem (a failure's message
    // holds their tails only).
    for (int i = 0; i < kReplicas && !dir_.empty(); ++i) {
      const Replica& r = replicas_[i];
      testing::WriteFile(absl::StrCat(dir_, "/musterd-", i, ".log"),
                         r.past + (r.proc ? r.proc->Output() : ""));
    }
    for (size_t i = 0; i < agents_.size(); ++i) {
      testing::WriteFile(
          absl::StrCat(dir_, "/agent-", i, "-", agent_jobs_[i], ".log"),
          agents_[i]->Output());
    }
    for (auto& a : agents_) a->Kill();
    for (Replica& r : replicas_) {
      if (r.proc == nullptr) continue;
      if (r.stopped) r.proc->Signal(SIGCONT);
      r.proc->Kill();
    }
    for (int i = 0; etcd_ != nullptr && i < etcd_->size(); ++i) {
      if (etcd_->proc(i) != nullptr) etcd_->proc(i)->Signal(SIGCONT);
    }
    etcd_.reset();
    star_.reset();  // after every process in it is gone
  }

  // ---- replicas ----

  bool StartReplica(int i) {
    Replica& r = replicas_[i];
    if (r.proc != nullptr) {
      absl::StrAppend(&r.past, r.proc->Output(), "--- (restarted) ---\n");
    }
    std::vector<std::string> argv = {
        BinPath("musterd"), absl::StrCat("--listen=", r.endpoint()),
        absl::StrCat("--http-listen=", r.addr, ":", r.http),
        "--etcd-endpoints=" + etcd_->Endpoints(), "--log-level=info"};
    // A binary being relinked by a concurrent build cannot be executed for a
    // moment ("Text file busy", "Permission denied"): tries again for 60 s.
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (true) {
      r.proc = std::make_unique<Subprocess>(
          star_ != nullptr ? star_->In(i, argv) : argv);
      r.stopped = false;
      if (r.proc->WaitForOutput("listening", absl::Seconds(30))) return true;
      if (r.proc->Running() || absl::Now() > deadline ||
          !absl::StrContains(r.proc->Output(), "exec of")) {
        return false;
      }
      absl::StrAppend(&r.past, r.proc->Output(), "--- (again) ---\n");
      absl::SleepFor(absl::Seconds(2));
    }
  }

  // Whether replica i answers /readyz with 200 (it leads and serves). Never
  // asks a stopped one (its socket accepts, nothing answers).
  bool Ready(int i) {
    Replica& r = replicas_[i];
    if (r.proc == nullptr || r.stopped || !r.proc->Running()) return false;
    return absl::StrContains(
        HttpGetAt(r.addr, r.http, "/readyz", absl::Seconds(1)), " 200 ");
  }

  // Waits up to `timeout` until exactly one replica other than `not_this`
  // says it leads; returns it, or -1.
  int AwaitLeader(absl::Duration timeout, int not_this = -1) {
    int leader = -1;
    WaitUntil(
        [&] {
          std::vector<int> ready;
          for (int i = 0; i < kReplicas; ++i) {
            if (i != not_this && Ready(i)) ready.push_back(i);
          }
          leader = ready.size() == 1 ? ready[0] : -1;
          return leader >= 0;
        },
        timeout, absl::Milliseconds(100));
    return leader;
  }

  std::string Logs() {
    std::string out;
    for (int i = 0; i < kReplicas; ++i) {
      const Replica& r = replicas_[i];
      absl::StrAppend(&out, "--- musterd ", i, " (", r.endpoint(), ") ---\n",
                      Tail(r.past + (r.proc ? r.proc->Output() : ""), 6000),
                      "\n");
    }
    return out;
  }

  // ---- jobs ----

  std::unique_ptr<Subprocess> Agent(const std::string& job, int nnodes,
                                    const std::string& recovery,
                                    std::vector<std::string> worker,
                                    std::map<std::string, std::string> env) {
    std::vector<std::string> argv = {BinPath("muster"),
                                     absl::StrCat("--nnodes=", nnodes),
                                     "--nproc-per-node=1",
                                     "--max-restarts=3",
                                     "--recovery=" + recovery,
                                     "--rdzv-backend=c10d",
                                     "--rdzv-endpoint=" + endpoints_,
                                     "--rdzv-id=" + job,
                                     "--no-python"};
    argv.insert(argv.end(), worker.begin(), worker.end());
    for (const auto& [k, v] : testing::EnvWithoutLauncher()) env.emplace(k, v);
    agent_jobs_.push_back(job);
    return std::make_unique<Subprocess>(argv, env);
  }

  void StartJobs() {
    starts_ = dir_ + "/restart-starts";
    finish_ = dir_ + "/finish";
    const std::string script =
        testing::WriteFile(dir_ + "/worker.sh", kRestartWorker, 0755);
    store_starts_ = dir_ + "/store-starts";
    agents_.push_back(Agent(
        kStoreJob, 1, "restart", {script},
        {{"NEMESIS_STARTS", store_starts_}, {"NEMESIS_FINISH", finish_}}));
    for (int n = 0; n < kNodes; ++n) {
      agents_.push_back(
          Agent(kRestartJob, kNodes, "restart", {script},
                {{"NEMESIS_STARTS", starts_}, {"NEMESIS_FINISH", finish_}}));
      outs_.push_back(testing::MakeTempDir(absl::StrCat("nemesis-inplace", n)));
      agents_.push_back(
          Agent(kInPlaceJob, kNodes, "in-place",
                {BinPath("control_worker"), "--out=" + outs_.back()}, {}));
    }
  }

  // The in-place workers: per node folder, the lines of each process's log.
  std::vector<std::map<std::string, std::vector<std::string>>> InPlaceLogs() {
    std::vector<std::map<std::string, std::vector<std::string>>> out;
    for (const std::string& dir : outs_) {
      out.emplace_back();
      std::error_code ec;
      for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
        if (e.path().extension() != ".log") continue;
        out.back()[e.path().stem().string()] = ReadLines(e.path().string());
      }
    }
    return out;
  }

  // Whether both jobs run: the restart job's 3 workers started, and each
  // in-place node's worker saw its round running.
  bool JobsRunning() {
    if (ReadLines(starts_).size() < kNodes) return false;
    if (ReadLines(store_starts_).empty()) return false;
    for (const auto& node : InPlaceLogs()) {
      bool running = false;
      for (const auto& [pid, lines] : node) {
        for (const std::string& l : lines) {
          running = running || absl::StrContains(l, "state=running");
        }
      }
      if (!running) return false;
    }
    return true;
  }

  std::string AgentOutputs() {
    std::string out;
    for (size_t i = 0; i < agents_.size(); ++i) {
      absl::StrAppend(&out, "--- agent ", i, " (", agent_jobs_[i], ") ---\n",
                      Tail(agents_[i]->Output(), 2500), "\n");
    }
    return out;
  }

  struct EtcdRecord {
    // Store key -> its writes, oldest first ("PUT <value>", "DELETE").
    std::map<std::string, std::vector<std::string>> events;
    // Set and CompareSet values (multiples of 1000, see Fresh) PUT more than
    // once: repeats that applied twice.
    int64_t written_twice = 0;
  };

  // Every PUT and DELETE in the clients' namespace since etcd's first
  // revision (`etcdctl watch --rev=1`: nothing is compacted within a test),
  // also written to dir_/etcd-store.txt. watch never ends by itself: it is
  // stopped after 4 s.
  EtcdRecord ReadEtcdRecord() {
    const std::string prefix =
        absl::StrCat("/muster/store/", store_prefix_, "/");
    Subprocess watch({"/usr/bin/etcdctl", "--endpoints", etcd_->Endpoints(),
                      "watch", "--rev=1", "--prefix", prefix},
                     {{"ETCDCTL_API", "3"}});
    watch.WaitOrKill(absl::Seconds(4));
    const std::string text = watch.Output();
    testing::WriteFile(dir_ + "/etcd-store.txt", text);
    EtcdRecord record;
    std::map<std::string, int> puts;
    std::vector<std::string> lines = absl::StrSplit(text, '\n');
    for (size_t i = 0; i + 1 < lines.size(); ++i) {
      const bool put = lines[i] == "PUT" && i + 2 < lines.size();
      if (!put && lines[i] != "DELETE") continue;
      absl::string_view key = lines[i + 1];
      if (!absl::ConsumePrefix(&key, prefix)) continue;
      std::string& value = lines[i + 2];
      record.events[std::string(key)].push_back(put ? "PUT " + value
                                                    : "DELETE");
      int64_t v = 0;
      if (put && absl::SimpleAtoi(value, &v) && v >= kFreshBase &&
          v % 1000 == 0 && ++puts[absl::StrCat(key, "=", value)] == 2) {
        ++record.written_twice;
      }
      i += put ? 2 : 1;
    }
    return record;
  }

  // Whether [from, to] overlaps a fault's application (and a second after).
  bool InFault(absl::Time from, absl::Time to) const {
    for (const auto& [start, end] : faults_) {
      if (from < end + absl::Seconds(1) && to > start) return true;
    }
    return false;
  }

  // ---- faults ----

  double Uniform(double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng_);
  }

  void Say(const std::string& line) {
    std::cout << absl::StrFormat("nemesis: +%.1fs ",
                                 absl::ToDoubleSeconds(absl::Now() - t0_))
              << line << std::endl;
  }

  // Replica i gone (exited or killed): started again as a standby.
  void Restart(int i) {
    if (replicas_[i].proc->Running()) replicas_[i].proc->Kill();
    if (!StartReplica(i)) {
      ADD_FAILURE() << tag_ << "replica " << i << " did not start again\n"
                    << Logs();
    }
  }

  // Applies one fault; returns false when it could not (said why).
  bool Apply(Fault f) {
    const int leader = AwaitLeader(absl::Seconds(20));
    if (leader < 0 && f != Fault::kEtcdPause && f != Fault::kReplicaRestart) {
      ADD_FAILURE() << tag_ << "no leader before " << FaultName(f) << "\n"
                    << Logs();
      return false;
    }
    Replica& l = replicas_[std::max(leader, 0)];
    const absl::Time t = absl::Now();
    switch (f) {
      case Fault::kLeaderKill: {
        l.proc->Kill();
        const int next = AwaitLeader(absl::Seconds(20), leader);
        Say(absl::StrFormat(
            "leader-kill: kill -9 of leader %d; %s", leader,
            next < 0
                ? "NO new leader in 20 s"
                : absl::StrFormat("replica %d leads after %.2fs", next,
                                  absl::ToDoubleSeconds(absl::Now() - t))));
        EXPECT_GE(next, 0) << tag_ << "no leader after leader-kill\n" << Logs();
        Restart(leader);
        return true;
      }
      case Fault::kLeaderPause: {
        const absl::Duration pause = absl::Seconds(Uniform(1, 5));
        l.proc->Signal(SIGSTOP);
        l.stopped = true;
        const int next = AwaitLeader(absl::Seconds(20), leader);
        const absl::Duration took = absl::Now() - t;
        if (absl::Now() < t + pause) absl::SleepFor(t + pause - absl::Now());
        l.proc->Signal(SIGCONT);
        l.stopped = false;
        Say(absl::StrFormat(
            "leader-pause: SIGSTOP of leader %d for %.2fs; %s", leader,
            absl::ToDoubleSeconds(absl::Now() - t),
            next < 0 ? "NO other leader in 20 s"
                     : absl::StrFormat("replica %d took over after %.2fs", next,
                                       absl::ToDoubleSeconds(took))));
        EXPECT_GE(next, 0) << tag_ << "no takeover of a paused leader\n"
                           << Logs();
        // The deposed leader learns it on resuming and exits 75; a later
        // design may keep it as a standby: either way it must not lead.
        std::optional<int> code = l.proc->Wait(absl::Seconds(15));
        if (code.has_value()) {
          Say(absl::StrCat("leader-pause: resumed replica ", leader, " exited ",
                           *code, "; starting it again"));
          Restart(leader);
        }
        return true;
      }
      case Fault::kEtcdPause: {
        const int m = std::uniform_int_distribution<int>(0, 2)(rng_);
        const absl::Duration pause = absl::Seconds(Uniform(1, 5));
        etcd_->proc(m)->Signal(SIGSTOP);
        absl::SleepFor(pause);
        etcd_->proc(m)->Signal(SIGCONT);
        Say(absl::StrFormat("etcd-pause: SIGSTOP of etcd member %d for %.2fs",
                            m, absl::ToDoubleSeconds(pause)));
        return true;
      }
      case Fault::kLeaderCut: {
        std::vector<std::string> ports;
        for (int i = 0; i < etcd_->size(); ++i) {
          const std::string url = etcd_->ClientUrl(i);
          ports.push_back(url.substr(url.rfind(':') + 1));
        }
        const std::string list = absl::StrJoin(ports, ",");
        const std::vector<std::vector<std::string>> rules = {
            {"OUTPUT", "-p", "tcp", "-d", NetnsStar::HubAddr(), "-m",
             "multiport", "--dports", list, "-j", "DROP"},
            {"INPUT", "-p", "tcp", "-s", NetnsStar::HubAddr(), "-m",
             "multiport", "--sports", list, "-j", "DROP"}};
        for (const auto& rule : rules) {
          std::vector<std::string> argv = {"iptables", "-A"};
          argv.insert(argv.end(), rule.begin(), rule.end());
          absl::Status s = star_->ExecIn(leader, argv);
          if (!s.ok()) {
            ADD_FAILURE() << tag_ << "leader-cut: " << s;
            return false;
          }
        }
        // It must step down (exit 75) once it cannot renew; another leads.
        std::optional<int> code = l.proc->Wait(absl::Seconds(20));
        const absl::Duration exited = absl::Now() - t;
        const int next = AwaitLeader(absl::Seconds(20), leader);
        for (const auto& rule : rules) {
          std::vector<std::string> argv = {"iptables", "-D"};
          argv.insert(argv.end(), rule.begin(), rule.end());
          absl::Status s = star_->ExecIn(leader, argv);
          EXPECT_TRUE(s.ok()) << tag_ << s;
        }
        Say(absl::StrFormat(
            "leader-cut: leader %d cut from etcd; %s; %s", leader,
            code.has_value()
                ? absl::StrFormat("it exited %d after %.2fs", *code,
                                  absl::ToDoubleSeconds(exited))
                : "it did NOT exit in 20 s",
            next < 0 ? "NO other leader"
                     : absl::StrFormat("replica %d leads", next)));
        EXPECT_TRUE(code.has_value())
            << tag_ << "a leader cut from etcd did not step down\n"
            << Logs();
        EXPECT_GE(next, 0) << tag_ << "no leader after leader-cut\n" << Logs();
        Restart(leader);
        return true;
      }
      case Fault::kReplicaRestart: {
        const int i = std::uniform_int_distribution<int>(0, 2)(rng_);
        replicas_[i].proc->Signal(SIGTERM);
        std::optional<int> code = replicas_[i].proc->Wait(absl::Seconds(15));
        Say(absl::StrFormat("replica-restart: SIGTERM of replica %d (%s); %s",
                            i, i == leader ? "the leader" : "a standby",
                            code.has_value() ? absl::StrCat("exited ", *code)
                                             : "did NOT exit in 15 s: killed"));
        EXPECT_TRUE(code.has_value())
            << tag_ << "replica " << i << " ignored SIGTERM\n"
            << Logs();
        Restart(i);
        return true;
      }
    }
    return false;
  }

  uint64_t seed_ = 0;
  absl::Duration length_ = absl::Seconds(60);
  std::mt19937_64 rng_;
  std::string tag_, dir_, starts_, store_starts_, finish_;
  std::string store_prefix_;  // the store job's round's namespace
  std::string no_netns_;      // why there are no namespaces ("" when there are)
  std::unique_ptr<NetnsStar> star_;
  std::unique_ptr<EtcdCluster> etcd_;
  Replica replicas_[kReplicas];
  std::string endpoints_;
  std::vector<std::unique_ptr<Subprocess>> agents_;
  std::vector<std::string> agent_jobs_;  // agents_[i]'s job
  std::vector<std::string> outs_;
  // The Store clients and what they recorded: members, so that TearDown
  // stops their threads before either goes away, however the test ended.
  History history_;
  std::vector<std::unique_ptr<StoreClient>> clients_;
  std::atomic<bool> stop_clients_{false};
  std::vector<std::thread> threads_;
  absl::Time t0_ = absl::Now();
  std::vector<std::pair<absl::Time, absl::Time>> faults_;  // applied when
};

TEST_F(NemesisE2eTest, FaultsOfReplicasAndEtcdRestartNoWorkerAndKeepTheStore) {
  // The jobs first: their rounds form before any fault.
  StartJobs();
  ASSERT_TRUE(WaitUntil([&] { return JobsRunning(); }, absl::Seconds(90),
                        absl::Milliseconds(200)))
      << tag_ << "the jobs did not start\n"
      << AgentOutputs() << Logs();

  {
    std::vector<std::string> f =
        absl::StrSplit(ReadLines(store_starts_).front(), ' ');
    ASSERT_EQ(f.size(), 6u) << tag_ << ReadLines(store_starts_).front();
    store_prefix_ = f[5];
  }
  for (int c = 0; c < kClients; ++c) {
    clients_.push_back(std::make_unique<StoreClient>(
        c, seed_ * 1000003 + c, endpoints_, store_prefix_, &history_));
    std::string why;
    ASSERT_TRUE(clients_.back()->Connect(&why))
        << tag_ << "Store client " << c << ": " << why << "\n"
        << Logs();
  }
  for (auto& c : clients_) {
    threads_.emplace_back(
        [&stop = stop_clients_, client = c.get()] { client->Run(&stop); });
  }

  // The schedule.
  t0_ = absl::Now();
  std::vector<Fault> kinds = {Fault::kLeaderKill, Fault::kLeaderPause,
                              Fault::kEtcdPause, Fault::kReplicaRestart};
  if (star_ != nullptr) kinds.push_back(Fault::kLeaderCut);
  std::map<std::string, int> applied;
  int faults = 0, replica_exits = 0;
  while (absl::Now() - t0_ < length_ && !HasFatalFailure()) {
    absl::SleepFor(absl::Seconds(Uniform(1, 3)));
    const Fault f =
        kinds[std::uniform_int_distribution<size_t>(0, kinds.size() - 1)(rng_)];
    const absl::Time start = absl::Now();
    const bool done = Apply(f);
    faults_.emplace_back(start, absl::Now());
    if (done) {
      ++faults;
      ++applied[FaultName(f)];
    }
    // A replica no fault was aimed at that exited (deposed by an etcd pause,
    // say): said and counted, then started again; what a job saw of it the
    // checks at the end tell.
    for (int i = 0; i < kReplicas; ++i) {
      std::optional<int> code = replicas_[i].proc->Wait(absl::ZeroDuration());
      if (!code.has_value()) continue;
      ++replica_exits;
      Say(absl::StrCat("replica ", i, " exited ", *code, " after ",
                       FaultName(f),
                       " though no fault was aimed at it; "
                       "starting it again"));
      Restart(i);
    }
    // Settled before the next: a leader, every replica up.
    EXPECT_GE(AwaitLeader(absl::Seconds(30)), 0)
        << tag_ << "no leader after " << FaultName(f) << "\n"
        << Logs();
  }
  std::vector<std::string> summary;
  for (const auto& [name, n] : applied)
    summary.push_back(absl::StrCat(name, "=", n));
  Say(absl::StrCat(
      faults, " faults applied: ", absl::StrJoin(summary, " "),
      star_ == nullptr ? " (leader-cut skipped: " + no_netns_ + ")" : ""));
  // A quiet spell, then the clients stop; the final reads follow every op.
  absl::SleepFor(absl::Seconds(2));
  stop_clients_ = true;
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  int64_t lost = 0, acknowledged = 0;
  std::vector<std::string> lost_examples;
  for (const char* key : kKeys) clients_[0]->Read(key);
  for (auto& c : clients_) {
    for (const auto& [key, value] : c->acknowledged_own()) {
      ++acknowledged;
      KvOp r = clients_[0]->Read(key);
      if (r.outcome != KvOp::Outcome::kOk || !r.found || r.result != value) {
        ++lost;
        if (lost_examples.size() < 10) {
          lost_examples.push_back(absl::StrCat(key, "=", value, " read as ",
                                               testing::DescribeOp(r)));
        }
      }
    }
  }
  EXPECT_EQ(lost, 0) << tag_ << lost << " of " << acknowledged
                     << " acknowledged writes to the clients' own keys were "
                        "not read back (a round that ended drops its "
                        "namespace: see the store job's worker starts), e.g.\n"
                     << absl::StrJoin(lost_examples, "\n");

  // The jobs end: every agent exits 0.
  testing::WriteFile(finish_, "done\n");
  for (const std::string& out : outs_) testing::WriteFile(out + "/done", "");
  int agents_failed = 0;
  for (size_t i = 0; i < agents_.size(); ++i) {
    const int code = agents_[i]->WaitOrKill(absl::Seconds(90));
    agents_failed += code != 0;
    EXPECT_EQ(code, 0) << tag_ << "agent " << i << " of " << agent_jobs_[i]
                       << "\n"
                       << Tail(agents_[i]->Output(), 6000) << Logs();
  }

  // No worker restarted: one start per rank in each job, and no in-place
  // recovery (no round change seen by a kept worker).
  const std::vector<std::string> starts = ReadLines(starts_);
  std::map<std::string, int> per_rank;
  for (const std::string& l : starts) {
    std::vector<std::string> f = absl::StrSplit(l, ' ');
    if (f.size() >= 2) ++per_rank[f[1]];
  }
  int restarts = static_cast<int>(starts.size()) - kNodes;
  EXPECT_EQ(starts.size(), static_cast<size_t>(kNodes))
      << tag_ << "a worker of " << kRestartJob << " started again:\n"
      << absl::StrJoin(starts, "\n") << "\n"
      << AgentOutputs() << Logs();
  EXPECT_EQ(per_rank.size(), static_cast<size_t>(kNodes)) << tag_;
  const std::vector<std::string> store_starts = ReadLines(store_starts_);
  restarts += static_cast<int>(store_starts.size()) - 1;
  EXPECT_EQ(store_starts.size(), 1u)
      << tag_ << "the worker of " << kStoreJob << " started again:\n"
      << absl::StrJoin(store_starts, "\n") << "\n"
      << AgentOutputs() << Logs();
  int inplace_procs = 0, recoveries = 0;
  std::string inplace_seen;
  for (const auto& node : InPlaceLogs()) {
    for (const auto& [pid, lines] : node) {
      ++inplace_procs;
      for (const std::string& l : lines) {
        absl::StrAppend(&inplace_seen, pid, ": ", l, "\n");
        if (absl::StrContains(l, "state=changing")) ++recoveries;
      }
    }
  }
  restarts += inplace_procs - kNodes;
  EXPECT_EQ(inplace_procs, kNodes)
      << tag_ << "a worker of " << kInPlaceJob << " started again:\n"
      << inplace_seen << AgentOutputs() << Logs();
  EXPECT_EQ(recoveries, 0) << tag_ << "the in-place job recovered "
                           << recoveries << " time(s) though no node failed:\n"
                           << inplace_seen << AgentOutputs() << Logs();

  // The Store's history, checked twice. GrpcStore repeats a Set, CompareSet
  // or Delete that was in flight when its stream broke on the next leader,
  // and musterd keeps no record of what it applied for whom: such an op may
  // take effect twice while its client records one answer.
  //  - "As sent": for each such write that was in flight across a fault and
  //    took over 100 ms (a repeat waits for a new stream at least; ops take
  //    2-20 ms here otherwise), a first attempt of unknown outcome is added.
  //    This is what the replicas did on the wire; a failure here is theirs
  //    (a fencing bug, a lost write).
  //  - "As answered": the ops as the clients recorded them. A repeat that
  //    answers as if its first attempt had not applied (a Delete saying
  //    "absent" after its own first attempt deleted the key) fails here only:
  //    a wrong answer a worker would see, GrpcStore's.
  const std::vector<KvOp> ops = history_.ops();
  std::vector<KvOp> sent = ops;
  int64_t unknown = 0, not_applied = 0, repeatable = 0;
  for (const KvOp& op : ops) {
    unknown += op.outcome == KvOp::Outcome::kUnknown;
    not_applied += op.outcome == KvOp::Outcome::kNotApplied;
    if (op.kind == KvOp::Kind::kGet || op.kind == KvOp::Kind::kAdd) continue;
    if (op.outcome != KvOp::Outcome::kUnknown &&
        op.returned - op.invoked < absl::Milliseconds(100)) {
      continue;
    }
    if (!InFault(op.invoked, op.returned)) continue;
    KvOp first = op;
    first.outcome = KvOp::Outcome::kUnknown;
    first.found = false;
    first.result.clear();
    sent.push_back(std::move(first));
    ++repeatable;
  }
  // The checker sees what it should: the same history of one key with a
  // read of a value nobody wrote appended must be refused.
  std::vector<KvOp> tampered;
  for (const KvOp& op : ops) {
    if (op.key == kKeys[0]) tampered.push_back(op);
  }
  KvOp bogus;
  bogus.client = kClients;
  bogus.key = kKeys[0];
  bogus.outcome = KvOp::Outcome::kOk;
  bogus.found = true;
  bogus.result = "never-written";
  bogus.invoked = absl::Now();
  bogus.returned = bogus.invoked + absl::Milliseconds(1);
  tampered.push_back(bogus);
  EXPECT_EQ(testing::CheckLinearizable(tampered, absl::Seconds(30)).verdict,
            LinearizabilityResult::Verdict::kNotLinearizable)
      << tag_ << "the checker accepted a read of a value never written";

  const absl::Time checked = absl::Now();
  const LinearizabilityResult lin_sent =
      testing::CheckLinearizable(sent, absl::Seconds(30));
  const LinearizabilityResult lin =
      testing::CheckLinearizable(ops, absl::Seconds(30));
  const double checker_s = absl::ToDoubleSeconds(absl::Now() - checked);
  auto word = [](const LinearizabilityResult& r) {
    return r.verdict == LinearizabilityResult::Verdict::kLinearizable ? "yes"
           : r.verdict == LinearizabilityResult::Verdict::kNotLinearizable
               ? "no"
               : "timeout";
  };
  // etcd's own record of every write to the namespace: a value PUT twice is
  // a repeated Set or CompareSet seen from the other side.
  const EtcdRecord record = ReadEtcdRecord();
  Say(absl::StrFormat(
      "store: %d ops recorded (%d unknown, %d not applied; codes: %s), "
      "%d writes maybe repeated by GrpcStore, %d values written twice in "
      "etcd; linearizable as answered: %s, as sent: %s (%.2fs)",
      ops.size(), unknown, not_applied, history_.Codes(), repeatable,
      record.written_twice, word(lin), word(lin_sent), checker_s));
  {
    std::ofstream out(dir_ + "/history.txt");
    for (size_t i = 0; i < ops.size(); ++i) {
      out << "#" << i << " " << testing::DescribeOp(ops[i], t0_) << "\n";
    }
  }
  // The key's writes in etcd around the explanation's: from the first write
  // of a value the explanation names to its last (values are unique), with
  // a few on either side; the last 40 when it names none.
  auto explain = [&](const LinearizabilityResult& r) {
    auto it = record.events.find(r.key);
    std::vector<std::string> events;
    if (it != record.events.end()) events = it->second;
    size_t from = events.size(), to = 0;
    static const std::regex kValue(R"(\d{13,})");
    std::set<std::string> named;
    for (auto m = std::sregex_iterator(r.explanation.begin(),
                                       r.explanation.end(), kValue);
         m != std::sregex_iterator(); ++m) {
      named.insert("PUT " + m->str());
    }
    for (size_t i = 0; i < events.size(); ++i) {
      if (named.contains(events[i])) {
        from = std::min(from, i);
        to = std::max(to, i);
      }
    }
    if (from > to)
      from = events.size() > 40 ? events.size() - 40 : 0, to = events.size();
    from = from > 3 ? from - 3 : 0;
    to = std::min(events.size(), std::min(to + 4, from + 60));
    return absl::StrCat(
        "at key '", r.key, "':\n", r.explanation, "\nThe history: ", dir_,
        "/history.txt (times from the schedule's start); etcd's record of the "
        "namespace: ",
        dir_,
        "/etcd-store.txt; the key's writes in etcd around the ops above (",
        from, " to ", to, " of ", events.size(), ", oldest first): ",
        absl::StrJoin(events.begin() + from, events.begin() + to, ", "));
  };
  EXPECT_EQ(lin_sent.verdict, LinearizabilityResult::Verdict::kLinearizable)
      << tag_ << "the replicas' Store history is not linearizable ("
      << word(lin_sent)
      << ", with GrpcStore's possible repeats as ops of unknown outcome) "
      << explain(lin_sent);
  if (lin_sent.verdict == LinearizabilityResult::Verdict::kLinearizable) {
    EXPECT_EQ(lin.verdict, LinearizabilityResult::Verdict::kLinearizable)
        << tag_ << "the Store answers as the clients saw them are not "
        << "linearizable (" << word(lin) << "), but would be if GrpcStore's "
        << "repeats counted as ops of unknown outcome: a write in flight at a "
        << "failover was repeated on the next leader (GrpcStore's "
        << "grpc_store_stream.cc StreamDone; musterd does not dedup) and "
        << "answered as if its first attempt had not applied " << explain(lin);
  }
  EXPECT_EQ(not_applied, 0)
      << tag_
      << "ops refused in a namespace nothing drops: " << history_.Codes();

  std::cout << absl::StrFormat(
                   "nemesis-summary seed=%d faults=%d worker_restarts=%d "
                   "inplace_recoveries=%d agents_failed=%d replica_exits=%d "
                   "lost_writes=%d "
                   "ops=%d unknown=%d "
                   "maybe_repeated=%d written_twice=%d linearizable=%s "
                   "linearizable_as_sent=%s checker_s=%.2f cut=%s",
                   seed_, faults, restarts, recoveries, agents_failed,
                   replica_exits, lost, ops.size(), unknown, repeatable,
                   record.written_twice, word(lin), word(lin_sent), checker_s,
                   star_ != nullptr ? "yes" : "skipped")
            << std::endl;
}

}  // namespace
}  // namespace muster
