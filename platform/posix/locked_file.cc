// POSIX (Linux) implementation of muster/platform/locked_file.h: open/mmap for
// the mapped file, flock for the locked one (released by the kernel when its
// holder dies), /proc/locks to name a lock's holders.
#include "muster/platform/locked_file.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace muster::platform {
namespace {

int Fd(intptr_t handle) { return static_cast<int>(handle); }

std::string Errno(absl::string_view what) {
  return absl::StrCat(what, ": ", std::strerror(errno));
}

// The command name of process `pid` ("comm_worker"), or "".
std::string CommandName(int64_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/comm"));
  std::string name;
  std::getline(in, name);
  return name;
}

}  // namespace

std::string AbsolutePathFromUri(absl::string_view address) {
  return !address.empty() && address[0] == '/' ? std::string(address) : "";
}

absl::StatusOr<std::unique_ptr<MappedFile>> MappedFile::Create(
    const std::string& path, absl::string_view contents,
    absl::string_view what) {
  const int fd =
      ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::UnavailableError(
        Errno(absl::StrCat("cannot create ", what, " ", path)));
  }
  if (::ftruncate(fd, static_cast<off_t>(contents.size())) != 0 ||
      ::pwrite(fd, contents.data(), contents.size(), 0) !=
          static_cast<ssize_t>(contents.size())) {
    const std::string why =
        Errno(absl::StrCat("cannot write ", what, " ", path));
    ::close(fd);
    return absl::UnavailableError(why);
  }
  void* map = ::mmap(nullptr, contents.size(), PROT_READ | PROT_WRITE,
                     MAP_SHARED, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) {
    return absl::UnavailableError(
        Errno(absl::StrCat("cannot map ", what, " ", path)));
  }
  return std::unique_ptr<MappedFile>(
      new MappedFile(static_cast<char*>(map), contents.size()));
}

MappedFile::~MappedFile() { ::munmap(data_, size_); }

absl::StatusOr<std::unique_ptr<LockedFile>> LockedFile::Open(
    const std::string& path, absl::string_view what) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::UnavailableError(
        Errno(absl::StrCat("cannot open ", what, " ", path)));
  }
  return std::unique_ptr<LockedFile>(new LockedFile(path, fd));
}

LockedFile::~LockedFile() { ::close(Fd(handle_)); }

absl::Status LockedFile::Lock(Mode mode) {
  while (::flock(Fd(handle_), mode == Mode::kExclusive ? LOCK_EX : LOCK_SH) !=
         0) {
    if (errno != EINTR) {
      return absl::UnavailableError(Errno(absl::StrCat("flock ", path_)));
    }
  }
  return absl::OkStatus();
}

void LockedFile::Unlock() { ::flock(Fd(handle_), LOCK_UN); }

absl::StatusOr<std::string> LockedFile::ReadAll() {
  struct stat st;
  if (::fstat(Fd(handle_), &st) != 0) {
    return absl::UnavailableError(Errno(absl::StrCat("fstat ", path_)));
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t r = ::pread(Fd(handle_), text.data() + done,
                              text.size() - done, static_cast<off_t>(done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    done += static_cast<size_t>(r);
  }
  text.resize(done);
  return text;
}

absl::Status LockedFile::WriteAll(absl::string_view text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t r = ::pwrite(Fd(handle_), text.data() + done,
                               text.size() - done, static_cast<off_t>(done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      return absl::UnavailableError(Errno(absl::StrCat("write ", path_)));
    }
    done += static_cast<size_t>(r);
  }
  if (::ftruncate(Fd(handle_), static_cast<off_t>(text.size())) != 0) {
    return absl::UnavailableError(Errno(absl::StrCat("truncate ", path_)));
  }
  return absl::OkStatus();
}

void LockedFile::Remove() { ::unlink(path_.c_str()); }

// /proc/locks lines: "1: FLOCK  ADVISORY  WRITE 4242 08:01:1234 0 EOF"; a
// waiter's line has "->" after the number. The file is matched by device
// (major:minor in hex) and inode.
std::vector<std::string> LockedFile::LockHolders() const {
  std::vector<std::string> out;
  struct stat st;
  if (::fstat(Fd(handle_), &st) != 0) return out;
  std::ifstream in("/proc/locks");
  std::string line;
  while (std::getline(in, line)) {
    std::vector<absl::string_view> f =
        absl::StrSplit(line, ' ', absl::SkipWhitespace());
    if (f.size() < 6 || (f.size() > 1 && f[1] == "->")) continue;
    std::vector<absl::string_view> id = absl::StrSplit(f[5], ':');
    uint32_t dev_major = 0;
    uint32_t dev_minor = 0;
    uint64_t inode = 0;
    int64_t pid = 0;
    if (id.size() != 3 || !absl::SimpleHexAtoi(id[0], &dev_major) ||
        !absl::SimpleHexAtoi(id[1], &dev_minor) ||
        !absl::SimpleAtoi(id[2], &inode) || !absl::SimpleAtoi(f[4], &pid)) {
      continue;
    }
    if (dev_major != major(st.st_dev) || dev_minor != minor(st.st_dev) ||
        inode != st.st_ino) {
      continue;
    }
    const std::string name = CommandName(pid);
    out.push_back(name.empty() ? absl::StrCat("pid ", pid)
                               : absl::StrCat("pid ", pid, " (", name, ")"));
  }
  return out;
}

}  // namespace muster::platform
