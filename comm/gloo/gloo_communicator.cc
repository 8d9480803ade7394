#include "comm/gloo/gloo_communicator.h"

#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "comm/gloo/gloo_status.h"
#include "comm/gloo/reduce.h"
#include "comm/store/gloo_store.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/rendezvous/context.h"
#include "gloo/transport/tcp/address.h"
#include "gloo/transport/tcp/device.h"
#include "muster/common/logging.h"
#include "muster/common/status.h"

namespace muster::comm::internal {
namespace {

// Gloo multiplies its timeout by 5 in places and adds it to clock readings:
// keep it far from overflow. Nobody waits 30 days for a collective.
constexpr absl::Duration kMaxGlooTimeout = absl::Hours(24 * 30);

std::chrono::milliseconds ToGlooTimeout(absl::Duration timeout) {
  return absl::ToChronoMilliseconds(std::min(timeout, kMaxGlooTimeout));
}

// Gloo writes to its sockets without MSG_NOSIGNAL, so a peer that dies
// mid-collective would kill this process with SIGPIPE (exit 141, no message)
// instead of failing the collective with ABORTED. Python ignores SIGPIPE at
// start-up, which is why PyTorch's Gloo does not meet this; C++ programs need
// the same. A handler the program installed itself is left alone.
void IgnoreSigpipeUnlessHandled() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current;
    if (sigaction(SIGPIPE, nullptr, &current) != 0) return;
    if (!(current.sa_flags & SA_SIGINFO) && current.sa_handler == SIG_DFL) {
      signal(SIGPIPE, SIG_IGN);
      MUSTER_LOG(DEBUG) << "SIGPIPE is now ignored: a lost peer fails a "
                           "collective instead of killing this process";
    }
  });
}

// Gloo 0.5.0 dereferences a null pointer (SIGSEGV) when asked for an interface
// that does not exist or has no IP address, so the name is checked here first.
absl::Status CheckInterface(const std::string& name) {
  struct ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    return absl::UnavailableError(
        absl::StrCat("getifaddrs: ", std::strerror(errno)));
  }
  std::set<std::string> with_ip;
  bool exists = false;
  for (struct ifaddrs* ifa = list; ifa != nullptr; ifa = ifa->ifa_next) {
    if (ifa->ifa_name == nullptr) continue;
    const bool ip =
        ifa->ifa_addr != nullptr && (ifa->ifa_addr->sa_family == AF_INET ||
                                     ifa->ifa_addr->sa_family == AF_INET6);
    if (ip) with_ip.insert(ifa->ifa_name);
    if (name == ifa->ifa_name) exists = true;
  }
  freeifaddrs(list);
  if (with_ip.count(name) > 0) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      exists ? "network interface '" : "there is no network interface '", name,
      exists ? "' has no IP address" : "'",
      " (interfaces with an address: ", absl::StrJoin(with_ip, ", "),
      "); set MUSTER_SOCKET_IFNAME (or CommOptions.ifname) to one of them"));
}

// Gloo 0.5.0 reads an uninitialized pointer (SIGSEGV) when getaddrinfo fails
// for its hostname, so the name is resolved here first.
absl::Status CheckHostname(const std::string& hostname) {
  struct addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  struct addrinfo* result = nullptr;
  const int rv = getaddrinfo(hostname.c_str(), nullptr, &hints, &result);
  if (rv != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot resolve '", hostname, "' (", gai_strerror(rv),
                     "); set CommOptions.hostname to an address of this "
                     "machine, or MUSTER_SOCKET_IFNAME to an interface"));
  }
  freeaddrinfo(result);
  return absl::OkStatus();
}

// Exposes Gloo's parsing of the address lists that connectFullMesh publishes in
// the store.
class PeerContext : public ::gloo::rendezvous::Context {
 public:
  using ::gloo::rendezvous::Context::Context;
  using ::gloo::rendezvous::Context::extractAddress;
};

// The listening address of each peer as Gloo prints it ("[10.0.0.2]:41234"),
// indexed by rank; empty where unknown. Best effort: relies on
// connectFullMesh's key layout (the key "<rank>" holds that rank's addresses
// for each of its peers), and names nobody if it ever changes.
std::vector<std::string> PeerAddresses(rendezvous::Store& store,
                                       const std::string& key_prefix,
                                       PeerContext& context) {
  std::vector<std::string> peers(context.size);
  for (int r = 0; r < context.size; ++r) {
    if (r == context.rank) continue;
    absl::StatusOr<std::string> value =
        store.Get(absl::StrCat(key_prefix, r), absl::ZeroDuration());
    if (!value.ok() || value->empty()) continue;
    std::vector<char> all(value->begin(), value->end());
    absl::Status parsed =
        CallGloo(GlooStage::kConnect, "parsing a peer address", {}, [&] {
          peers[r] =
              ::gloo::transport::tcp::Address(context.extractAddress(all, r))
                  .str();
        });
    if (!parsed.ok()) peers[r].clear();
  }
  return peers;
}

// After a join that timed out: which ranks never published their address.
absl::Status DescribeMissingPeers(const absl::Status& status,
                                  rendezvous::Store& store,
                                  const std::string& key_prefix, int rank,
                                  int world_size, absl::Duration timeout) {
  auto published = [&](int r) {
    return store.Get(absl::StrCat(key_prefix, r), absl::ZeroDuration()).ok();
  };
  // This rank's own key tells whether Gloo still names its keys "<rank>".
  if (!published(rank)) return status;
  std::vector<int> missing;
  for (int r = 0; r < world_size; ++r) {
    if (r != rank && !published(r)) missing.push_back(r);
  }
  if (missing.empty()) return status;
  const std::string who = absl::StrCat("rank ", rank, "/", world_size, ": ");
  absl::string_view detail = status.message();
  absl::ConsumePrefix(&detail, who);
  return absl::DeadlineExceededError(absl::StrCat(
      who, missing.size() == 1 ? "rank " : "ranks ",
      absl::StrJoin(missing, ", "), " did not join within ",
      absl::FormatDuration(timeout),
      " (is every rank running, with the same WORLD_SIZE? MUSTER_COMM_TIMEOUT "
      "raises the limit); ",
      detail));
}

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(int rank, int world_size,
                   std::shared_ptr<::gloo::rendezvous::Context> context,
                   std::vector<std::string> peer_addresses)
      : rank_(rank),
        world_size_(world_size),
        who_(absl::StrCat("rank ", rank, "/", world_size)),
        peer_addresses_(std::move(peer_addresses)),
        context_(std::move(context)) {}

  ~GlooCommunicator() override { Shutdown(); }

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }

  absl::Status AllReduce(void* data, size_t count, DataType dtype,
                         ReduceOp op) override {
    MUSTER_RETURN_IF_ERROR(
        CheckBuffer("AllReduce", "data", data, count, dtype));
    MUSTER_ASSIGN_OR_RETURN(ReduceFn reduce, ReduceFunction(dtype, op));
    absl::MutexLock lock(&mu_);
    MUSTER_RETURN_IF_ERROR(CheckUsable("AllReduce"));
    if (count == 0 || world_size_ == 1) return absl::OkStatus();
    return Run(
        [&] {
          return absl::StrCat("AllReduce(", count, " x ", DataTypeName(dtype),
                              ", ", ReduceOpName(op), ")");
        },
        [&] {
          return VisitDataType(dtype, [&](auto zero) {
            using T = decltype(zero);
            ::gloo::AllreduceOptions opts(context_);
            opts.setOutput(static_cast<T*>(data), count);
            opts.setReduceFunction(reduce);
            // First cut: the bandwidth-optimal ring (reduce-scatter then
            // allgather) for every size. Each element is reduced on one rank
            // and then copied, so all ranks end with the same bits. Choosing by
            // size (bcube for small messages) is a later tuning.
            opts.setAlgorithm(::gloo::AllreduceOptions::Algorithm::RING);
            ::gloo::allreduce(opts);
            return absl::OkStatus();
          });
        });
  }

  absl::Status Broadcast(void* data, size_t count, DataType dtype,
                         int root) override {
    MUSTER_RETURN_IF_ERROR(
        CheckBuffer("Broadcast", "data", data, count, dtype));
    if (root < 0 || root >= world_size_) {
      return absl::InvalidArgumentError(absl::StrCat(who_, ": Broadcast: root ",
                                                     root, " is outside [0, ",
                                                     world_size_, ")"));
    }
    absl::MutexLock lock(&mu_);
    MUSTER_RETURN_IF_ERROR(CheckUsable("Broadcast"));
    if (count == 0 || world_size_ == 1) return absl::OkStatus();
    return Run(
        [&] {
          return absl::StrCat("Broadcast(", count, " x ", DataTypeName(dtype),
                              ", root ", root, ")");
        },
        [&] {
          return VisitDataType(dtype, [&](auto zero) {
            using T = decltype(zero);
            ::gloo::BroadcastOptions opts(context_);
            // In place: the root's output buffer is also its input.
            opts.setOutput(static_cast<T*>(data), count);
            opts.setRoot(root);
            ::gloo::broadcast(opts);
            return absl::OkStatus();
          });
        });
  }

  absl::Status AllGather(const void* input, void* output, size_t count,
                         DataType dtype) override {
    MUSTER_RETURN_IF_ERROR(
        CheckBuffer("AllGather", "input", input, count, dtype));
    if (count >
        std::numeric_limits<size_t>::max() / static_cast<size_t>(world_size_)) {
      return absl::InvalidArgumentError(absl::StrCat(
          who_, ": AllGather: count ", count, " x world size overflows"));
    }
    MUSTER_RETURN_IF_ERROR(
        CheckBuffer("AllGather", "output", output, count * world_size_, dtype));
    const size_t bytes = count * DataTypeSize(dtype);
    const auto in = reinterpret_cast<uintptr_t>(input);
    const auto out = reinterpret_cast<uintptr_t>(output);
    const uintptr_t slot = out + static_cast<uintptr_t>(rank_) * bytes;
    const bool in_place = bytes > 0 && in == slot;
    if (bytes > 0 && !in_place && in < out + bytes * world_size_ &&
        out < in + bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(who_,
                       ": AllGather: input overlaps output other than at this "
                       "rank's slot (output + ",
                       rank_, " * count)"));
    }
    absl::MutexLock lock(&mu_);
    MUSTER_RETURN_IF_ERROR(CheckUsable("AllGather"));
    if (count == 0) return absl::OkStatus();
    if (world_size_ == 1) {
      if (!in_place) std::memcpy(output, input, bytes);
      return absl::OkStatus();
    }
    return Run(
        [&] {
          return absl::StrCat("AllGather(", count, " x ", DataTypeName(dtype),
                              ")");
        },
        [&] {
          return VisitDataType(dtype, [&](auto zero) {
            using T = decltype(zero);
            ::gloo::AllgatherOptions opts(context_);
            // Without an input Gloo gathers in place, from this rank's slot.
            if (!in_place) {
              // Gloo only reads the input; its API takes a non-const pointer.
              opts.setInput(const_cast<T*>(static_cast<const T*>(input)),
                            count);
            }
            opts.setOutput(static_cast<T*>(output), count * world_size_);
            ::gloo::allgather(opts);
            return absl::OkStatus();
          });
        });
  }

  absl::Status Barrier() override {
    absl::MutexLock lock(&mu_);
    MUSTER_RETURN_IF_ERROR(CheckUsable("Barrier"));
    if (world_size_ == 1) return absl::OkStatus();
    return Run([] { return std::string("Barrier"); },
               [&] {
                 ::gloo::BarrierOptions opts(context_);
                 ::gloo::barrier(opts);
                 return absl::OkStatus();
               });
  }

  void Shutdown() override {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
    if (context_ == nullptr) return;
    absl::Status closed =
        CallGloo(GlooStage::kCollective, "closing connections", {},
                 [&] { context_->closeConnections(); });
    if (!closed.ok()) MUSTER_LOG(DEBUG) << who_ << ": " << closed;
    context_.reset();
  }

 private:
  absl::Status CheckBuffer(absl::string_view op, absl::string_view name,
                           const void* ptr, size_t count,
                           DataType dtype) const {
    const size_t size = DataTypeSize(dtype);
    if (size == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          who_, ": ", op, ": unknown DataType ", static_cast<int>(dtype)));
    }
    if (ptr == nullptr && count > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          who_, ": ", op, ": ", name, " is null but count is ", count));
    }
    if (count > std::numeric_limits<size_t>::max() / size) {
      return absl::InvalidArgumentError(
          absl::StrCat(who_, ": ", op, ": count ", count, " is too large"));
    }
    return absl::OkStatus();
  }

  absl::Status CheckUsable(absl::string_view op) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (shut_down_) {
      return absl::FailedPreconditionError(
          absl::StrCat(who_, ": ", op, " called after Shutdown()"));
    }
    if (!broken_.ok()) {
      return absl::AbortedError(absl::StrCat(
          who_, ": ", op,
          ": the communicator is unusable after an earlier failure: ",
          broken_.message()));
    }
    return absl::OkStatus();
  }

  // Runs one collective; any failure breaks the communicator (Gloo closes the
  // pair it failed on, and the ranks no longer agree on where they are in the
  // sequence of collectives). `describe` names the operation; it is only called
  // on failure.
  template <typename Describe, typename Fn>
  absl::Status Run(Describe&& describe, Fn&& fn)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::Status status;
    try {
      status = fn();
    } catch (...) {
      status = StatusFromCurrentException(GlooStage::kCollective,
                                          absl::StrCat(who_, ": ", describe()),
                                          peer_addresses_);
    }
    if (!status.ok()) broken_ = status;
    return status;
  }

  const int rank_;
  const int world_size_;
  const std::string who_;  // "rank 2/4", the prefix of every message.
  const std::vector<std::string> peer_addresses_;

  // Serializes collectives and Shutdown (see the class comment in
  // communicator.h: this keeps misuse memory-safe, it does not make concurrent
  // collectives meaningful).
  absl::Mutex mu_;
  std::shared_ptr<::gloo::rendezvous::Context> context_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  // The first failure of a collective.
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> ConnectGloo(
    std::shared_ptr<rendezvous::Store> store, std::string key_prefix, int rank,
    int world_size, const GlooConfig& config) {
  const std::string who = absl::StrCat("rank ", rank, "/", world_size);
  IgnoreSigpipeUnlessHandled();
  ::gloo::transport::tcp::attr attr;
  std::string where;
  if (!config.iface.empty()) {
    MUSTER_RETURN_IF_ERROR(Annotate(CheckInterface(config.iface), who));
    attr.iface = config.iface;
    where = absl::StrCat("interface ", config.iface);
  } else {
    MUSTER_RETURN_IF_ERROR(Annotate(CheckHostname(config.hostname), who));
    attr.hostname = config.hostname;
    where = absl::StrCat("address ", config.hostname);
  }
  std::shared_ptr<::gloo::transport::Device> device;
  MUSTER_RETURN_IF_ERROR(
      CallGloo(GlooStage::kDevice,
               absl::StrCat(who, ": creating Gloo's TCP device on ", where), {},
               [&] { device = ::gloo::transport::tcp::CreateDevice(attr); }));
  MUSTER_LOG(DEBUG) << who << ": Gloo binds " << where << " (" << config.reason
                    << "): " << device->str();

  auto context = std::make_shared<PeerContext>(rank, world_size);
  context->setTimeout(ToGlooTimeout(config.timeout));
  GlooStore gloo_store(store, key_prefix, config.timeout);
  absl::Status connected = CallGloo(
      GlooStage::kConnect, absl::StrCat(who, ": connecting to its peers"), {},
      [&] { context->connectFullMesh(gloo_store, device); });
  if (!connected.ok()) {
    if (absl::IsDeadlineExceeded(connected)) {
      return DescribeMissingPeers(connected, *store, key_prefix, rank,
                                  world_size, config.timeout);
    }
    return connected;
  }
  std::vector<std::string> peers = PeerAddresses(*store, key_prefix, *context);
  auto comm = std::make_unique<GlooCommunicator>(
      rank, world_size, std::move(context), std::move(peers));
  // connectFullMesh can return on one rank while a peer is still finishing its
  // handshake; a rank that then closed at once would reset the peer's
  // connection mid-connect. One barrier makes Create return only when every
  // rank is connected.
  absl::Status ready = comm->Barrier();
  if (!ready.ok()) {
    return Annotate(ready, "confirming that every rank is connected");
  }
  MUSTER_LOG(DEBUG) << who << ": connected to " << world_size - 1 << " peers";
  return std::unique_ptr<Communicator>(std::move(comm));
}

}  // namespace muster::comm::internal
