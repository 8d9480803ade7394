#include "rendezvous/src/replica/etcd_client.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "muster/common/net.h"
#include "muster/store/grpc_status.h"

namespace muster::rendezvous {
namespace {

// The shortest single attempt on one member: long enough for a commit on a
// loaded machine (etcd commits in 5-10 ms here), short enough that a member
// that hangs (cut off without a refusal) costs little before the next is
// tried.
constexpr absl::Duration kMinAttempt = absl::Milliseconds(150);

absl::StatusOr<std::string> ReadPem(const std::string& path,
                                    absl::string_view flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, "=", path, ": cannot read the file; give a readable PEM file"));
  }
  std::stringstream text;
  text << in.rdbuf();
  if (!absl::StrContains(text.str(), "-----BEGIN ")) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, "=", path, ": not a PEM file"));
  }
  return text.str();
}

bool Retryable(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::UNAVAILABLE ||
         status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
}

void PrepareContext(grpc::ClientContext& context, absl::Time deadline) {
  context.set_deadline(absl::ToChronoTime(deadline));
  // etcd's WithRequireLeader: refuse at once on a member without a leader.
  context.AddMetadata("hasleader", "true");
}

}  // namespace

std::string PrefixRangeEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    unsigned char last = static_cast<unsigned char>(end.back());
    if (last < 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(
    const EtcdConnection& options) {
  if (options.endpoints.empty()) {
    return absl::InvalidArgumentError(
        "--etcd-endpoints: no endpoint given; list the etcd members' client "
        "URLs, e.g. http://10.0.0.1:2379,http://10.0.0.2:2379");
  }
  if (options.cert_file.empty() != options.key_file.empty()) {
    return absl::InvalidArgumentError(
        "--etcd-cert and --etcd-key go together: give both (a client "
        "certificate and its key) or neither");
  }
  std::shared_ptr<grpc::ChannelCredentials> tls;
  bool any_https = false;
  for (const std::string& url : options.endpoints)
    any_https |= absl::StartsWith(url, "https://");
  if (any_https) {
    grpc::SslCredentialsOptions ssl;
    if (!options.ca_file.empty()) {
      absl::StatusOr<std::string> ca = ReadPem(options.ca_file, "--etcd-ca");
      if (!ca.ok()) return ca.status();
      ssl.pem_root_certs = *std::move(ca);
    }
    if (!options.cert_file.empty()) {
      absl::StatusOr<std::string> cert =
          ReadPem(options.cert_file, "--etcd-cert");
      if (!cert.ok()) return cert.status();
      absl::StatusOr<std::string> key = ReadPem(options.key_file, "--etcd-key");
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = *std::move(cert);
      ssl.pem_private_key = *std::move(key);
    }
    tls = grpc::SslCredentials(ssl);
  } else if (!options.ca_file.empty() || !options.cert_file.empty()) {
    return absl::InvalidArgumentError(
        "--etcd-ca/--etcd-cert/--etcd-key are given but every --etcd-endpoints "
        "URL is http://: use https:// URLs for TLS");
  }
  std::vector<Member> members;
  for (const std::string& url : options.endpoints) {
    absl::string_view rest = url;
    bool https = false;
    if (absl::ConsumePrefix(&rest, "https://")) {
      https = true;
    } else if (!absl::ConsumePrefix(&rest, "http://")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--etcd-endpoints: '", url,
          "' is not a client URL; write http://HOST:PORT (or https://)"));
    }
    absl::ConsumeSuffix(&rest, "/");
    absl::StatusOr<HostPort> where = ParseHostPort(rest, 2379);
    if (!where.ok() || where->host.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--etcd-endpoints: '", url,
                       "': ", where.ok() ? "no host" : where.status().message(),
                       "; write http://HOST:PORT"));
    }
    Member m;
    m.url = url;
    m.target = where->ToString();
    grpc::ChannelArguments args;
    // A member restarted a moment later is found again quickly.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    // Each member its own connection: gRPC would share one subchannel per
    // target otherwise, and this client's failover is by member.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    m.channel = grpc::CreateCustomChannel(
        m.target, https ? tls : grpc::InsecureChannelCredentials(), args);
    m.kv = etcdserverpb::KV::NewStub(m.channel);
    m.lease = etcdserverpb::Lease::NewStub(m.channel);
    m.maintenance = etcdserverpb::Maintenance::NewStub(m.channel);
    members.push_back(std::move(m));
  }
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(members)));
}

std::vector<EtcdMemberHealth> EtcdClient::MemberHealth(absl::Duration timeout) {
  std::vector<EtcdMemberHealth> out;
  for (Member& m : members_) {
    EtcdMemberHealth& h = out.emplace_back();
    h.endpoint = m.url;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    etcdserverpb::StatusResponse r;
    const grpc::Status s =
        m.maintenance->Status(&ctx, etcdserverpb::StatusRequest(), &r);
    if (!s.ok()) {
      h.error =
          s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
              ? absl::StrCat("no answer within ", absl::FormatDuration(timeout))
              : s.error_message();
      continue;
    }
    // A member that lost its cluster answers, but names no leader or reports
    // errors (a NOSPACE alarm, a corrupt member).
    h.version = r.version();
    h.db_size_bytes = r.dbsize();
    h.raft_term = static_cast<int64_t>(r.raftterm());
    h.leader = r.leader() != 0 && r.leader() == r.header().member_id();
    if (r.leader() == 0) {
      h.error = "the member knows no leader (cut off from the cluster?)";
    } else if (r.errors_size() > 0) {
      h.error = absl::StrJoin(r.errors(), "; ");
    }
    h.healthy = h.error.empty();
  }
  return out;
}

std::string EtcdClient::Describe() const {
  std::vector<std::string> urls;
  for (const Member& m : members_) urls.push_back(m.url);
  return absl::StrJoin(urls, ",");
}

template <typename Call>
auto EtcdClient::OnSomeMember(absl::string_view what, absl::Duration timeout,
                              Call call)
    -> decltype(call(std::declval<Member&>(), absl::Time(),
                     static_cast<grpc::Status*>(nullptr))) {
  const absl::Time deadline = absl::Now() + timeout;
  size_t index;
  {
    absl::MutexLock lock(&mu_);
    index = current_;
  }
  std::vector<std::string> tried;
  const size_t n = members_.size();
  // Each member gets an equal share of what is left, but at least
  // kMinAttempt; the whole list is tried again while time is left.
  for (size_t attempt = 0;; ++attempt) {
    const absl::Time now = absl::Now();
    if (now >= deadline && attempt > 0) break;
    Member& m = members_[index % n];
    const size_t left_members = n - (attempt % n);
    const absl::Time attempt_deadline = std::min(
        deadline,
        now + std::max(kMinAttempt,
                       (deadline - now) / static_cast<int64_t>(left_members)));
    grpc::Status status;
    auto result = call(m, attempt_deadline, &status);
    if (status.ok() || !Retryable(status)) {
      absl::MutexLock lock(&mu_);
      current_ = index % n;
      return result;
    }
    if (tried.size() < 2 * n) {
      tried.push_back(absl::StrCat(m.url, ": ", status.error_message()));
    }
    ++index;
    if (absl::Now() >= deadline) break;
  }
  {
    absl::MutexLock lock(&mu_);
    current_ = index % n;
  }
  return absl::UnavailableError(absl::StrCat(
      "etcd ", what, " failed on every member within ",
      absl::FormatDuration(timeout), " (", absl::StrJoin(tried, "; "),
      "): is the etcd cluster up, with a quorum, and reachable from here?"));
}

absl::StatusOr<etcdserverpb::RangeResponse> EtcdClient::Range(
    const etcdserverpb::RangeRequest& request, absl::Duration timeout) {
  return OnSomeMember(
      "Range", timeout,
      [&](Member& m, absl::Time deadline,
          grpc::Status* status) -> absl::StatusOr<etcdserverpb::RangeResponse> {
        grpc::ClientContext context;
        PrepareContext(context, deadline);
        etcdserverpb::RangeResponse response;
        *status = m.kv->Range(&context, request, &response);
        if (!status->ok()) return store::FromGrpcStatus(*status);
        return response;
      });
}

absl::StatusOr<etcdserverpb::TxnResponse> EtcdClient::Txn(
    const etcdserverpb::TxnRequest& request, absl::Duration timeout) {
  return OnSomeMember(
      "Txn", timeout,
      [&](Member& m, absl::Time deadline,
          grpc::Status* status) -> absl::StatusOr<etcdserverpb::TxnResponse> {
        grpc::ClientContext context;
        PrepareContext(context, deadline);
        etcdserverpb::TxnResponse response;
        *status = m.kv->Txn(&context, request, &response);
        if (!status->ok()) return store::FromGrpcStatus(*status);
        return response;
      });
}

absl::StatusOr<int64_t> EtcdClient::LeaseGrant(int64_t ttl_seconds,
                                               absl::Duration timeout,
                                               int64_t* granted_ttl_seconds) {
  return OnSomeMember("LeaseGrant", timeout,
                      [&](Member& m, absl::Time deadline,
                          grpc::Status* status) -> absl::StatusOr<int64_t> {
                        grpc::ClientContext context;
                        PrepareContext(context, deadline);
                        etcdserverpb::LeaseGrantRequest request;
                        request.set_ttl(ttl_seconds);
                        etcdserverpb::LeaseGrantResponse response;
                        *status =
                            m.lease->LeaseGrant(&context, request, &response);
                        if (!status->ok())
                          return store::FromGrpcStatus(*status);
                        if (!response.error().empty()) {
                          return absl::FailedPreconditionError(absl::StrCat(
                              "etcd refused a lease: ", response.error()));
                        }
                        if (granted_ttl_seconds != nullptr)
                          *granted_ttl_seconds = response.ttl();
                        return response.id();
                      });
}

absl::StatusOr<int64_t> EtcdClient::LeaseKeepAlive(int64_t id,
                                                   absl::Duration timeout) {
  return OnSomeMember(
      "LeaseKeepAlive", timeout,
      [&](Member& m, absl::Time deadline,
          grpc::Status* status) -> absl::StatusOr<int64_t> {
        // One short stream per renewal: a few a second, and no stream left
        // open on a member that stopped answering.
        grpc::ClientContext context;
        PrepareContext(context, deadline);
        auto stream = m.lease->LeaseKeepAlive(&context);
        etcdserverpb::LeaseKeepAliveRequest request;
        request.set_id(id);
        etcdserverpb::LeaseKeepAliveResponse response;
        const bool ok = stream->Write(request) && stream->Read(&response);
        stream->WritesDone();
        context.TryCancel();
        *status = stream->Finish();
        if (!ok) {
          if (status->ok() ||
              status->error_code() == grpc::StatusCode::CANCELLED) {
            *status = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                   "the keep-alive stream ended early");
          }
          return store::FromGrpcStatus(*status);
        }
        *status = grpc::Status::OK;
        if (response.ttl() <= 0) {
          return absl::NotFoundError(
              absl::StrCat("etcd lease ", id, " is gone (expired or revoked)"));
        }
        return response.ttl();
      });
}

absl::Status EtcdClient::LeaseRevoke(int64_t id, absl::Duration timeout) {
  absl::StatusOr<bool> done = OnSomeMember(
      "LeaseRevoke", timeout,
      [&](Member& m, absl::Time deadline,
          grpc::Status* status) -> absl::StatusOr<bool> {
        grpc::ClientContext context;
        PrepareContext(context, deadline);
        etcdserverpb::LeaseRevokeRequest request;
        request.set_id(id);
        etcdserverpb::LeaseRevokeResponse response;
        *status = m.lease->LeaseRevoke(&context, request, &response);
        if (status->error_code() == grpc::StatusCode::NOT_FOUND) {
          *status = grpc::Status::OK;  // gone already
          return true;
        }
        if (!status->ok()) return store::FromGrpcStatus(*status);
        return true;
      });
  return done.status();
}

}  // namespace muster::rendezvous
