#include "platform/src/net_common.h"

#ifndef _WIN32
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#endif

#include <algorithm>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace muster::platform {

std::optional<IpBytes> ParseIpAddress(absl::string_view text) {
  const std::string s(text);
  IpBytes b;
  if (inet_pton(AF_INET, s.c_str(), b.bytes.data()) == 1) {
    b.family = IpFamily::kIpv4;
    return b;
  }
  if (inet_pton(AF_INET6, s.c_str(), b.bytes.data()) == 1) {
    b.family = IpFamily::kIpv6;
    return b;
  }
  return std::nullopt;
}

bool IsLoopbackAddress(absl::string_view text) {
  return absl::StartsWith(text, "127.") || text == "::1";
}

namespace net_internal {
namespace {

std::string GaiText(int rc) {
  switch (rc) {
    case EAI_NONAME:
      return "EAI_NONAME: no such name";
    case EAI_AGAIN:
      return "EAI_AGAIN: the name server did not answer (temporary failure)";
    case EAI_FAIL:
      return "EAI_FAIL: the name server failed";
#ifdef EAI_NODATA
    case EAI_NODATA:
      return "EAI_NODATA: the name has no address";
#endif
    case EAI_FAMILY:
      return "EAI_FAMILY: no address of a usable family";
    default:
      return gai_strerror(rc);
  }
}

Resolution Answer(int rc, std::vector<std::string> addresses) {
  Resolution r;
  r.ok = rc == 0;
  if (rc != 0) {
    r.error = GaiText(rc);
    r.message = gai_strerror(rc);
  }
  r.addresses = std::move(addresses);
  return r;
}

// getaddrinfo's answer as distinct numeric addresses, in its order.
Resolution Lookup(const std::string& host, bool numeric_only) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = numeric_only ? AI_NUMERICHOST : 0;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  std::vector<std::string> out;
  if (rc == 0) {
    for (const addrinfo* a = res; a != nullptr; a = a->ai_next) {
      if (a->ai_family != AF_INET && a->ai_family != AF_INET6) continue;
      std::string text = SockaddrToString(a->ai_addr);
      if (std::find(out.begin(), out.end(), text) == out.end()) {
        out.push_back(std::move(text));
      }
    }
    freeaddrinfo(res);
  }
  return Answer(rc, std::move(out));
}

struct DnsAnswer {
  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  Resolution resolution ABSL_GUARDED_BY(mu);
};

}  // namespace

std::string SockaddrToString(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (sa->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf,
              sizeof(buf));
  } else if (sa->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr,
              buf, sizeof(buf));
  }
  return buf;
}

bool ToSockaddr(const std::string& address, int port, sockaddr_storage* ss,
                socklen_t* len) {
  *ss = sockaddr_storage{};
  auto* in = reinterpret_cast<sockaddr_in*>(ss);
  auto* in6 = reinterpret_cast<sockaddr_in6*>(ss);
  if (inet_pton(AF_INET, address.c_str(), &in->sin_addr) == 1) {
    in->sin_family = AF_INET;
    in->sin_port = htons(static_cast<uint16_t>(port));
    *len = sizeof(sockaddr_in);
    return true;
  }
  if (inet_pton(AF_INET6, address.c_str(), &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(static_cast<uint16_t>(port));
    *len = sizeof(sockaddr_in6);
    return true;
  }
  return false;
}

Resolution ResolveHost(const std::string& host, absl::Duration timeout) {
  Resolution numeric = Lookup(host, /*numeric_only=*/true);
  if (numeric.ok) return numeric;
  // A name: looked up on a detached thread, which may outlive this wait and
  // finishes into memory shared with nobody else.
  auto answer = std::make_shared<DnsAnswer>();
  std::thread([answer, host] {
    Resolution r = Lookup(host, /*numeric_only=*/false);
    absl::MutexLock lock(&answer->mu);
    answer->resolution = std::move(r);
    answer->done = true;
  }).detach();
  absl::MutexLock lock(&answer->mu);
  if (!answer->mu.AwaitWithTimeout(absl::Condition(&answer->done), timeout)) {
    Resolution r = Answer(EAI_AGAIN, {});
    r.timed_out = true;
    return r;
  }
  return answer->resolution;
}

}  // namespace net_internal
}  // namespace muster::platform
