#include "muster/rendezvous/local_rendezvous.h"

#include <grpcpp/grpcpp.h>

#include <deque>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "muster/common/logging.h"
#include "muster/platform/clock.h"
#include "muster/store/store_service.h"
#include "rendezvous/src/client/session_inbox.h"
#include "rendezvous/src/core/tick_loop.h"
#include "rendezvous/src/local/local_store_server.h"

namespace muster::rendezvous {
namespace {

// An agent in the same process cannot be lost while the process lives: its
// session needs no heartbeats.
constexpr int64_t kNoHeartbeatTimeoutMs = int64_t{10} * 365 * 24 * 3600 * 1000;

// The Coordinator's messages for one session, queued for Next.
class LocalChannel final : public AgentChannel {
 public:
  void Send(const v1::ServerMessage& msg) override {
    absl::MutexLock lock(&mu_);
    if (!inbox_.ended()) inbox_.Push(msg);
  }

  void Close(const absl::Status& status) override {
    End(status.ok() ? absl::OutOfRangeError(
                          "the in-process rendezvous ended the session")
                    : status);
  }

  // Ends the session as Next will report it (after the queued messages);
  // the first end wins.
  void End(absl::Status status) {
    absl::MutexLock lock(&mu_);
    inbox_.End(std::move(status));
  }

  absl::StatusOr<v1::ServerMessage> Next(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(this, &LocalChannel::HasNext),
                         timeout);
    if (auto next = inbox_.Take()) return *std::move(next);
    return absl::DeadlineExceededError("no message from the rendezvous yet");
  }

  bool ended() const {
    absl::MutexLock lock(&mu_);
    return inbox_.ended();
  }

 private:
  bool HasNext() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return inbox_.HasNext();
  }

  mutable absl::Mutex mu_;
  SessionInbox inbox_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

class LocalRendezvous::Impl {
 public:
  explicit Impl(LocalRendezvousOptions options)
      : options_(std::move(options)),
        coordinator_(WithStoreCleanup(options_.coordinator, &store_),
                     Clock::Real()),
        store_service_(&store_) {}

  ~Impl() { Shutdown(absl::Seconds(1)); }

  absl::Status Start() {
    if (options_.tick_interval <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError("tick_interval must be positive");
    }
    auto store_server =
        LocalStoreServer::Start([this](grpc::ServerBuilder& builder) {
          // As RendezvousServer: clients ping every 10 s.
          builder.AddChannelArgument(
              GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5'000);
          builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
          builder.RegisterService(store_service_.service());
        });
    if (!store_server.ok()) {
      return absl::UnavailableError(absl::StrCat(
          store_server.status().message(), " (the workers' store)"));
    }
    store_server_ = *std::move(store_server);
    tick_thread_ = std::thread([this] { TickLoop(); });
    return absl::OkStatus();
  }

  class Client;
  std::unique_ptr<RendezvousClient> NewClient();

  std::string store_endpoint() const {
    return absl::StrCat("127.0.0.1:", store_server_->port());
  }

  bool store_started() const { return store_server_->started(); }

  void Shutdown(absl::Duration grace) {
    std::vector<std::shared_ptr<LocalChannel>> channels;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      stopping_ = true;
      channels.swap(channels_);
    }
    const absl::Time deadline = absl::Now() + grace;
    const absl::Status going =
        absl::UnavailableError("the in-process rendezvous is shutting down");
    for (auto& channel : channels) channel->End(going);
    store_service_.Shutdown(going);
    if (tick_thread_.joinable()) tick_thread_.join();
    if (store_server_ != nullptr) store_server_->Shutdown(deadline);
  }

  Coordinator& coordinator() { return coordinator_; }
  store::KvStore& store() { return store_; }

  // One session's events reach the Coordinator in order.
  absl::Mutex& events_mu() { return events_mu_; }

  ConnectionId NextConnection(std::shared_ptr<LocalChannel> channel) {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      channel->End(
          absl::UnavailableError("the in-process rendezvous is shutting down"));
    } else {
      channels_.push_back(std::move(channel));
    }
    return next_connection_++;
  }

 private:
  // As RendezvousServer: a round's end drops its store namespace.
  static CoordinatorOptions WithStoreCleanup(CoordinatorOptions options,
                                             store::KvStore* store) {
    options.on_round_end = [store, user = std::move(options.on_round_end)](
                               const std::string& store_prefix) {
      if (absl::EndsWith(store_prefix, "/")) {
        store->DropNamespacesWithPrefix(store_prefix);
      } else {
        store->DropNamespace(store_prefix);
      }
      if (user) user(store_prefix);
    };
    return options;
  }

  void TickLoop() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);  // RunCoordinatorTicks releases it to tick
    RunCoordinatorTicks(coordinator_, mu_, stopping_, options_.tick_interval);
  }

  const LocalRendezvousOptions options_;
  store::KvStore store_;
  Coordinator coordinator_;
  store::StoreService store_service_;
  // Where the workers' Store connections come in; set by Start.
  std::unique_ptr<LocalStoreServer> store_server_;
  std::thread tick_thread_;
  absl::Mutex events_mu_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::shared_ptr<LocalChannel>> channels_ ABSL_GUARDED_BY(mu_);
  ConnectionId next_connection_ ABSL_GUARDED_BY(mu_) = 1;
};

class LocalRendezvous::Impl::Client final : public RendezvousClient {
 public:
  explicit Client(Impl* impl)
      : impl_(impl),
        channel_(std::make_shared<LocalChannel>()),
        id_(impl->NextConnection(channel_)) {}

  ~Client() override { Close(""); }

  absl::Status Start(const v1::Join& join) override {
    v1::Join j = join;
    j.set_heartbeat_timeout_ms(kNoHeartbeatTimeoutMs);
    absl::MutexLock lock(&impl_->events_mu());
    if (channel_->ended()) {
      return absl::UnavailableError(
          "the in-process rendezvous is shutting down");
    }
    absl::Status refused = impl_->coordinator().OnJoin(id_, j, channel_);
    if (!refused.ok()) return refused;
    joined_ = true;
    return absl::OkStatus();
  }

  absl::Status Send(const v1::AgentMessage& msg) override {
    absl::MutexLock lock(&impl_->events_mu());
    if (closed_ || channel_->ended()) {
      return absl::UnavailableError("the session has ended");
    }
    Coordinator& c = impl_->coordinator();
    switch (msg.kind_case()) {
      case v1::AgentMessage::kJoin: {
        v1::Join j = msg.join();
        j.set_heartbeat_timeout_ms(kNoHeartbeatTimeoutMs);
        absl::Status refused = c.OnJoin(id_, j, channel_);
        if (!refused.ok()) {
          channel_->End(refused);
          return absl::OkStatus();  // Next reports it, as over gRPC.
        }
        joined_ = true;
        break;
      }
      case v1::AgentMessage::kHeartbeat:
        if (joined_) c.OnHeartbeat(id_, msg.heartbeat());
        break;
      case v1::AgentMessage::kWorkersFailed:
        if (joined_) c.OnWorkersFailed(id_, msg.workers_failed());
        break;
      case v1::AgentMessage::kWorkersSucceeded:
        if (joined_) c.OnWorkersSucceeded(id_, msg.workers_succeeded());
        break;
      case v1::AgentMessage::kLeave:
        if (joined_) c.OnLeave(id_, msg.leave());
        break;
      case v1::AgentMessage::kPreflightFailed:
        if (joined_) c.OnPreflightFailed(id_, msg.preflight_failed());
        break;
      case v1::AgentMessage::kStacksReport:  // no `muster stacks` in process
        break;
      case v1::AgentMessage::KIND_NOT_SET:
        break;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<v1::ServerMessage> Next(absl::Duration timeout) override {
    return channel_->Next(timeout);
  }

  void SetRound(int64_t) override {}

  void CloseWith(const v1::Leave& leave) override {
    absl::MutexLock lock(&impl_->events_mu());
    if (closed_) return;
    closed_ = true;
    if (joined_) {
      if (!leave.reason().empty()) {
        impl_->coordinator().OnLeave(id_, leave);
      }
      impl_->coordinator().OnDisconnect(id_);
    }
    channel_->End(absl::CancelledError("the session was closed by this agent"));
  }

 private:
  Impl* const impl_;
  const std::shared_ptr<LocalChannel> channel_;
  const ConnectionId id_;
  // Under impl_->events_mu().
  bool joined_ = false;
  bool closed_ = false;
};

std::unique_ptr<RendezvousClient> LocalRendezvous::Impl::NewClient() {
  return std::make_unique<Client>(this);
}

absl::StatusOr<std::unique_ptr<LocalRendezvous>> LocalRendezvous::Start(
    LocalRendezvousOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  absl::Status started = impl->Start();
  if (!started.ok()) return started;
  return std::unique_ptr<LocalRendezvous>(new LocalRendezvous(std::move(impl)));
}

LocalRendezvous::LocalRendezvous(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
LocalRendezvous::~LocalRendezvous() = default;

std::unique_ptr<RendezvousClient> LocalRendezvous::NewClient() {
  return impl_->NewClient();
}
std::string LocalRendezvous::store_endpoint() const {
  return impl_->store_endpoint();
}
bool LocalRendezvous::store_started() const { return impl_->store_started(); }
void LocalRendezvous::Shutdown(absl::Duration grace) { impl_->Shutdown(grace); }
Coordinator& LocalRendezvous::coordinator() { return impl_->coordinator(); }
store::KvStore& LocalRendezvous::store() { return impl_->store(); }

}  // namespace muster::rendezvous
