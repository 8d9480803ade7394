#include "comm/direct/direct_allreduce.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "comm/reduce/reduce.h"
#include "muster/common/status.h"

namespace muster::comm::internal {
namespace {

constexpr uint32_t kMagic = 0x4d444152;  // "MDAR"

// Precedes every message: a peer that called collectives in another order
// sends another sequence number or size, and is named instead of misread.
struct Header {
  uint32_t magic = 0;
  uint32_t reserved = 0;
  uint64_t seq = 0;
  uint64_t bytes = 0;
};

// What is left to send to, and to receive from, one peer.
struct Transfer {
  size_t sent = 0;  // Of sizeof(Header) + bytes.
  size_t received = 0;
  Header header;  // Received.
};

}  // namespace

absl::StatusOr<std::unique_ptr<DirectAllreduce>> DirectAllreduce::Connect(
    TcpMeshOptions options) {
  MUSTER_ASSIGN_OR_RETURN(std::vector<TcpMeshPeer> peers,
                          ConnectTcpMesh(options));
  absl::StatusOr<std::unique_ptr<Wakeup>> wake = Wakeup::Create();
  if (!wake.ok()) {
    return absl::UnavailableError(absl::StrCat(options.who, ": ", options.what,
                                               ": ", wake.status().message()));
  }
  return std::unique_ptr<DirectAllreduce>(new DirectAllreduce(
      options.rank, options.who, std::move(peers), std::move(*wake)));
}

DirectAllreduce::DirectAllreduce(int rank, std::string who,
                                 std::vector<TcpMeshPeer> peers,
                                 std::unique_ptr<Wakeup> wake)
    : rank_(rank),
      who_(std::move(who)),
      peers_(std::move(peers)),
      wake_(std::move(wake)) {}

void DirectAllreduce::Abort() {
  if (aborted_.exchange(true)) return;
  wake_->Signal();
  // The sockets stay open until the destructor, so these are ours.
  for (const TcpMeshPeer& p : peers_) p.socket.Shutdown();
}

absl::Status DirectAllreduce::Exchange(const void* data, size_t bytes,
                                       absl::Time deadline) {
  const int n = static_cast<int>(peers_.size());
  const size_t total = sizeof(Header) + bytes;
  Header mine;
  mine.magic = kMagic;
  mine.seq = seq_;
  mine.bytes = bytes;
  std::vector<Transfer> transfers(n);
  int pending = 2 * (n - 1);  // A send and a receive per peer.
  bool first = true;
  while (pending > 0) {
    if (aborted_.load()) {
      return absl::AbortedError(absl::StrCat(who_, ": aborted"));
    }
    poll_.Clear();
    poll_ranks_.clear();
    poll_.Add(wake_->handle(), PollSet::kRead);
    poll_ranks_.push_back(-1);
    for (int r = 0; r < n; ++r) {
      if (r == rank_) continue;
      const Transfer& t = transfers[r];
      uint8_t events = 0;
      if (t.sent < total) events |= PollSet::kWrite;
      if (t.received < total) events |= PollSet::kRead;
      if (events != 0) {
        poll_.Add(peers_[r].socket.handle(), events);
        poll_ranks_.push_back(r);
      }
    }
    if (first) {
      // Try every socket before sleeping: small messages usually go out at
      // once, and the peers' may already be here.
      poll_.MarkAllReady();
      first = false;
    } else {
      const int ms = PollMs(deadline);
      if (ms == 0) {
        return absl::DeadlineExceededError(
            absl::StrCat(who_, ": small allreduce timed out"));
      }
      absl::StatusOr<int> ready = poll_.Wait(ms);
      if (!ready.ok()) {
        return absl::UnavailableError(
            absl::StrCat(who_, ": ", ready.status().message()));
      }
      if (poll_.Ready(0) || aborted_.load()) {
        return absl::AbortedError(absl::StrCat(who_, ": aborted"));
      }
    }
    for (size_t i = 1; i < poll_.size(); ++i) {
      if (!poll_.Ready(i)) continue;
      const int r = poll_ranks_[i];
      Transfer& t = transfers[r];
      const Socket& socket = peers_[r].socket;
      if (t.sent < total && poll_.Writable(i)) {
        ConstBuffer buffers[2];
        int count = 0;
        if (t.sent < sizeof(Header)) {
          buffers[count++] = {reinterpret_cast<const char*>(&mine) + t.sent,
                              sizeof(Header) - t.sent};
          if (bytes > 0) buffers[count++] = {data, bytes};
        } else {
          buffers[count++] = {
              static_cast<const char*>(data) + (t.sent - sizeof(Header)),
              total - t.sent};
        }
        const IoResult w = socket.SendV(buffers, count);
        if (w.kind == IoResult::kDone) {
          t.sent += w.bytes;
          if (t.sent == total) --pending;
        } else if (w.kind == IoResult::kError) {
          return absl::UnavailableError(absl::StrCat(
              who_, ": sending to peer ", peers_[r].name, ": ", w.ErrorText()));
        }
      }
      if (t.received < total && poll_.Readable(i)) {
        while (t.received < total) {
          char* into;
          size_t want;
          if (t.received < sizeof(Header)) {
            into = reinterpret_cast<char*>(&t.header) + t.received;
            want = sizeof(Header) - t.received;
          } else {
            into = inbox_.data() + static_cast<size_t>(r) * bytes +
                   (t.received - sizeof(Header));
            want = total - t.received;
          }
          const IoResult got = socket.Recv(into, want);
          if (got.kind == IoResult::kClosed) {
            return absl::UnavailableError(
                absl::StrCat(who_, ": the connection to peer ", peers_[r].name,
                             " closed during a small allreduce"));
          }
          if (got.kind == IoResult::kWouldBlock) break;
          if (got.kind == IoResult::kError) {
            return absl::UnavailableError(
                absl::StrCat(who_, ": receiving from peer ", peers_[r].name,
                             ": ", got.ErrorText()));
          }
          const bool had_header = t.received >= sizeof(Header);
          t.received += got.bytes;
          if (!had_header && t.received >= sizeof(Header) &&
              (t.header.magic != kMagic || t.header.seq != seq_ ||
               t.header.bytes != bytes)) {
            return absl::InternalError(absl::StrCat(
                who_, ": peer ", peers_[r].name, " sent allreduce #",
                t.header.seq, " of ", t.header.bytes, " bytes while this rank ",
                "runs #", seq_, " of ", bytes,
                " bytes: the ranks called collectives in different orders or "
                "sizes"));
          }
        }
        if (t.received == total) --pending;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status DirectAllreduce::ExchangeAll(const void* data, size_t bytes,
                                          absl::Time deadline) {
  if (aborted_.load()) {
    return absl::AbortedError(absl::StrCat(who_, ": aborted"));
  }
  const size_t n = peers_.size();
  if (inbox_.size() < n * bytes) inbox_.resize(n * bytes);
  absl::Status exchanged = Exchange(data, bytes, deadline);
  ++seq_;
  if (!exchanged.ok()) {
    // Some bytes of this call may still be in flight: the mesh is out of
    // step for good. Aborting tells the peers at once.
    Abort();
    return exchanged;
  }
  if (bytes > 0) {
    std::memcpy(inbox_.data() + static_cast<size_t>(rank_) * bytes, data,
                bytes);
  }
  return absl::OkStatus();
}

absl::Status DirectAllreduce::Run(void* data, size_t count, DataType dtype,
                                  ReduceOp op, absl::Time deadline) {
  MUSTER_ASSIGN_OR_RETURN(ReduceFn fn, ReduceFunction(dtype, op));
  const int n = static_cast<int>(peers_.size());
  const size_t bytes = count * DataTypeSize(dtype);
  MUSTER_RETURN_IF_ERROR(ExchangeAll(data, bytes, deadline));
  // In rank order on every rank: the same additions in the same order.
  auto message = [&](int r) { return inbox_.data() + r * bytes; };
  fn(data, message(0), message(1), count);
  for (int r = 2; r < n; ++r) fn(data, data, message(r), count);
  return absl::OkStatus();
}

absl::Status DirectAllreduce::AllGather(const void* data, size_t bytes,
                                        void* out, absl::Time deadline) {
  MUSTER_RETURN_IF_ERROR(ExchangeAll(data, bytes, deadline));
  if (bytes > 0) std::memcpy(out, inbox_.data(), peers_.size() * bytes);
  return absl::OkStatus();
}

}  // namespace muster::comm::internal
