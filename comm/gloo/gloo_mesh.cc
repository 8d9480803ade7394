#include "comm/gloo/gloo_mesh.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "comm/gloo/gloo_device.h"
#include "comm/gloo/gloo_status.h"
#include "comm/gloo/gloo_store.h"
#include "comm/src/missing_peers.h"
#include "gloo/transport/buffer.h"
#include "gloo/transport/pair.h"
#include "muster/common/status.h"

namespace muster::comm::internal {
namespace {

// Gloo multiplies its timeout by 5 in places and adds it to clock readings:
// keep it far from overflow.
constexpr absl::Duration kMaxGlooTimeout = absl::Hours(24 * 30);
}  // namespace

std::chrono::milliseconds ToGlooTimeout(absl::Duration timeout) {
  return absl::ToChronoMilliseconds(
      std::clamp(timeout, absl::Milliseconds(1), kMaxGlooTimeout));
}

std::chrono::milliseconds Remaining(absl::Time deadline) {
  return ToGlooTimeout(deadline - absl::Now());
}

// Gloo sizes a pair's SO_SNDBUF to each message it sends from a bound buffer
// (the algorithm classes), only ever up, starting from nothing. Setting it at
// all turns off the kernel's autotuning, so the first small message pins the
// send buffer near the kernel's minimum (a few KB), and then:
//  - every later large transfer of an option-based collective on that pair
//    crawls (option-based sends leave SO_SNDBUF alone): a ring allreduce of
//    4 MB took 20x longer after one 8-byte AllreduceRing;
//  - a bound message that just fits Gloo's idea of the buffer does not fit
//    the kernel's (which counts its own overhead), and waits for an ACK:
//    raw Gloo's ring takes milliseconds instead of ~100 us at some sizes
//    between 4 and 64 KB (docs/performance.md).
// So every rank sends each peer one bound message as large as the kernel
// lets a send buffer be (net.core.wmem_max, at most 4 MB): Gloo then sizes
// every pair's buffer to the maximum once, and never again makes it smaller.
// It does so right before its first bound send (SendBufferSizer), not at
// connect: those messages (4 MB to each peer) took 0.3-0.4 s of a 4-rank
// connect on a loaded 2-core machine, most of an in-place recovery, and only
// Gloo's algorithm classes need them. Gloo's tcp::Pair, which holds the size,
// cannot be reached from Debian's headers (they include
// gloo/common/memory.h, which the package does not ship); this goes through
// Gloo's public Buffer API.
size_t SendBufferPinBytes() {
  size_t wmem_max = 212992;  // Linux's default.
  if (std::FILE* f = std::fopen("/proc/sys/net/core/wmem_max", "r")) {
    unsigned long value = 0;
    if (std::fscanf(f, "%lu", &value) == 1 && value > 0) wmem_max = value;
    std::fclose(f);
  }
  return std::min<size_t>(wmem_max, 4 << 20);
}

SendBufferSizer::SendBufferSizer(PeerContext& context, size_t bytes)
    : bytes_(bytes),
      slot_(context.nextSlot()),
      in_(context.size > 1 ? new char[bytes] : nullptr) {
  for (int r = 0; r < context.size; ++r) {
    if (r == context.rank) continue;
    recvs_.push_back(
        context.getPair(r)->createRecvBuffer(slot_, in_.get(), bytes_));
  }
}

SendBufferSizer::~SendBufferSizer() {
  sends_.clear();
  recvs_.clear();
}

void SendBufferSizer::SizeOnce(PeerContext& context) {
  if (sized_ || context.size < 2) return;
  if (sends_.empty()) {
    out_ = std::make_unique<char[]>(bytes_);  // Zeros: nobody reads them.
    for (int r = 0; r < context.size; ++r) {
      if (r == context.rank) continue;
      sends_.push_back(
          context.getPair(r)->createSendBuffer(slot_, out_.get(), bytes_));
    }
  }
  for (auto& send : sends_) send->send();
  for (auto& send : sends_) send->waitSend();
  sized_ = true;
  out_.reset();  // Written: the send buffers never send again.
}

namespace {

// Each peer's listening address for its pair with this rank, as Gloo prints
// it ("[10.0.0.2]:41234"), indexed by rank (empty where unknown): what error
// messages name. Best effort: relies on connectFullMesh's key layout (the key
// "<rank>" holds that rank's address for each of its peers, in rank order,
// itself left out), and names nobody if that ever changes.
std::vector<std::string> ReadPeerNames(store::Store& store,
                                       const std::string& key_prefix,
                                       PeerContext& context) {
  const int n = context.size;
  std::vector<std::string> names(n);
  if (n < 2) return names;
  for (int r = 0; r < n; ++r) {
    if (r == context.rank) continue;
    absl::StatusOr<std::string> value =
        store.Get(absl::StrCat(key_prefix, r), absl::ZeroDuration());
    if (!value.ok() || value->empty() || value->size() % (n - 1) != 0) {
      continue;
    }
    std::vector<char> all(value->begin(), value->end());
    (void)CallGloo(GlooStage::kConnect, "parsing a peer address", {}, [&] {
      names[r] = GlooAddressName(context.extractAddress(all, r));
    });
  }
  return names;
}

}  // namespace

// Joins the full mesh published under `key_prefix`, makes it abortable
// (AbortableTransport) and readies the sizing of its send buffers
// (SendBufferSizer).
absl::StatusOr<GlooMesh> ConnectMesh(
    const CoreConfig& config,
    std::shared_ptr<::gloo::transport::Device>& device,
    const std::string& key_prefix, absl::string_view doing, size_t pin_bytes,
    absl::Time deadline) {
  const std::string who =
      absl::StrCat("rank ", config.rank, "/", config.world_size);
  const absl::Duration timeout = config.options.timeout;
  GlooMesh mesh;
  mesh.context = std::make_shared<PeerContext>(config.rank, config.world_size);
  mesh.context->setTimeout(ToGlooTimeout(timeout));
  GlooStore gloo_store(config.store, key_prefix,
                       std::max(deadline - absl::Now(), absl::Milliseconds(1)));
  absl::Status connected =
      CallGloo(GlooStage::kConnect, absl::StrCat(who, ": ", doing), {},
               [&] { mesh.context->connectFullMesh(gloo_store, device); });
  if (!connected.ok()) {
    if (absl::IsDeadlineExceeded(connected)) {
      return DescribeMissingPeers(connected, *config.store, key_prefix,
                                  config.rank, config.world_size, timeout);
    }
    return connected;
  }
  mesh.peer_names = ReadPeerNames(*config.store, key_prefix, *mesh.context);
  mesh.transport =
      std::make_shared<AbortableTransport>(mesh.context->transport());
  mesh.context->set_transport(mesh.transport);
  if (!GlooHasBoundBuffers()) return mesh;  // Nothing to size (gloo_device.h).
  MUSTER_RETURN_IF_ERROR(CallGloo(
      GlooStage::kConnect,
      absl::StrCat(who, ": readying the sizing of its send buffers"),
      mesh.peer_names, [&] {
        mesh.sizer =
            std::make_unique<SendBufferSizer>(*mesh.context, pin_bytes);
      }));
  return mesh;
}

}  // namespace muster::comm::internal
