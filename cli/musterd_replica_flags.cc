#include "cli/musterd_replica_flags.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "muster/common/duration.h"

namespace muster::cli {

void AddReplicaFlags(CLI::App& app, ReplicaFlags* flags) {
  const char* group = "Replicas on etcd (docs/deployment.md)";
  app.add_option("--etcd-endpoints", flags->etcd_endpoints,
                 "run as one of several replicas over this etcd cluster: its "
                 "members' client URLs, comma-separated "
                 "(http://H:P or https://H:P). One replica leads and serves; "
                 "the others stand by and take over when it is lost")
      ->type_name("URLS")
      ->group(group);
  app.add_option("--etcd-ca", flags->etcd_ca,
                 "PEM CA of the etcd members' certificates (https://)")
      ->type_name("PEM")
      ->group(group);
  app.add_option("--etcd-cert", flags->etcd_cert,
                 "PEM client certificate for etcd, with --etcd-key")
      ->type_name("PEM")
      ->group(group);
  app.add_option("--etcd-key", flags->etcd_key,
                 "PEM private key of --etcd-cert")
      ->type_name("PEM")
      ->group(group);
  app.add_option("--etcd-prefix", flags->etcd_prefix,
                 "every key musterd writes in etcd is under it; replicas of "
                 "one service share it")
      ->capture_default_str()
      ->group(group);
  app.add_option("--advertise-addr", flags->advertise_addr,
                 "HOST:PORT agents and the other replicas are told for this "
                 "replica (default: --listen's host, or this host's name when "
                 "it listens on 0.0.0.0, and the bound port)")
      ->group(group);
  app.add_option("--election-ttl", flags->election_ttl,
                 "the election lease's TTL (1s to 60s; etcd grants at least "
                 "2s with its default timing)")
      ->capture_default_str()
      ->group(group);
}

// state_dir and options are read only where replicas are built in: the
// Windows build (MUSTER_WITH_ETCD=OFF) refuses --etcd-endpoints instead.
absl::Status ResolveReplicaFlags(
    const ReplicaFlags& flags, [[maybe_unused]] const std::string& state_dir,
    [[maybe_unused]] rendezvous::ReplicaOptions* options) {
  if (flags.etcd_endpoints.empty()) {
    if (!flags.etcd_ca.empty() || !flags.etcd_cert.empty() ||
        !flags.etcd_key.empty() || !flags.advertise_addr.empty()) {
      return absl::InvalidArgumentError(
          "--etcd-ca, --etcd-cert, --etcd-key and --advertise-addr are for "
          "replicas: give --etcd-endpoints too, or drop them");
    }
    return absl::OkStatus();
  }
#ifndef MUSTER_WITH_ETCD
  return absl::InvalidArgumentError(
      "--etcd-endpoints: this musterd was built without replica support "
      "(MUSTER_WITH_ETCD=OFF, e.g. the Windows build); run a Linux musterd "
      "for replicas");
#else
  if (!state_dir.empty()) {
    return absl::InvalidArgumentError(
        "--state-dir and --etcd-endpoints exclude each other: replicas keep "
        "the jobs and the Store in etcd; drop --state-dir");
  }
  for (absl::string_view url :
       absl::StrSplit(flags.etcd_endpoints, ',', absl::SkipWhitespace())) {
    url = absl::StripAsciiWhitespace(url);
    if (url.empty()) continue;
    options->etcd.endpoints.emplace_back(url);
  }
  if (options->etcd.endpoints.empty()) {
    return absl::InvalidArgumentError(
        "--etcd-endpoints: no URL given; write e.g. "
        "http://10.0.0.1:2379,http://10.0.0.2:2379");
  }
  absl::StatusOr<absl::Duration> ttl = ParseDuration(flags.election_ttl);
  if (!ttl.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--election-ttl: '", flags.election_ttl,
                     "' is not a duration (examples: 2s, 5s)"));
  }
  options->election_ttl = *ttl;
  options->etcd.ca_file = flags.etcd_ca;
  options->etcd.cert_file = flags.etcd_cert;
  options->etcd.key_file = flags.etcd_key;
  options->prefix = flags.etcd_prefix;
  options->advertise_addr = flags.advertise_addr;
  return absl::OkStatus();
#endif
}

}  // namespace muster::cli
