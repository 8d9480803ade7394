// StoreFactory: how Communicator::Init finds the Store behind an init method.
// Each scheme ("env", "tcp", "file") has one factory, found by name in a
// registry, so the factories in init.cc know only this interface: which
// store a scheme means (musterd's gRPC store, a store served by rank 0, a
// file) lives with the factory that opens it.
//
//   env://            the launcher's store (MUSTER_STORE_ENDPOINT/_PREFIX and
//                     the round's credentials); without the launcher, rank 0
//                     serves one at MASTER_ADDR:MASTER_PORT.
//                     (grpc_store_factory.cc)
//   tcp://HOST:PORT   rank 0 serves the store on PORT; every rank talks to
//                     HOST:PORT. (grpc_store_factory.cc)
//   file:///PATH      a store file shared by the ranks of one machine.
//                     (file_store_factory.cc)
//
// Thread-safe: factories are stateless; the registry is locked.
#ifndef MUSTER_COMM_STORE_STORE_FACTORY_H_
#define MUSTER_COMM_STORE_STORE_FACTORY_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "muster/store/store.h"

namespace muster::comm::internal {

// What Communicator::Init asks of the store behind its init method.
struct StoreRequest {
  // What follows "scheme://": "host:port", "/path", "".
  std::string address;
  // The rank and world size given to Init; -1: from RANK / WORLD_SIZE.
  int rank = -1;
  int world_size = -1;
  // How long opening may wait for the other ranks (CommOptions.timeout).
  absl::Duration timeout = absl::Minutes(30);
};

// An opened store and what it says about the job.
struct JobStore {
  std::shared_ptr<store::Store> store;
  int rank = 0;
  int world_size = 1;
  // Whether every rank is known to run on this machine (they bind loopback).
  bool all_local = false;
};

class StoreFactory {
 public:
  virtual ~StoreFactory() = default;

  // The scheme served, without "://": "tcp".
  virtual std::string scheme() const = 0;
  // How to write an init method of this scheme, for messages:
  // "tcp://HOST:PORT".
  virtual std::string usage() const = 0;

  // Opens the store `request` names, resolving the rank and world size.
  // Blocks while the store is reached (a served store: until rank 0 serves
  // it, up to request.timeout). Errors: INVALID_ARGUMENT (a malformed
  // address, a rank out of range), FAILED_PRECONDITION (an environment
  // variable it needs is not set; a file store in use), UNAVAILABLE (cannot
  // serve, connect or open), each naming what failed.
  virtual absl::StatusOr<JobStore> Open(const StoreRequest& request) const = 0;
};

// The factory registered for `scheme` ("tcp"), or nullptr. The built-in
// ones (env, tcp, file) are registered on first use.
const StoreFactory* FindStoreFactory(absl::string_view scheme);

// The usages of the registered factories, built-in ones first:
// "env://, tcp://HOST:PORT or file:///PATH".
std::string StoreFactoryUsages();

// Adds a factory for another scheme (tests: a scheme over an in-memory
// store). Errors: ALREADY_EXISTS when its scheme is registered.
absl::Status RegisterStoreFactory(std::unique_ptr<StoreFactory> factory);

// The launcher's store, ranks and sizes (RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
// MUSTER_STORE_ENDPOINT, MUSTER_STORE_PREFIX and the round's credentials):
// Communicator::FromEnvironment, and env:// under muster. Errors:
// FAILED_PRECONDITION naming the variable missing, INVALID_ARGUMENT (out of
// range), the store's connection errors.
absl::StatusOr<JobStore> OpenLauncherStore();

// The built-in factories.
std::unique_ptr<StoreFactory> NewEnvStoreFactory();
std::unique_ptr<StoreFactory> NewTcpStoreFactory();
std::unique_ptr<StoreFactory> NewFileStoreFactory();

}  // namespace muster::comm::internal

#endif  // MUSTER_COMM_STORE_STORE_FACTORY_H_
