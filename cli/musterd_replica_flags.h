// musterd's replica flags (replicas on etcd): --etcd-endpoints,
// --etcd-ca, --etcd-cert, --etcd-key, --etcd-prefix, --advertise-addr and
// --election-ttl, kept apart from MusterdMain so that its flag list stays a
// list.
#ifndef MUSTER_CLI_MUSTERD_REPLICA_FLAGS_H_
#define MUSTER_CLI_MUSTERD_REPLICA_FLAGS_H_

#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "muster/rendezvous/replica_options.h"

namespace muster::cli {

struct ReplicaFlags {
  std::string etcd_endpoints;
  std::string etcd_ca;
  std::string etcd_cert;
  std::string etcd_key;
  std::string etcd_prefix = "/muster";
  std::string advertise_addr;
  std::string election_ttl = "2s";
};

// Adds the flags to `app`, writing into *flags (which outlives app's parse).
void AddReplicaFlags(CLI::App& app, ReplicaFlags* flags);

// The ReplicaOptions the flags ask for (disabled without --etcd-endpoints).
// Errors: INVALID_ARGUMENT naming the flag and the fix: replica flags
// without --etcd-endpoints, --state-dir with it (the state lives in etcd),
// an empty endpoint, a bad --election-ttl, and (in a build without etcd
// support, the Windows one) --etcd-endpoints at all.
absl::Status ResolveReplicaFlags(const ReplicaFlags& flags,
                                 const std::string& state_dir,
                                 rendezvous::ReplicaOptions* options);

}  // namespace muster::cli

#endif  // MUSTER_CLI_MUSTERD_REPLICA_FLAGS_H_
