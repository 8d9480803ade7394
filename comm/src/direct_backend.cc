#include "comm/src/direct_backend.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "comm/gloo/reduce.h"
#include "comm/src/direct_allreduce.h"
#include "comm/src/environment.h"
#include "muster/common/status.h"

namespace muster::comm::internal {
namespace {

class DirectBackend final : public Backend {
 public:
  DirectBackend(int rank, int world_size, std::string why,
                std::unique_ptr<DirectAllreduce> mesh)
      : rank_(rank),
        world_size_(world_size),
        why_(std::move(why)),
        mesh_(std::move(mesh)) {}

  ~DirectBackend() override { Close(); }

  absl::string_view name() const override { return "direct"; }

  absl::Status Run(const Op& op, absl::Time deadline) override {
    const size_t bytes = op.count * DataTypeSize(op.dtype);
    switch (op.kind) {
      case OpKind::kAllReduce: {
        if (bytes == 0) return absl::OkStatus();
        if (op.input != op.output) std::memcpy(op.output, op.input, bytes);
        if (world_size_ == 1) return absl::OkStatus();
        MUSTER_RETURN_IF_ERROR(
            mesh_->Run(op.output, op.count, op.dtype, op.op, deadline));
        if (op.op == ReduceOp::kAvg) {
          DivideInPlace(op.output, op.count, op.dtype, world_size_);
        }
        return absl::OkStatus();
      }
      case OpKind::kAllGather:
        if (bytes == 0) return absl::OkStatus();
        if (world_size_ == 1) {
          if (op.input != op.output) std::memmove(op.output, op.input, bytes);
          return absl::OkStatus();
        }
        return mesh_->AllGather(op.input, bytes, op.output, deadline);
      case OpKind::kBroadcast: {
        if (bytes == 0 || world_size_ == 1) return absl::OkStatus();
        // Every rank sends its buffer and keeps the root's: N x the message,
        // on the one protocol both OSes speak.
        scratch_.resize(bytes * static_cast<size_t>(world_size_));
        MUSTER_RETURN_IF_ERROR(
            mesh_->AllGather(op.output, bytes, scratch_.data(), deadline));
        std::memcpy(op.output,
                    scratch_.data() + static_cast<size_t>(op.root) * bytes,
                    bytes);
        return absl::OkStatus();
      }
      case OpKind::kBarrier:
        if (world_size_ == 1) return absl::OkStatus();
        // Headers only: returns once every peer's has arrived.
        return mesh_->AllGather(nullptr, 0, nullptr, deadline);
      default:
        return Unavailable(op.kind);
    }
  }

  absl::StatusOr<std::unique_ptr<PendingP2P>> Post(const Op& op) override {
    return Unavailable(op.kind);
  }

  void Abort(const absl::Status&) override {
    absl::MutexLock lock(&mu_);
    if (mesh_ != nullptr) mesh_->Abort();
  }

  void Close() override {
    absl::MutexLock lock(&mu_);
    mesh_.reset();
  }

 private:
  absl::Status Unavailable(OpKind kind) const {
    return absl::UnimplementedError(absl::StrCat(
        "rank ", rank_, "/", world_size_, ": ", OpName(kind),
        " cannot run: the ranks cannot share a Gloo mesh (", why_,
        "), so collectives run on libmuster_comm's own mesh, which has "
        "AllReduce, AllGather, Broadcast and Barrier only"));
  }

  const int rank_;
  const int world_size_;
  const std::string why_;
  std::vector<char> scratch_;
  absl::Mutex mu_;  // Abort may race Close.
  std::unique_ptr<DirectAllreduce> mesh_;
};

}  // namespace

absl::Status DescribeMissingPeers(const absl::Status& status,
                                  rendezvous::Store& store,
                                  const std::string& key_prefix, int rank,
                                  int world_size, absl::Duration timeout) {
  auto published = [&](int r) {
    return store.Get(absl::StrCat(key_prefix, r), absl::ZeroDuration()).ok();
  };
  // This rank's own key tells whether the keys are still named "<rank>".
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

absl::StatusOr<std::string> MeshKind(absl::string_view gloo_transport,
                                     bool* forced) {
  *forced = false;
  const char* env = GetEnv("MUSTER_COMM_MESH");
  const std::string value =
      env == nullptr ? "auto" : absl::AsciiStrToLower(env);
  if (value == "direct") {
    *forced = true;
    return std::string("direct");
  }
  if (value != "auto") {
    return absl::InvalidArgumentError(
        absl::StrCat("environment variable MUSTER_COMM_MESH='", env,
                     "' is not auto or direct (direct: libmuster_comm's own "
                     "mesh instead of Gloo's, as jobs mixing Linux and Windows "
                     "ranks run)"));
  }
  return absl::StrCat("gloo-", gloo_transport);
}

absl::StatusOr<std::string> MeshMismatch(const CoreConfig& config,
                                         const std::string& mine,
                                         absl::Time deadline) {
  const int n = config.world_size;
  if (n < 2) return std::string();
  const std::string root = absl::StrCat(config.key_prefix, "mesh/");
  const std::string who = absl::StrCat("rank ", config.rank, "/", n);
  MUSTER_RETURN_IF_ERROR(
      Annotate(config.store->Set(absl::StrCat(root, config.rank), mine),
               absl::StrCat(who, ": publishing its mesh kind")));
  std::vector<std::string> keys;
  for (int r = 0; r < n; ++r) keys.push_back(absl::StrCat(root, r));
  absl::StatusOr<std::vector<std::string>> kinds = config.store->MultiGet(
      keys, std::max(deadline - absl::Now(), absl::Milliseconds(1)));
  if (!kinds.ok()) {
    absl::Status status = Annotate(
        kinds.status(), absl::StrCat(who, ": reading every rank's mesh kind"));
    if (!absl::IsDeadlineExceeded(status)) return status;
    return DescribeMissingPeers(status, *config.store, root, config.rank, n,
                                config.options.timeout);
  }
  if (std::all_of(kinds->begin(), kinds->end(),
                  [&](const std::string& k) { return k == mine; })) {
    return std::string();
  }
  std::vector<std::string> each;
  for (int r = 0; r < n; ++r)
    each.push_back(absl::StrCat("rank ", r, ": ", (*kinds)[r]));
  return absl::StrJoin(each, ", ");
}

absl::StatusOr<std::unique_ptr<DirectAllreduce>> ConnectDirectMesh(
    const CoreConfig& config, absl::string_view what, absl::Time deadline) {
  TcpMeshOptions options;
  options.rank = config.rank;
  options.world_size = config.world_size;
  options.bind_ip = config.bind_ip;
  options.store = config.store;
  options.key_root = absl::StrCat(config.key_prefix, "direct/");
  options.deadline = deadline;
  options.who = absl::StrCat("rank ", config.rank, "/", config.world_size);
  options.what = std::string(what);
  return DirectAllreduce::Connect(std::move(options));
}

absl::StatusOr<std::unique_ptr<Backend>> ConnectDirectBackend(
    const CoreConfig& config, std::string why, absl::Time deadline) {
  std::unique_ptr<DirectAllreduce> mesh;
  if (config.world_size > 1) {
    MUSTER_ASSIGN_OR_RETURN(mesh,
                            ConnectDirectMesh(config, "direct mesh", deadline));
  }
  return std::unique_ptr<Backend>(new DirectBackend(
      config.rank, config.world_size, std::move(why), std::move(mesh)));
}

}  // namespace muster::comm::internal
