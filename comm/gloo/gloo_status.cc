#include "comm/gloo/gloo_status.h"

#include <new>
#include <stdexcept>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gloo/common/logging.h"
#include "muster/common/status.h"

namespace muster::comm::internal {
namespace {

// Whether `address` occurs in `message` as a whole: "[127.0.0.1]:4000" not
// inside
// "[127.0.0.1]:40001".
bool ContainsAddress(absl::string_view message, absl::string_view address) {
  for (size_t at = message.find(address); at != absl::string_view::npos;
       at = message.find(address, at + 1)) {
    const size_t end = at + address.size();
    if (end == message.size() || !absl::ascii_isdigit(message[end])) {
      return true;
    }
  }
  return false;
}

// "[10.0.0.2]:" from "[10.0.0.2]:41234"; empty when the text has another form.
absl::string_view HostPart(absl::string_view address) {
  const size_t close = address.find("]:");
  return close == absl::string_view::npos ? absl::string_view()
                                          : address.substr(0, close + 2);
}

// The peer named by Gloo's message, or -1. A pair prints the address of the
// socket at the other end: the peer's listening address on the side that
// connected, but an ephemeral port on the side that accepted. So: the exact
// listening address first, else the host when exactly one peer has it (always
// so with one rank per node, never with several ranks on the peer's node).
int FindPeer(absl::string_view message,
             absl::Span<const std::string> peer_addresses) {
  for (size_t r = 0; r < peer_addresses.size(); ++r) {
    if (!peer_addresses[r].empty() &&
        ContainsAddress(message, peer_addresses[r])) {
      return static_cast<int>(r);
    }
  }
  int found = -1;
  for (size_t r = 0; r < peer_addresses.size(); ++r) {
    const absl::string_view host = HostPart(peer_addresses[r]);
    if (host.empty() || !absl::StrContains(message, host)) continue;
    if (found >= 0) return -1;  // Several peers on that host: cannot tell.
    found = static_cast<int>(r);
  }
  return found;
}

absl::Status FromIoException(absl::string_view what, absl::string_view message,
                             absl::Span<const std::string> peer_addresses) {
  std::string text = absl::StrCat(what, ": ", message);
  const int peer = FindPeer(message, peer_addresses);
  if (peer >= 0) absl::StrAppend(&text, " (peer rank ", peer, ")");
  // Gloo's pairs say "timeout"/"Timed out" for every deadline they enforce
  // (connect, read, write, the end-to-end timeout of an operation) and close
  // the pair afterwards.
  const std::string lower = absl::AsciiStrToLower(message);
  if (absl::StrContains(lower, "timeout") ||
      absl::StrContains(lower, "timed out")) {
    return absl::DeadlineExceededError(text);
  }
  // The connection existed and the peer went away: the process died or shut
  // down mid-collective.
  if (absl::StrContains(lower, "closed by peer") ||
      absl::StrContains(lower, "reset by peer") ||
      absl::StrContains(lower, "broken pipe")) {
    return absl::AbortedError(text);
  }
  return absl::UnavailableError(text);
}

absl::Status FromOtherGlooError(GlooStage stage, absl::string_view what,
                                absl::string_view message) {
  std::string text = absl::StrCat(what, ": ", message);
  // Making the device only resolves names and binds: a failure there is the
  // configuration.
  if (stage == GlooStage::kDevice) return absl::FailedPreconditionError(text);
  return absl::InternalError(text);
}

}  // namespace

StoreError::StoreError(absl::Status status)
    : ::gloo::IoException(std::string(status.message())),
      status_(std::move(status)) {}

absl::Status StatusFromCurrentException(
    GlooStage stage, absl::string_view what,
    absl::Span<const std::string> peer_addresses) {
  try {
    throw;
  } catch (const StoreError& e) {
    return Annotate(e.status(), what);
  } catch (const ::gloo::IoException& e) {
    return FromIoException(what, e.what(), peer_addresses);
  } catch (const ::gloo::Exception& e) {
    return FromOtherGlooError(stage, what, e.what());
  } catch (const ::gloo::EnforceNotMet& e) {
    return FromOtherGlooError(stage, what, e.what());
  } catch (const std::bad_alloc& e) {
    return absl::ResourceExhaustedError(absl::StrCat(what, ": out of memory"));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what()));
  } catch (...) {
    return absl::UnknownError(absl::StrCat(what, ": unknown exception"));
  }
}

}  // namespace muster::comm::internal
