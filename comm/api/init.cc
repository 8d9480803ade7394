// Communicator's factories: option defaults and validation, the choice of the
// network interface, and the per-communicator key namespace. The store behind
// an init method (env://, tcp://, file://) comes from the StoreFactory its
// scheme names (comm/store/store_factory.h); the backends from comm/select/.
#include "comm/api/init.h"

#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "comm/select/select.h"
#include "comm/src/core.h"
#include "comm/src/environment.h"
#include "comm/src/host.h"
#include "comm/store/store_factory.h"
#include "muster/comm/communicator.h"
#include "muster/common/duration.h"
#include "muster/common/logging.h"
#include "muster/common/net.h"
#include "muster/common/status.h"
#include "muster/platform/env.h"
#include "muster/store/store.h"

namespace muster::comm {
namespace internal {
namespace {

// Applies MUSTER_COMM_TIMEOUT, MUSTER_COMM_BACKEND and MUSTER_GLOO_ALGORITHM,
// and checks the options.
absl::StatusOr<CommOptions> ResolveOptions(CommOptions options) {
  if (const char* text = GetEnv("MUSTER_COMM_TIMEOUT")) {
    // The tree's one duration syntax (common/duration.h): seconds ("30",
    // "0.5") or a duration with units ("500ms", "30m").
    absl::StatusOr<absl::Duration> timeout = ParseDuration(text);
    if (!timeout.ok() || *timeout <= absl::ZeroDuration() ||
        *timeout == absl::InfiniteDuration()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "environment variable MUSTER_COMM_TIMEOUT='", text,
          "' is not a positive duration: expected seconds (30, 0.5) or a "
          "duration (500ms, 30m)"));
    }
    options.timeout = *timeout;
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("CommOptions.timeout must be positive, not ",
                     absl::FormatDuration(options.timeout)));
  }
  if (const char* text = GetEnv("MUSTER_COMM_BACKEND");
      text != nullptr && options.backend == comm::Backend::kAuto) {
    const std::string v = absl::AsciiStrToLower(text);
    if (v == "gloo") {
      options.backend = comm::Backend::kGloo;
    } else if (v == "nccl") {
      options.backend = comm::Backend::kNccl;
    } else if (v != "auto") {
      return absl::InvalidArgumentError(
          absl::StrCat("environment variable MUSTER_COMM_BACKEND='", text,
                       "' is not auto, gloo or nccl"));
    }
  }
  if (const char* text = GetEnv("MUSTER_GLOO_ALGORITHM");
      text != nullptr &&
      options.allreduce_algorithm == AllReduceAlgorithm::kAuto) {
    absl::StatusOr<AllReduceAlgorithm> a = ParseAllReduceAlgorithm(text);
    if (!a.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("environment variable MUSTER_GLOO_ALGORITHM: ",
                       a.status().message()));
    }
    options.allreduce_algorithm = *a;
  }
  const int backend = static_cast<int>(options.backend);
  if (backend < 0 || backend > static_cast<int>(comm::Backend::kNccl)) {
    return absl::InvalidArgumentError(
        absl::StrCat("CommOptions.backend ", backend, " is not a Backend"));
  }
  const int algorithm = static_cast<int>(options.allreduce_algorithm);
  if (algorithm < 0 || algorithm > static_cast<int>(AllReduceAlgorithm::kShm)) {
    return absl::InvalidArgumentError(
        absl::StrCat("CommOptions.allreduce_algorithm ", algorithm,
                     " is not an AllReduceAlgorithm"));
  }
  return options;
}

}  // namespace

absl::StatusOr<AllReduceAlgorithm> ParseAllReduceAlgorithm(
    absl::string_view text) {
  const std::string v = absl::AsciiStrToLower(text);
  for (AllReduceAlgorithm a :
       {AllReduceAlgorithm::kAuto, AllReduceAlgorithm::kRing,
        AllReduceAlgorithm::kRingChunked, AllReduceAlgorithm::kHalvingDoubling,
        AllReduceAlgorithm::kBcube, AllReduceAlgorithm::kRingUnbound,
        AllReduceAlgorithm::kBcubeUnbound, AllReduceAlgorithm::kShm}) {
    if (v == AllReduceAlgorithmName(a)) return a;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'", text,
                   "' is not an allreduce algorithm (auto, ring, ring_chunked, "
                   "halving_doubling, bcube, ring_unbound, bcube_unbound, "
                   "shm)"));
}

absl::StatusOr<InterfaceChoice> SelectInterface(absl::string_view spec,
                                                absl::string_view source) {
  MUSTER_ASSIGN_OR_RETURN(std::vector<NetworkInterface> interfaces,
                          ListNetworkInterfaces());
  absl::string_view rest = absl::StripAsciiWhitespace(spec);
  const bool exclude = absl::ConsumePrefix(&rest, "^");
  const bool exact = absl::ConsumePrefix(&rest, "=");
  std::vector<std::string> names =
      absl::StrSplit(rest, ',', absl::SkipWhitespace());
  auto matches = [&](const std::string& name) {
    for (const std::string& n : names) {
      if (exact ? name == n : absl::StartsWith(name, n)) return true;
    }
    return false;
  };
  // With an exclusion list, a routable interface is preferred over loopback
  // (which is first in the kernel's list): "^docker" should not mean "lo".
  for (int pass = 0; pass < 2; ++pass) {
    for (const NetworkInterface& i : interfaces) {
      if (exclude ? (matches(i.name) || (pass == 0 && i.loopback))
                  : !matches(i.name)) {
        continue;
      }
      return InterfaceChoice{i.name, i.ip, absl::StrCat(source, "=", spec)};
    }
    if (!exclude) break;
  }
  std::vector<std::string> listed;
  for (const NetworkInterface& i : interfaces) {
    listed.push_back(absl::StrCat(i.name, " ", i.ip));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      source, "='", spec,
      "' matches no network interface that is up and has "
      "an IP address (there are: ",
      absl::StrJoin(listed, ", "),
      "); set MUSTER_SOCKET_IFNAME (or CommOptions.ifname) to one of them, "
      "'=NAME' for exactly NAME, '^NAME' to exclude NAME"));
}

namespace {

// Where Gloo binds: an explicit interface, an explicit address, the interface
// named in the environment, then loopback when every rank is on this node,
// else this node's routable address (never 127.0.1.1).
absl::Status ResolveBind(CoreConfig& config) {
  const CommOptions& options = config.options;
  auto use_iface = [&](absl::string_view spec,
                       absl::string_view source) -> absl::Status {
    MUSTER_ASSIGN_OR_RETURN(InterfaceChoice c, SelectInterface(spec, source));
    config.iface = c.name;
    config.bind_ip = c.ip;
    config.bind_reason = c.reason;
    return absl::OkStatus();
  };
  if (!options.ifname.empty()) {
    return use_iface(options.ifname, "CommOptions.ifname");
  }
  if (!options.hostname.empty()) {
    config.hostname = options.hostname;
    MUSTER_ASSIGN_OR_RETURN(config.bind_ip, ResolveHost(options.hostname));
    config.bind_reason = "CommOptions.hostname";
    return absl::OkStatus();
  }
  if (const char* v = GetEnv("MUSTER_SOCKET_IFNAME")) {
    return use_iface(v, "MUSTER_SOCKET_IFNAME");
  }
  if (const char* v = GetEnv("GLOO_SOCKET_IFNAME")) {
    return use_iface(v, "GLOO_SOCKET_IFNAME");
  }
  if (config.all_local) {
    config.hostname = "127.0.0.1";
    config.bind_ip = "127.0.0.1";
    config.bind_reason = "every rank is on this node";
    return absl::OkStatus();
  }
  config.hostname = DefaultAdvertisedAddress();
  config.bind_ip = config.hostname;
  config.bind_reason =
      "the first routable address of this node (set MUSTER_SOCKET_IFNAME to "
      "choose)";
  return absl::OkStatus();
}

void LogBindChoice(const CoreConfig& config) {
  static std::once_flag once;
  const bool routine = config.bind_ip == "127.0.0.1";
  bool first = false;
  std::call_once(once, [&] { first = true; });
  if (first && !routine) {
    MUSTER_LOG(INFO) << "libmuster_comm: rank " << config.rank << " binds "
                     << (config.iface.empty()
                             ? config.bind_ip
                             : absl::StrCat(config.iface, " (", config.bind_ip,
                                            ")"))
                     << " (" << config.bind_reason << ")";
  } else {
    MUSTER_LOG(DEBUG) << "libmuster_comm: rank " << config.rank << " binds "
                      << config.bind_ip << " (" << config.bind_reason << ")";
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(
    std::shared_ptr<store::Store> store, int rank, int world_size,
    const CommOptions& options, bool all_local, const std::string& key_root,
    CoreConfig base) {
  MUSTER_ASSIGN_OR_RETURN(
      std::unique_ptr<CommCore> core,
      ConnectCore(std::move(store), rank, world_size, options, all_local,
                  key_root, std::move(base)));
  return std::make_unique<Communicator>(std::move(core));
}

absl::Status BindControlChannel(const CommOptions& options, bool from_env,
                                CoreConfig& base) {
  std::string dir = options.control_dir;
  if (dir.empty() && from_env) {
    dir = platform::GetEnv("MUSTER_CONTROL_DIR").value_or("");
  }
  if (dir.empty()) return absl::OkStatus();
  MUSTER_ASSIGN_OR_RETURN(std::shared_ptr<ControlChannel> channel,
                          ControlChannel::Open(dir));
  int64_t seq = -1;
  int64_t round = -1;
  if (std::optional<RoundInfo> info = channel->Read(); info.has_value()) {
    seq = info->seq;
    round = info->round;
  } else if (std::optional<std::string> env = platform::GetEnv("MUSTER_ROUND");
             env.has_value()) {
    (void)absl::SimpleAtoi(*env, &round);
  }
  base.round = std::make_shared<RoundState>(std::move(channel), seq, round);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CommCore>> ConnectCore(
    std::shared_ptr<store::Store> store, int rank, int world_size,
    const CommOptions& options, bool all_local, const std::string& key_root,
    CoreConfig base, std::unique_ptr<Backend> previous_device) {
  if (store == nullptr) {
    return absl::InvalidArgumentError("Communicator::Create: store is null");
  }
  if (world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Communicator::Create: world_size ", world_size,
                     " must be at least 1"));
  }
  if (rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("Communicator::Create: rank ", rank, " is outside [0, ",
                     world_size, ")"));
  }
  CoreConfig config = std::move(base);
  if (config.round != nullptr) {
    config.round_generation = config.round->generation();
    config.formed_round = config.round->round();
  }
  MUSTER_ASSIGN_OR_RETURN(config.options, ResolveOptions(options));
  config.rank = rank;
  config.world_size = world_size;
  config.all_local = all_local;
  const std::string who = absl::StrCat("rank ", rank, "/", world_size);
  MUSTER_RETURN_IF_ERROR(Annotate(ResolveBind(config), who));
  LogBindChoice(config);

  // The n-th communicator a rank creates under key_root is communicator n:
  // every rank counts its own creations, so that re-creating one never meets
  // the keys of the last.
  absl::StatusOr<int64_t> generation =
      store->Add(absl::StrCat(key_root, "generation/rank", rank), 1);
  if (!generation.ok()) {
    return Annotate(generation.status(),
                    absl::StrCat(who, ": counting communicators in the store"));
  }
  config.key_prefix = absl::StrCat(key_root, *generation, "/");
  config.store = std::move(store);
  MUSTER_LOG(DEBUG) << who << ": joining communicator " << config.key_prefix
                    << " (timeout "
                    << absl::FormatDuration(config.options.timeout) << ")";
  return CommCore::Connect(std::move(config), ConnectBackends,
                           std::move(previous_device));
}

}  // namespace internal

absl::string_view AllReduceAlgorithmName(AllReduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllReduceAlgorithm::kAuto:
      return "auto";
    case AllReduceAlgorithm::kRing:
      return "ring";
    case AllReduceAlgorithm::kRingChunked:
      return "ring_chunked";
    case AllReduceAlgorithm::kHalvingDoubling:
      return "halving_doubling";
    case AllReduceAlgorithm::kBcube:
      return "bcube";
    case AllReduceAlgorithm::kRingUnbound:
      return "ring_unbound";
    case AllReduceAlgorithm::kBcubeUnbound:
      return "bcube_unbound";
    case AllReduceAlgorithm::kShm:
      return "shm";
  }
  return "unknown";
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Create(
    std::shared_ptr<store::Store> store, int rank, int world_size,
    CommOptions options) {
  // Ranks that share an in-process store are threads of this process, and a
  // file store is one machine's: loopback reaches them all.
  const bool all_local = (store != nullptr && store->HostLocal()) ||
                         internal::EnvironmentSaysAllLocal(world_size);
  internal::CoreConfig base;
  MUSTER_RETURN_IF_ERROR(
      internal::BindControlChannel(options, /*from_env=*/false, base));
  return internal::CreateCommunicator(std::move(store), rank, world_size,
                                      options, all_local, internal::kKeyRoot,
                                      std::move(base));
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::FromEnvironment(
    CommOptions options) {
  internal::CoreConfig base;
  MUSTER_RETURN_IF_ERROR(
      internal::BindControlChannel(options, /*from_env=*/true, base));
  MUSTER_ASSIGN_OR_RETURN(internal::JobStore job,
                          internal::OpenLauncherStore());
  return internal::CreateCommunicator(std::move(job.store), job.rank,
                                      job.world_size, options, job.all_local,
                                      internal::kKeyRoot, std::move(base));
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Init(
    absl::string_view init_method, int rank, int world_size,
    CommOptions options) {
  absl::string_view method = absl::StripAsciiWhitespace(init_method);
  if (method.empty()) method = "env://";
  MUSTER_ASSIGN_OR_RETURN(CommOptions resolved,
                          internal::ResolveOptions(options));
  // "scheme://address": the scheme picks the store (store_factory.h).
  const size_t colon = method.find("://");
  const internal::StoreFactory* factory =
      colon == absl::string_view::npos
          ? nullptr
          : internal::FindStoreFactory(method.substr(0, colon));
  if (factory == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown init method '", init_method, "': use ",
                     internal::StoreFactoryUsages()));
  }
  internal::StoreRequest request;
  request.address = std::string(method.substr(colon + 3));
  request.rank = rank;
  request.world_size = world_size;
  request.timeout = resolved.timeout;
  internal::CoreConfig base;
  MUSTER_RETURN_IF_ERROR(
      internal::BindControlChannel(options, /*from_env=*/true, base));
  MUSTER_ASSIGN_OR_RETURN(internal::JobStore job, factory->Open(request));
  return internal::CreateCommunicator(std::move(job.store), job.rank,
                                      job.world_size, options, job.all_local,
                                      internal::kKeyRoot, std::move(base));
}

}  // namespace muster::comm
