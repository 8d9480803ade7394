#include "comm/gloo/pair_sockets.h"

#include <dirent.h>
#include <netinet/in.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <utility>

namespace muster::comm::internal {

bool SameEndpoint(const sockaddr_storage& a, const sockaddr_storage& b) {
  if (a.ss_family != b.ss_family) return false;
  if (a.ss_family == AF_INET) {
    const auto& x = reinterpret_cast<const sockaddr_in&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in&>(b);
    return x.sin_port == y.sin_port && x.sin_addr.s_addr == y.sin_addr.s_addr;
  }
  if (a.ss_family == AF_INET6) {
    const auto& x = reinterpret_cast<const sockaddr_in6&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in6&>(b);
    return x.sin6_port == y.sin6_port &&
           std::memcmp(&x.sin6_addr, &y.sin6_addr, sizeof(in6_addr)) == 0;
  }
  return false;
}

namespace {

// The peer rank whose pair `fd` carries, or -1.
int PeerOf(int fd, const std::vector<sockaddr_storage>& own,
           const std::vector<sockaddr_storage>& theirs) {
  sockaddr_storage local{};
  sockaddr_storage remote{};
  socklen_t local_len = sizeof(local);
  socklen_t remote_len = sizeof(remote);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) {
    return -1;
  }
  // A listening socket has no peer: it can still match on its own name.
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&remote), &remote_len) != 0) {
    remote.ss_family = AF_UNSPEC;
  }
  for (size_t r = 0; r < own.size(); ++r) {
    if (SameEndpoint(local, own[r])) return static_cast<int>(r);
  }
  for (size_t r = 0; r < theirs.size(); ++r) {
    if (SameEndpoint(remote, theirs[r])) return static_cast<int>(r);
  }
  return -1;
}

}  // namespace

PairSockets PairSockets::Find(std::vector<sockaddr_storage> own,
                              std::vector<sockaddr_storage> theirs) {
  PairSockets result;
  result.own_ = std::move(own);
  result.theirs_ = std::move(theirs);
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return result;
  const int dir_fd = dirfd(dir);
  while (dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == dir_fd) continue;
    struct stat st;
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) {
      continue;
    }
    const int peer = PeerOf(static_cast<int>(fd), result.own_, result.theirs_);
    if (peer >= 0) result.found_.push_back({static_cast<int>(fd), peer});
  }
  closedir(dir);
  return result;
}

std::vector<int> PairSockets::FoundPeers() const {
  std::vector<int> peers;
  for (const Found& f : found_) peers.push_back(f.peer);
  return peers;
}

bool PairSockets::StillPair(const Found& found) const {
  return PeerOf(found.fd, own_, theirs_) == found.peer;
}

int PairSockets::ShutdownAll() const {
  int count = 0;
  for (const Found& f : found_) {
    if (StillPair(f) && shutdown(f.fd, SHUT_RDWR) == 0) ++count;
  }
  return count;
}

}  // namespace muster::comm::internal
