#include "comm/direct/direct_backend.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "comm/direct/direct_allreduce.h"
#include "comm/reduce/reduce.h"
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

// libmuster_comm's own mesh under `config.key_prefix` + "direct/" (`what`
// names it in errors) as a backend; `why` ends up in its UNIMPLEMENTED errors.
absl::StatusOr<std::unique_ptr<Backend>> ConnectMesh(const CoreConfig& config,
                                                     std::string why,
                                                     absl::string_view what,
                                                     absl::Time deadline) {
  std::unique_ptr<DirectAllreduce> mesh;
  if (config.world_size > 1) {
    TcpMeshOptions options;
    options.rank = config.rank;
    options.world_size = config.world_size;
    options.bind_ip = config.bind_ip;
    options.store = config.store;
    options.key_root = absl::StrCat(config.key_prefix, "direct/");
    options.deadline = deadline;
    options.who = absl::StrCat("rank ", config.rank, "/", config.world_size);
    options.what = std::string(what);
    MUSTER_ASSIGN_OR_RETURN(mesh, DirectAllreduce::Connect(std::move(options)));
  }
  return std::unique_ptr<Backend>(new DirectBackend(
      config.rank, config.world_size, std::move(why), std::move(mesh)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> ConnectDirectBackend(
    const CoreConfig& config, std::string why, absl::Time deadline) {
  return ConnectMesh(config, std::move(why), "direct mesh", deadline);
}

absl::StatusOr<std::unique_ptr<Backend>> ConnectDirectAllReduce(
    const CoreConfig& config, absl::Time deadline) {
  return ConnectMesh(config, "it runs the Gloo backend's small allreduces",
                     "direct allreduce mesh", deadline);
}

}  // namespace muster::comm::internal
