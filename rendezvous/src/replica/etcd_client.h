// EtcdClient: the few calls of etcd's v3 gRPC API that musterd's replicas
// need (KV Range and Txn, Lease Grant, KeepAlive and Revoke), over gRPC code
// generated from etcd's own .proto files (proto/etcd/), with the members of
// the cluster tried in turn.
//
// Every call carries `hasleader: true` (what etcd's Go client sends as
// WithRequireLeader): a member cut off from the cluster's Raft leader refuses
// at once instead of hanging, and the client moves on to the next member. A
// call that fails with UNAVAILABLE or DEADLINE_EXCEEDED on one member is tried
// on the next ones until its timeout; every call musterd makes is safe to
// repeat (absolute Puts and Deletes, guarded by the leader's key: see
// replica.h).
//
// Thread-safe.
#ifndef MUSTER_RENDEZVOUS_SRC_REPLICA_ETCD_CLIENT_H_
#define MUSTER_RENDEZVOUS_SRC_REPLICA_ETCD_CLIENT_H_

#include <grpcpp/channel.h>
#include <grpcpp/support/status.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"
#include "muster/rendezvous/replica_options.h"

namespace muster::rendezvous {

class EtcdClient {
 public:
  // Validates the endpoints (http://H:P or https://H:P; https needs no
  // client certificate but takes one) and reads the TLS files. Connects
  // lazily. Errors: INVALID_ARGUMENT naming the endpoint or the file and the
  // fix.
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(
      const EtcdConnection& options);

  // A Range. Errors: UNAVAILABLE naming every member tried and why, when no
  // member answered within `timeout`; the call's own error otherwise.
  absl::StatusOr<etcdserverpb::RangeResponse> Range(
      const etcdserverpb::RangeRequest& request, absl::Duration timeout);
  // A Txn, as Range.
  absl::StatusOr<etcdserverpb::TxnResponse> Txn(
      const etcdserverpb::TxnRequest& request, absl::Duration timeout);
  // A new lease of `ttl_seconds`; returns its id. etcd may grant a longer TTL
  // (its minimum: 1.5 election timeouts, 2 s with etcd's defaults) than asked:
  // *granted_ttl_seconds receives it when not null.
  absl::StatusOr<int64_t> LeaseGrant(int64_t ttl_seconds,
                                     absl::Duration timeout,
                                     int64_t* granted_ttl_seconds = nullptr);
  // Renews a lease once; returns the TTL it has now. NOT_FOUND when the
  // lease is gone (expired or revoked).
  absl::StatusOr<int64_t> LeaseKeepAlive(int64_t id, absl::Duration timeout);
  // Revokes a lease (and deletes the keys attached to it). A lease that is
  // gone already is OK.
  absl::Status LeaseRevoke(int64_t id, absl::Duration timeout);

  // Every member's Maintenance.Status, each asked directly (not through the
  // failover above) with `timeout`: the cluster's health as this client
  // sees it.
  std::vector<EtcdMemberHealth> MemberHealth(absl::Duration timeout);

  // The endpoints, for messages.
  std::string Describe() const;

 private:
  struct Member {
    std::string url;     // as given
    std::string target;  // HOST:PORT
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<etcdserverpb::KV::Stub> kv;
    std::unique_ptr<etcdserverpb::Lease::Stub> lease;
    std::unique_ptr<etcdserverpb::Maintenance::Stub> maintenance;
  };

  explicit EtcdClient(std::vector<Member> members)
      : members_(std::move(members)) {}

  // Runs `call` on the current member, then the next ones, until it returns
  // something other than UNAVAILABLE / DEADLINE_EXCEEDED or `timeout`
  // passes. `call` gets the member, the deadline of one attempt and
  // where to put the call's gRPC status.
  template <typename Call>
  auto OnSomeMember(absl::string_view what, absl::Duration timeout, Call call)
      -> decltype(call(std::declval<Member&>(), absl::Time(),
                       static_cast<grpc::Status*>(nullptr)));

  std::vector<Member> members_;
  mutable absl::Mutex mu_;
  size_t current_ ABSL_GUARDED_BY(mu_) = 0;
};

// The smallest key greater than every key starting with `prefix` (etcd's
// range_end for a prefix query).
std::string PrefixRangeEnd(const std::string& prefix);

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_SRC_REPLICA_ETCD_CLIENT_H_
