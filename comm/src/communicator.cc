// Communicator's factories: the environment contract with the launcher, option
// defaults and validation, and the per-communicator key namespace. The backend
// lives in comm/gloo/.
#include "muster/comm/communicator.h"

#include <cstdlib>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "comm/gloo/gloo_communicator.h"
#include "muster/common/logging.h"
#include "muster/common/net.h"
#include "muster/common/status.h"
#include "muster/rendezvous/grpc_store.h"
#include "muster/rendezvous/in_memory_store.h"
#include "muster/rendezvous/store.h"

namespace muster::comm {
namespace {

// Every key of libmuster_comm in the round's store lives under this prefix.
constexpr char kKeyRoot[] = "muster_comm/";

// The value of environment variable `name`, or nullptr when unset or empty.
const char* GetEnv(const char* name) {
  const char* value = std::getenv(name);
  return (value != nullptr && value[0] != '\0') ? value : nullptr;
}

absl::Status MissingVariable(absl::string_view name) {
  return absl::FailedPreconditionError(
      absl::StrCat("environment variable ", name,
                   " is not set: Communicator::FromEnvironment joins the job "
                   "through the launcher's environment; run the program under "
                   "muster (for example `muster --nproc-per-node=2 PROGRAM`), "
                   "or call Communicator::Create with a store"));
}

absl::StatusOr<std::string> RequiredString(const char* name) {
  const char* value = GetEnv(name);
  if (value == nullptr) return MissingVariable(name);
  return std::string(value);
}

absl::StatusOr<int> RequiredInt(const char* name) {
  const char* value = GetEnv(name);
  if (value == nullptr) return MissingVariable(name);
  int result = 0;
  if (!absl::SimpleAtoi(value, &result)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "environment variable ", name, "='", value, "' is not an integer"));
  }
  return result;
}

// Applies MUSTER_COMM_TIMEOUT and checks the timeout.
absl::StatusOr<absl::Duration> ResolveTimeout(absl::Duration timeout) {
  if (const char* text = GetEnv("MUSTER_COMM_TIMEOUT")) {
    double seconds = 0;
    if (!absl::SimpleAtod(text, &seconds) || !(seconds > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("environment variable MUSTER_COMM_TIMEOUT='", text,
                       "' is not a positive number of seconds"));
    }
    timeout = absl::Seconds(seconds);
  }
  if (timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("CommOptions.timeout must be positive, not ",
                     absl::FormatDuration(timeout)));
  }
  return timeout;
}

// Where Gloo binds: an explicit interface, an explicit address, the interface
// named in the environment, then loopback when every rank is on this node, else
// this node's address.
internal::GlooConfig ResolveAddress(const CommOptions& options,
                                    bool all_local) {
  internal::GlooConfig config;
  if (!options.ifname.empty()) {
    config.iface = options.ifname;
    config.reason = "CommOptions.ifname";
  } else if (!options.hostname.empty()) {
    config.hostname = options.hostname;
    config.reason = "CommOptions.hostname";
  } else if (const char* muster_if = GetEnv("MUSTER_SOCKET_IFNAME")) {
    config.iface = muster_if;
    config.reason = "MUSTER_SOCKET_IFNAME";
  } else if (const char* gloo_if = GetEnv("GLOO_SOCKET_IFNAME")) {
    config.iface = gloo_if;
    config.reason = "GLOO_SOCKET_IFNAME";
  } else if (all_local) {
    config.hostname = "127.0.0.1";
    config.reason = "every rank is on this node";
  } else {
    config.hostname = DefaultAdvertisedAddress();
    config.reason = "this node's advertised address";
  }
  return config;
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

absl::StatusOr<std::unique_ptr<Communicator>> CreateImpl(
    std::shared_ptr<rendezvous::Store> store, int rank, int world_size,
    const CommOptions& options, bool all_local) {
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
  MUSTER_ASSIGN_OR_RETURN(absl::Duration timeout,
                          ResolveTimeout(options.timeout));
  internal::GlooConfig config = ResolveAddress(options, all_local);
  config.timeout = timeout;

  // The n-th communicator a rank creates on this store is communicator n: every
  // rank counts its own creations, so that re-creating one in the same round
  // never meets the keys of the last.
  absl::StatusOr<int64_t> generation =
      store->Add(absl::StrCat(kKeyRoot, "generation/rank", rank), 1);
  if (!generation.ok()) {
    return Annotate(generation.status(),
                    absl::StrCat("rank ", rank, "/", world_size,
                                 ": counting communicators in the store"));
  }
  std::string key_prefix = absl::StrCat(kKeyRoot, *generation, "/");
  MUSTER_LOG(DEBUG) << "rank " << rank << "/" << world_size
                    << ": joining communicator " << *generation << " (timeout "
                    << absl::FormatDuration(timeout) << ")";
  return internal::ConnectGloo(std::move(store), std::move(key_prefix), rank,
                               world_size, config);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Create(
    std::shared_ptr<rendezvous::Store> store, int rank, int world_size,
    CommOptions options) {
  // Ranks that share an in-process store are threads of this process: loopback
  // reaches them all.
  const bool all_local =
      dynamic_cast<rendezvous::InMemoryStore*>(store.get()) != nullptr ||
      EnvironmentSaysAllLocal(world_size);
  return CreateImpl(std::move(store), rank, world_size, options, all_local);
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::FromEnvironment(
    CommOptions options) {
  MUSTER_ASSIGN_OR_RETURN(int rank, RequiredInt("RANK"));
  MUSTER_ASSIGN_OR_RETURN(int world_size, RequiredInt("WORLD_SIZE"));
  MUSTER_ASSIGN_OR_RETURN(int local_world_size,
                          RequiredInt("LOCAL_WORLD_SIZE"));
  MUSTER_ASSIGN_OR_RETURN(std::string endpoint,
                          RequiredString("MUSTER_STORE_ENDPOINT"));
  MUSTER_ASSIGN_OR_RETURN(std::string prefix,
                          RequiredString("MUSTER_STORE_PREFIX"));
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
  absl::StatusOr<std::unique_ptr<rendezvous::Store>> store =
      rendezvous::NewGrpcStore(store_options);
  if (!store.ok()) {
    return Annotate(
        store.status(),
        absl::StrCat("connecting to the store at MUSTER_STORE_ENDPOINT=",
                     endpoint));
  }
  return CreateImpl(std::shared_ptr<rendezvous::Store>(std::move(*store)), rank,
                    world_size, options, local_world_size == world_size);
}

}  // namespace muster::comm
