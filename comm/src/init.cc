// Communicator's factories: the environment contract with the launcher, the
// init methods (env://, tcp://, file://), option defaults and validation, the
// choice of the network interface, and the per-communicator key namespace.
#include "comm/src/init.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdlib>
#include <cstring>
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
#include "comm/src/core.h"
#include "comm/store/file_store.h"
#include "muster/comm/communicator.h"
#include "muster/common/logging.h"
#include "muster/common/net.h"
#include "muster/common/status.h"
#include "muster/rendezvous/grpc_store.h"
#include "muster/rendezvous/in_memory_store.h"
#include "muster/rendezvous/server.h"
#include "muster/rendezvous/store.h"

namespace muster::comm {
namespace internal {
namespace {

// Every key of libmuster_comm in the round's store lives under this prefix.
constexpr char kKeyRoot[] = "muster_comm/";
// The namespace of the store rank 0 serves for tcp:// and env:// without the
// launcher.
constexpr char kServedPrefix[] = "muster_comm_init";

// The value of environment variable `name`, or nullptr when unset or empty.
const char* GetEnv(const char* name) {
  const char* value = std::getenv(name);
  return (value != nullptr && value[0] != '\0') ? value : nullptr;
}

absl::Status MissingVariable(absl::string_view name, absl::string_view how) {
  return absl::FailedPreconditionError(absl::StrCat(
      "environment variable ", name, " is not set: ", how,
      "; run the program under muster (for example `muster "
      "--nproc-per-node=2 PROGRAM`), or call Communicator::Create with a "
      "store"));
}

constexpr char kLauncherHow[] =
    "Communicator::FromEnvironment joins the job through the launcher's "
    "environment";

absl::StatusOr<std::string> RequiredString(const char* name,
                                           absl::string_view how) {
  const char* value = GetEnv(name);
  if (value == nullptr) return MissingVariable(name, how);
  return std::string(value);
}

absl::StatusOr<int> RequiredInt(const char* name, absl::string_view how) {
  const char* value = GetEnv(name);
  if (value == nullptr) return MissingVariable(name, how);
  int result = 0;
  if (!absl::SimpleAtoi(value, &result)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "environment variable ", name, "='", value, "' is not an integer"));
  }
  return result;
}

// Applies MUSTER_COMM_TIMEOUT, MUSTER_COMM_BACKEND and MUSTER_GLOO_ALGORITHM,
// and checks the options.
absl::StatusOr<CommOptions> ResolveOptions(CommOptions options) {
  if (const char* text = GetEnv("MUSTER_COMM_TIMEOUT")) {
    double seconds = 0;
    if (!absl::SimpleAtod(text, &seconds) || !(seconds > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("environment variable MUSTER_COMM_TIMEOUT='", text,
                       "' is not a positive number of seconds"));
    }
    options.timeout = absl::Seconds(seconds);
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
  if (algorithm < 0 ||
      algorithm > static_cast<int>(AllReduceAlgorithm::kBcubeUnbound)) {
    return absl::InvalidArgumentError(
        absl::StrCat("CommOptions.allreduce_algorithm ", algorithm,
                     " is not an AllReduceAlgorithm"));
  }
  return options;
}

struct Interface {
  std::string name;
  std::string ip;
  bool loopback = false;
};

// Interfaces that are up and have an IP address, in the kernel's order, each
// with its first IPv4 address (else its first IPv6 one).
absl::StatusOr<std::vector<Interface>> ListInterfaces() {
  struct ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    return absl::UnavailableError(
        absl::StrCat("getifaddrs: ", std::strerror(errno)));
  }
  std::vector<Interface> out;
  auto find = [&](const std::string& name) -> Interface* {
    for (Interface& i : out) {
      if (i.name == name) return &i;
    }
    return nullptr;
  };
  for (int pass = 0; pass < 2; ++pass) {  // IPv4 first, then IPv6.
    const int family = pass == 0 ? AF_INET : AF_INET6;
    for (struct ifaddrs* ifa = list; ifa != nullptr; ifa = ifa->ifa_next) {
      if (ifa->ifa_name == nullptr || ifa->ifa_addr == nullptr ||
          ifa->ifa_addr->sa_family != family || !(ifa->ifa_flags & IFF_UP)) {
        continue;
      }
      if (find(ifa->ifa_name) != nullptr) continue;
      char host[NI_MAXHOST];
      const socklen_t len =
          family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
      if (getnameinfo(ifa->ifa_addr, len, host, sizeof(host), nullptr, 0,
                      NI_NUMERICHOST) != 0) {
        continue;
      }
      std::string ip = host;
      ip = ip.substr(0, ip.find('%'));  // Drop an IPv6 scope.
      out.push_back(
          Interface{ifa->ifa_name, ip, (ifa->ifa_flags & IFF_LOOPBACK) != 0});
    }
  }
  freeifaddrs(list);
  return out;
}

}  // namespace

absl::StatusOr<AllReduceAlgorithm> ParseAllReduceAlgorithm(
    absl::string_view text) {
  const std::string v = absl::AsciiStrToLower(text);
  for (AllReduceAlgorithm a :
       {AllReduceAlgorithm::kAuto, AllReduceAlgorithm::kRing,
        AllReduceAlgorithm::kRingChunked, AllReduceAlgorithm::kHalvingDoubling,
        AllReduceAlgorithm::kBcube, AllReduceAlgorithm::kRingUnbound,
        AllReduceAlgorithm::kBcubeUnbound}) {
    if (v == AllReduceAlgorithmName(a)) return a;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'", text,
                   "' is not an allreduce algorithm (auto, ring, ring_chunked, "
                   "halving_doubling, bcube)"));
}

absl::StatusOr<InterfaceChoice> SelectInterface(absl::string_view spec,
                                                absl::string_view source) {
  MUSTER_ASSIGN_OR_RETURN(std::vector<Interface> interfaces, ListInterfaces());
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
    for (const Interface& i : interfaces) {
      if (exclude ? (matches(i.name) || (pass == 0 && i.loopback))
                  : !matches(i.name)) {
        continue;
      }
      return InterfaceChoice{i.name, i.ip, absl::StrCat(source, "=", spec)};
    }
    if (!exclude) break;
  }
  std::vector<std::string> listed;
  for (const Interface& i : interfaces) {
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

absl::StatusOr<std::string> ResolveHost(const std::string& hostname) {
  struct addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  struct addrinfo* result = nullptr;
  const int rv = getaddrinfo(hostname.c_str(), nullptr, &hints, &result);
  if (rv != 0 || result == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot resolve '", hostname, "' (", gai_strerror(rv),
                     "); set CommOptions.hostname to an address of this "
                     "machine, or MUSTER_SOCKET_IFNAME to an interface"));
  }
  char host[NI_MAXHOST];
  const int ni = getnameinfo(result->ai_addr, result->ai_addrlen, host,
                             sizeof(host), nullptr, 0, NI_NUMERICHOST);
  freeaddrinfo(result);
  if (ni != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot resolve '", hostname, "'"));
  }
  return std::string(host);
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

// Whether the launcher says every rank of a `world_size` job runs on this node.
bool EnvironmentSaysAllLocal(int world_size) {
  const char* local = GetEnv("LOCAL_WORLD_SIZE");
  const char* world = GetEnv("WORLD_SIZE");
  int local_size = 0;
  int env_world = 0;
  return local != nullptr && world != nullptr &&
         absl::SimpleAtoi(local, &local_size) &&
         absl::SimpleAtoi(world, &env_world) && env_world == world_size &&
         local_size == world_size;
}

// A store that owns the server it talks to (rank 0 of tcp:// and of env://
// without the launcher): the server lives as long as rank 0's communicators.
class ServedStore final : public rendezvous::Store {
 public:
  ServedStore(std::unique_ptr<rendezvous::RendezvousServer> server,
              std::unique_ptr<rendezvous::Store> client)
      : server_(std::move(server)), client_(std::move(client)) {}
  ~ServedStore() override {
    client_.reset();
    if (server_ != nullptr) server_->Shutdown(absl::Milliseconds(200));
  }
  absl::Status Set(absl::string_view k, absl::string_view v) override {
    return client_->Set(k, v);
  }
  absl::StatusOr<std::string> Get(absl::string_view k,
                                  absl::Duration t) override {
    return client_->Get(k, t);
  }
  absl::StatusOr<int64_t> Add(absl::string_view k, int64_t d) override {
    return client_->Add(k, d);
  }
  absl::StatusOr<std::string> CompareSet(absl::string_view k,
                                         absl::string_view e,
                                         absl::string_view d) override {
    return client_->CompareSet(k, e, d);
  }
  absl::Status Wait(absl::Span<const std::string> k,
                    absl::Duration t) override {
    return client_->Wait(k, t);
  }
  absl::StatusOr<std::vector<std::string>> MultiGet(
      absl::Span<const std::string> k, absl::Duration t) override {
    return client_->MultiGet(k, t);
  }
  absl::Status MultiSet(absl::Span<const std::string> k,
                        absl::Span<const std::string> v) override {
    return client_->MultiSet(k, v);
  }
  absl::StatusOr<bool> Delete(absl::string_view k) override {
    return client_->Delete(k);
  }
  absl::StatusOr<int64_t> NumKeys() override { return client_->NumKeys(); }

 private:
  std::unique_ptr<rendezvous::RendezvousServer> server_;
  std::unique_ptr<rendezvous::Store> client_;
};

// tcp://host:port and env:// without the launcher: rank 0 serves the store on
// `port` (all interfaces), every rank (rank 0 too) talks to host:port.
absl::StatusOr<std::shared_ptr<rendezvous::Store>> ServedTcpStore(
    const HostPort& where, int rank, absl::Duration timeout) {
  std::unique_ptr<rendezvous::RendezvousServer> server;
  if (rank == 0) {
    rendezvous::ServerOptions server_options;
    server_options.listen = absl::StrCat("0.0.0.0:", where.port);
    absl::StatusOr<std::unique_ptr<rendezvous::RendezvousServer>> started =
        rendezvous::RendezvousServer::Start(server_options);
    if (!started.ok()) {
      return Annotate(
          started.status(),
          absl::StrCat("rank 0 serving the store on port ", where.port));
    }
    server = std::move(*started);
  }
  rendezvous::GrpcStoreOptions store_options;
  store_options.endpoint = where.ToString();
  store_options.prefix = kServedPrefix;
  // The other ranks may start before rank 0 serves: wait as long as joining
  // may take.
  store_options.connect_timeout = timeout;
  absl::StatusOr<std::unique_ptr<rendezvous::Store>> client =
      rendezvous::NewGrpcStore(store_options);
  if (!client.ok()) {
    return Annotate(client.status(),
                    absl::StrCat("rank ", rank, ": connecting to the store at ",
                                 where.ToString()));
  }
  if (server == nullptr) {
    return std::shared_ptr<rendezvous::Store>(std::move(*client));
  }
  return std::shared_ptr<rendezvous::Store>(
      std::make_shared<ServedStore>(std::move(server), std::move(*client)));
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
    std::shared_ptr<rendezvous::Store> store, int rank, int world_size,
    const CommOptions& options, bool all_local, const std::string& key_root) {
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
  CoreConfig config;
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
  MUSTER_ASSIGN_OR_RETURN(std::unique_ptr<CommCore> core,
                          CommCore::Connect(std::move(config)));
  return std::make_unique<Communicator>(std::move(core));
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
  }
  return "unknown";
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Create(
    std::shared_ptr<rendezvous::Store> store, int rank, int world_size,
    CommOptions options) {
  // Ranks that share an in-process store are threads of this process, and a
  // file store is one machine's: loopback reaches them all.
  const bool all_local =
      dynamic_cast<rendezvous::InMemoryStore*>(store.get()) != nullptr ||
      dynamic_cast<internal::FileStore*>(store.get()) != nullptr ||
      internal::EnvironmentSaysAllLocal(world_size);
  return internal::CreateCommunicator(std::move(store), rank, world_size,
                                      options, all_local, internal::kKeyRoot);
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::FromEnvironment(
    CommOptions options) {
  using internal::kLauncherHow;
  using internal::RequiredInt;
  using internal::RequiredString;
  MUSTER_ASSIGN_OR_RETURN(int rank, RequiredInt("RANK", kLauncherHow));
  MUSTER_ASSIGN_OR_RETURN(int world_size,
                          RequiredInt("WORLD_SIZE", kLauncherHow));
  MUSTER_ASSIGN_OR_RETURN(int local_world_size,
                          RequiredInt("LOCAL_WORLD_SIZE", kLauncherHow));
  MUSTER_ASSIGN_OR_RETURN(
      std::string endpoint,
      RequiredString("MUSTER_STORE_ENDPOINT", kLauncherHow));
  MUSTER_ASSIGN_OR_RETURN(std::string prefix,
                          RequiredString("MUSTER_STORE_PREFIX", kLauncherHow));
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment: RANK=", rank,
                     " is outside [0, WORLD_SIZE=", world_size, ")"));
  }
  if (local_world_size < 1 || local_world_size > world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment: LOCAL_WORLD_SIZE=", local_world_size,
                     " is outside [1, WORLD_SIZE=", world_size, "]"));
  }
  rendezvous::GrpcStoreOptions store_options;
  store_options.endpoint = endpoint;
  store_options.prefix = prefix;
  // The round's Store credential and TLS settings the agent gave this worker
  // (MUSTER_STORE_TOKEN, MUSTER_STORE_TLS_*); none against a plain musterd.
  store_options.security = rendezvous::StoreSecurityFromEnv();
  absl::StatusOr<std::unique_ptr<rendezvous::Store>> store =
      rendezvous::NewGrpcStore(store_options);
  if (!store.ok()) {
    return Annotate(
        store.status(),
        absl::StrCat("connecting to the store at MUSTER_STORE_ENDPOINT=",
                     endpoint));
  }
  return internal::CreateCommunicator(
      std::shared_ptr<rendezvous::Store>(std::move(*store)), rank, world_size,
      options, local_world_size == world_size, internal::kKeyRoot);
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Init(
    absl::string_view init_method, int rank, int world_size,
    CommOptions options) {
  using internal::GetEnv;
  using internal::RequiredInt;
  absl::string_view method = absl::StripAsciiWhitespace(init_method);
  if (method.empty()) method = "env://";
  constexpr char kInitHow[] =
      "Communicator::Init needs the rank and the world size, as arguments or "
      "as RANK and WORLD_SIZE";
  auto rank_and_size = [&]() -> absl::Status {
    if (rank < 0) {
      MUSTER_ASSIGN_OR_RETURN(rank, RequiredInt("RANK", kInitHow));
    }
    if (world_size < 0) {
      MUSTER_ASSIGN_OR_RETURN(world_size, RequiredInt("WORLD_SIZE", kInitHow));
    }
    if (world_size < 1 || rank < 0 || rank >= world_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("Communicator::Init: rank ", rank, " is outside [0, ",
                       world_size, ")"));
    }
    return absl::OkStatus();
  };
  MUSTER_ASSIGN_OR_RETURN(CommOptions resolved,
                          internal::ResolveOptions(options));

  if (absl::ConsumePrefix(&method, "env://")) {
    if (!method.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "init method env:// takes nothing after the scheme, not '", method,
          "'"));
    }
    if (GetEnv("MUSTER_STORE_ENDPOINT") != nullptr) {
      // Under muster: the launcher's store, ranks and sizes.
      return FromEnvironment(options);
    }
    constexpr char kMasterHow[] =
        "init method env:// without the launcher needs MASTER_ADDR and "
        "MASTER_PORT (rank 0 serves the store there), RANK and WORLD_SIZE";
    const char* addr = GetEnv("MASTER_ADDR");
    if (addr == nullptr) {
      return internal::MissingVariable("MASTER_ADDR", kMasterHow);
    }
    MUSTER_ASSIGN_OR_RETURN(int port, RequiredInt("MASTER_PORT", kMasterHow));
    MUSTER_RETURN_IF_ERROR(rank_and_size());
    MUSTER_ASSIGN_OR_RETURN(
        std::shared_ptr<rendezvous::Store> store,
        internal::ServedTcpStore(HostPort{addr, port}, rank, resolved.timeout));
    return internal::CreateCommunicator(
        std::move(store), rank, world_size, options,
        internal::EnvironmentSaysAllLocal(world_size), internal::kKeyRoot);
  }
  if (absl::ConsumePrefix(&method, "tcp://")) {
    absl::StatusOr<HostPort> where = ParseHostPort(method, -1);
    if (!where.ok() || where->host.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "init method tcp://", method,
          ": expected tcp://HOST:PORT (rank 0 serves the store on PORT)"));
    }
    MUSTER_RETURN_IF_ERROR(rank_and_size());
    MUSTER_ASSIGN_OR_RETURN(
        std::shared_ptr<rendezvous::Store> store,
        internal::ServedTcpStore(*where, rank, resolved.timeout));
    const bool all_local = internal::EnvironmentSaysAllLocal(world_size);
    return internal::CreateCommunicator(std::move(store), rank, world_size,
                                        options, all_local, internal::kKeyRoot);
  }
  if (absl::ConsumePrefix(&method, "file://")) {
    if (method.empty() || method[0] != '/') {
      return absl::InvalidArgumentError(
          absl::StrCat("init method file://", method,
                       ": expected file:///ABSOLUTE/PATH (three slashes)"));
    }
    MUSTER_RETURN_IF_ERROR(rank_and_size());
    MUSTER_ASSIGN_OR_RETURN(
        std::shared_ptr<internal::FileStore> store,
        internal::FileStore::Open(std::string(method), rank));
    return internal::CreateCommunicator(std::move(store), rank, world_size,
                                        options, /*all_local=*/true,
                                        internal::kKeyRoot);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown init method '", init_method,
                   "': use env://, tcp://HOST:PORT or file:///PATH"));
}

}  // namespace muster::comm
